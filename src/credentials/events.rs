//! What happens to people's credentials, told to operators: each event is a metric (by
//! upstream and event) and an audit record (whose, which upstream, by whom, why), never a
//! token. Calls are audited by the call stack; these are the events around them.

use super::{Refused, UserCredentials};
use crate::telemetry::audit::{Audit, Record};

/// One credential event.
#[derive(Debug, Clone, Copy)]
pub(super) struct Event<'a> {
    /// The person's owner key (`api_key:alice`), or `None` when a refused link named nobody.
    pub owner: Option<&'a str>,
    pub upstream: &'a str,
    /// `connected`, `callback_refused`, `refresh_failed`, `revoked`.
    pub event: &'static str,
    /// A stable code saying why (`invalid_grant`, `unreachable`, `other_browser`, …).
    pub reason: Option<&'static str>,
    /// Who did it when it was not the person (`admin`), for a revocation.
    pub by: Option<&'a str>,
    /// What the authorization server said to a revocation (`revoked`, `no_endpoint`,
    /// `failed`).
    pub at_provider: Option<&'static str>,
}

impl<'a> Event<'a> {
    pub fn new(owner: Option<&'a str>, upstream: &'a str, event: &'static str) -> Self {
        Self {
            owner,
            upstream,
            event,
            reason: None,
            by: None,
            at_provider: None,
        }
    }

    pub fn because(mut self, reason: &'static str) -> Self {
        self.reason = Some(reason);
        self
    }
}

impl UserCredentials {
    /// Where credential events are audited (set with the call stack).
    pub fn set_audit(&self, audit: Option<Audit>) {
        *self.audit.lock() = audit;
    }

    /// Counts `e` and writes its audit record.
    pub(super) fn event(&self, e: Event<'_>) {
        self.metrics.count(e.upstream, e.event);
        let Some(audit) = self.audit.lock().clone() else {
            return;
        };
        let (kind, name) = e
            .owner
            .and_then(|o| o.split_once(':'))
            .unwrap_or(("unknown", e.owner.unwrap_or("")));
        let failed = matches!(e.event, "callback_refused" | "refresh_failed");
        audit.record(Record {
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            identity: name.to_owned(),
            identity_kind: identity_kind(kind),
            method: "credentials/event",
            name: e.event.to_owned(),
            upstream: Some(e.upstream.to_owned()),
            decision: if failed { "refused" } else { "allowed" },
            reason: e.reason,
            outcome: if failed { "error" } else { "ok" },
            latency_ms: 0.0,
            correlation_id: String::new(),
            arguments_sha256: None,
            arguments: e.at_provider.map(|p| serde_json::json!({"at_provider": p})),
            plan_id: None,
            approver: e.by.map(str::to_owned),
            on_behalf_of: None,
            guardrails: None,
            cut: None,
        });
    }
}

/// The audit record's `identity_kind` of an owner key's kind.
fn identity_kind(kind: &str) -> &'static str {
    match kind {
        "api_key" => "api_key",
        "jwt" => "jwt",
        "client_cert" => "client_cert",
        "local" => "local",
        _ => "unknown",
    }
}

impl Refused {
    /// A stable code for the audit record and logs.
    pub fn code(&self) -> &'static str {
        match self {
            Refused::BadState => "bad_state",
            Refused::Expired => "expired",
            Refused::Used => "used",
            Refused::OtherUpstream => "other_upstream",
            Refused::NotYou(_) => "not_you",
            Refused::OtherBrowser => "other_browser",
            Refused::TooManyProofs => "too_many_proofs",
            Refused::EmptyToken | Refused::TokenTooLong | Refused::TokenMalformed => {
                "malformed_token"
            }
            Refused::Store => "store",
            Refused::Denied(_) => "denied",
            Refused::NoCode => "no_code",
            Refused::OAuth(_) => "authorization_server",
            Refused::IdToken(_) => "id_token",
        }
    }
}
