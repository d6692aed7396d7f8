//! Connect: a call to an upstream whose credential is per user (`per_user`) runs with the
//! caller's own token. Without one, the caller's human is sent to fedgate's connect page — by
//! a URL-mode `elicitation/create` on the call's stream when the caller declared URL
//! elicitation (the call then waits for the page and runs once), else by MCP's URL-required
//! error with a `blocked` plan. A stateless-era caller gets an input-required result with the
//! URL request, and its retry runs the call once the person has connected. A token the
//! upstream refuses (401) is refreshed once when it is an OAuth token with a refresh token,
//! else dropped and asked for again once. In the upstream terminal
//! before retry and breaker: a person without a token is no failure of the upstream.

use std::{sync::Arc, time::Duration};

use rmcp::model::{
    ClientResult, CustomNotification, ServerNotification, ServerRequest, ServerResult,
};
use serde_json::{Value, json};

use super::{
    Call, CallError, CallFuture, ConnectRefusal, Exposed, Op,
    reentry::Reentry,
    step::{CallService, Step},
};
use crate::{
    credentials::{Ask, OAuthTarget, PersonToken, RETRY_PREFIX, UserCredentials},
    policy::identity::IdentityKind,
    secret::Secret,
    stores::idempotency::META_KEY as IDEMPOTENCY_KEY,
    upstream::http_client::{PERSON_NEEDS_SCOPE, PERSON_REJECTED},
};

#[derive(Debug, Clone)]
pub struct Connect {
    pub credentials: Option<Arc<UserCredentials>>,
    /// How long a caller's human has to connect while the call waits.
    pub wait: Duration,
    /// Where a call that waited for its person goes once they have connected: back in at the
    /// top, so it runs only if everything still allows it then.
    pub reentry: Reentry,
}

pub(super) fn refusal(code: &'static str, upstream: &str, message: String) -> CallError {
    CallError::Connect(Box::new(ConnectRefusal {
        code,
        upstream: upstream.to_owned(),
        url: None,
        message,
        as_error: false,
    }))
}

/// An anonymous caller has no account of its own to act with.
pub(super) fn anonymous(upstream: &str) -> CallError {
    refusal(
        "credential_anonymous",
        upstream,
        format!(
            "upstream `{upstream}` acts with each caller's own account; anonymous callers have none"
        ),
    )
}

/// A credential that could not be read or refreshed: the store is down, or the authorization
/// server did not answer a refresh that was due (the credential is kept; try again).
pub(super) fn store_down(e: crate::credentials::CredentialError) -> CallError {
    if let crate::credentials::CredentialError::Provider { upstream, .. } = &e {
        let upstream = upstream.clone();
        return CallError::Connect(Box::new(ConnectRefusal {
            code: "credential_provider_unavailable",
            upstream,
            url: None,
            message: e.to_string(),
            as_error: false,
        }));
    }
    tracing::warn!("per-user credentials: {e}");
    CallError::StoreUnavailable {
        feature: "per-user credentials",
    }
}

impl Step for Connect {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        let per_user = call.target.as_ref().and_then(|t| t.route()).and_then(|r| {
            let (u, spec) = (&r.upstream, &r.spec);
            let credential = &spec.credential.as_ref()?.credential;
            credential.per_user()?;
            let oauth = credential.per_user_oauth().map(|o| {
                (
                    o.clone(),
                    spec.transport.url().unwrap_or_default().to_owned(),
                )
            });
            Some((u.name().to_owned(), oauth))
        });
        let (Some(creds), Some((upstream, oauth))) = (self.credentials.clone(), per_user) else {
            return inner.call(call);
        };
        let mut inner = inner.clone();
        let reentry = self.reentry.clone();
        let wait = self.wait;
        let mut call = call;
        let retry = take_retry(&mut call.op);
        Box::pin(async move {
            if call.identity.kind == IdentityKind::Anonymous {
                return Err(anonymous(&upstream));
            }
            let owner = call.identity.key();
            // A stateless-era retry of our question: its answer, if the state is this
            // person's (else the question is simply asked again).
            let mut answered = retry
                .filter(|(state, _)| creds.is_retry_of(state, &owner, &upstream))
                .map(|(_, accepted)| accepted);
            let target = oauth.as_ref().map(|(settings, url)| OAuthTarget {
                settings,
                upstream_url: url,
            });
            // The credential connected first, then the one asked for once it was refused.
            for _ in 0..2 {
                let mut token = match creds
                    .token(&owner, &upstream, target)
                    .await
                    .map_err(store_down)?
                {
                    Some(t) => t,
                    None => {
                        let asked =
                            ask_person(&creds, &call, &upstream, wait, answered.take()).await?;
                        if let Some(question) = asked {
                            return Ok(question);
                        }
                        return resume(&reentry, call, &upstream).await;
                    }
                };
                // An OAuth token the upstream refuses is refreshed once before the person is
                // asked again.
                let mut refreshed = false;
                loop {
                    let mut c = call.clone();
                    c.decided.act_as(PersonToken(token.clone()));
                    match inner.call(c).await {
                        Err(CallError::UpstreamRefused { error, .. })
                            if error.code.0 == PERSON_NEEDS_SCOPE =>
                        {
                            let wanted = error
                                .data
                                .as_ref()
                                .and_then(|d| d["scope"].as_str())
                                .unwrap_or_default();
                            let as_error = declared_elicitation(&call);
                            return Err(step_up(
                                &creds, &owner, &upstream, wanted, target, as_error,
                            )
                            .await);
                        }
                        Err(CallError::UpstreamRefused { error, .. })
                            if error.code.0 == PERSON_REJECTED =>
                        {
                            let fresh = creds
                                .rejected(&owner, &upstream, &token, target.filter(|_| !refreshed))
                                .await
                                .map_err(store_down)?;
                            match fresh {
                                Some(t) => {
                                    token = t;
                                    refreshed = true;
                                }
                                None => break,
                            }
                        }
                        other => {
                            // Bookkeeping: the answer does not wait for the store's write.
                            let (creds, owner, upstream) =
                                (creds.clone(), owner.clone(), upstream.clone());
                            tokio::spawn(async move { creds.touch(&owner, &upstream).await });
                            return other;
                        }
                    }
                }
            }
            Err(refusal(
                "credential_rejected",
                &upstream,
                format!("upstream `{upstream}` refused the credential you connected, twice"),
            ))
        })
    }
}

/// The person has no token for `upstream`: their answer to our question (a stateless-era
/// retry), else the question — on the call's stream, waiting for them, or the link in a
/// refusal. `Ok(None)` once they have connected; `Ok(Some(question))` for a stateless-era
/// caller, who retries with the answer.
pub(super) async fn ask_person(
    creds: &UserCredentials,
    call: &Call,
    upstream: &str,
    wait: Duration,
    answered: Option<bool>,
) -> Result<Option<ServerResult>, CallError> {
    match answered {
        Some(false) => Err(declined(upstream)),
        Some(true) => {
            connected(creds, call, upstream, wait).await?;
            Ok(None)
        }
        None => match obtain(creds, call, upstream, &call.identity.key(), wait).await? {
            Obtained::Connected => Ok(None),
            Obtained::Ask(question) => Ok(Some(*question)),
        },
    }
}

/// The upstream wants scopes the person's credential lacks (403 `insufficient_scope`): a link
/// to sign in again asking for them too — unless the sign-in that made this credential asked
/// for them already, when asking again would only go round (the authorization server does
/// not grant them, or the upstream wants something else): that is said instead. The
/// credential is kept either way; its other calls go on working.
pub(super) async fn step_up(
    creds: &UserCredentials,
    owner: &str,
    upstream: &str,
    wanted: &str,
    target: Option<OAuthTarget<'_>>,
    as_error: bool,
) -> CallError {
    let wanted: Vec<String> = wanted
        .split(' ')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let shown = if wanted.is_empty() {
        "a scope it does not name".to_owned()
    } else {
        format!("`{}`", wanted.join(" "))
    };
    let Some(_) = target else {
        return refusal(
            "credential_insufficient",
            upstream,
            format!(
                "upstream `{upstream}` says the token you connected lacks {shown}: disconnect it (`fedgate__disconnect`) and connect one that has it"
            ),
        );
    };
    let asked = match creds.asked_scopes(owner, upstream).await {
        Ok(a) => a.unwrap_or_default(),
        Err(e) => return store_down(e),
    };
    if wanted.is_empty() || wanted.iter().all(|w| asked.contains(w)) {
        return refusal(
            "credential_scope_unavailable",
            upstream,
            format!(
                "upstream `{upstream}` still says your account lacks {shown}, which your last sign-in asked for already: the authorization server did not grant it, so signing in again would not help — ask the gateway's operator"
            ),
        );
    }
    let ask = match creds.ask_with_scopes(owner, upstream, wanted) {
        Ok(a) => a,
        Err(e) => {
            return CallError::Internal {
                detail: format!("connect link: {e}"),
            };
        }
    };
    CallError::Connect(Box::new(ConnectRefusal {
        code: "credential_scope_required",
        upstream: upstream.to_owned(),
        message: format!(
            "your `{upstream}` account needs more access ({shown}) for this call: open {} and sign in again (the link works once, for 10 minutes), then call the tool again",
            ask.url
        ),
        url: Some((ask.url, ask.elicitation_id)),
        as_error,
    }))
}

/// A call whose person connected while it waited, sent in again at the top as its caller, one
/// level deeper: the roles, stage, tier, hooks and limits that decide it are those of now, and
/// its own connect step finds the token just stored. The approval it ran under (if any) is
/// kept; the idempotency key stays with the waiting call, which records the answer.
pub(super) async fn resume(
    reentry: &Reentry,
    mut call: Call,
    upstream: &str,
) -> Result<ServerResult, CallError> {
    let exposed = call.target.take().map(|t| t.exposed);
    match (&mut call.op, &exposed) {
        (Op::CallTool(p), Some(Exposed::Tool(name))) => p.name = name.clone().into(),
        (Op::GetPrompt(p), Some(Exposed::Prompt(name))) => p.name.clone_from(name),
        (Op::ReadResource(p), Some(Exposed::Resource(uri))) => p.uri.clone_from(uri),
        _ => {}
    }
    let approved = call.decided.approved().map(str::to_owned);
    call.decided = Default::default();
    if let Some(plan) = approved {
        call.decided.approve(plan);
    }
    call.meta.remove(IDEMPOTENCY_KEY);
    call.depth = call.depth.saturating_add(1);
    match reentry.call(call).await {
        Err(CallError::NotAuthorized { .. }) => Err(refusal(
            "credential_connected_not_allowed",
            upstream,
            format!(
                "your `{upstream}` account is connected, but while you connected it your roles stopped allowing this call: it did not run"
            ),
        )),
        other => other,
    }
}

/// The `inputRequests` key of the connect question of a stateless-era caller.
const INPUT_KEY: &str = "fedgate-connect";

/// Takes our connect answer off a stateless-era retry: the state and whether the human
/// accepted. Anything else the retry carries (an upstream's parked state) stays.
pub(super) fn take_retry(op: &mut Op) -> Option<(String, bool)> {
    let (state, answers) = match op {
        Op::CallTool(p) => (&mut p.request_state, &mut p.input_responses),
        Op::GetPrompt(p) => (&mut p.request_state, &mut p.input_responses),
        Op::ReadResource(p) => (&mut p.request_state, &mut p.input_responses),
        _ => return None,
    };
    if !state.as_deref()?.starts_with(RETRY_PREFIX) {
        return None;
    }
    let state = state.take()?;
    let answer = answers.as_mut().and_then(|a| a.remove(INPUT_KEY));
    if answers.as_ref().is_some_and(|a| a.is_empty()) {
        *answers = None;
    }
    let accepted = answer
        .and_then(|a| serde_json::to_value(a).ok())
        .is_some_and(|a| a["action"] == "accept");
    Some((state, accepted))
}

fn declined(upstream: &str) -> CallError {
    refusal(
        "credential_declined",
        upstream,
        format!("connecting your `{upstream}` account was declined; nothing ran"),
    )
}

/// Whether the caller declared elicitation at all.
pub(super) fn declared_elicitation(call: &Call) -> bool {
    call.downstream.as_ref().is_some_and(|d| {
        d.capabilities
            .as_ref()
            .is_some_and(|c| c.elicitation.is_some())
    })
}

/// Whether the caller declared URL-mode elicitation.
fn can_open_urls(call: &Call) -> bool {
    call.downstream.as_ref().is_some_and(|d| {
        d.capabilities
            .as_ref()
            .and_then(|c| c.elicitation.as_ref())
            .is_some_and(|e| e.url.is_some())
    })
}

enum Obtained {
    /// The person connected while the call waited.
    Connected,
    /// The question for a stateless-era caller: it retries once connected.
    Ask(Box<ServerResult>),
}

/// Gets the person's token: asks them on the call's stream and waits, answers a stateless-era
/// caller with the question, or refuses with the link.
async fn obtain(
    creds: &UserCredentials,
    call: &Call,
    upstream: &str,
    owner: &str,
    wait: Duration,
) -> Result<Obtained, CallError> {
    let internal = |detail: &dyn std::fmt::Display| CallError::Internal {
        detail: format!("connect link: {detail}"),
    };
    let ask = creds.ask(owner, upstream).map_err(|e| internal(&e))?;
    let (Some(d), true) = (call.downstream.as_ref(), can_open_urls(call)) else {
        // The call ends here: the person connects, then the tool is called again.
        return Err(CallError::Connect(Box::new(ConnectRefusal {
            code: "credential_required",
            upstream: upstream.to_owned(),
            message: format!(
                "you have not connected your `{upstream}` account yet: open {} and connect it (the link works once, for 10 minutes), then call the tool again",
                ask.url
            ),
            url: Some((ask.url, ask.elicitation_id)),
            as_error: declared_elicitation(call),
        })));
    };
    // The call waits on this question (or, stateless, is retried with its answer).
    let message = format!(
        "you have not connected your `{upstream}` account yet: connect it on the page that opens; the call goes on once you have"
    );
    let params = question(&ask, &message);
    if d.modern {
        let state = creds
            .retry_state(owner, upstream, &ask)
            .map_err(|e| internal(&e))?;
        return serde_json::from_value(json!({
            "resultType": "input_required",
            "inputRequests": {INPUT_KEY: {"method": "elicitation/create", "params": params}},
            "requestState": state,
        }))
        .map(|r| Obtained::Ask(Box::new(ServerResult::InputRequiredResult(r))))
        .map_err(|e| internal(&e));
    }
    let request: ServerRequest =
        serde_json::from_value(json!({"method": "elicitation/create", "params": params}))
            .map_err(|e| internal(&e))?;
    let answer = tokio::time::timeout(wait, d.request(request))
        .await
        .map_err(|_| not_connected_in_time(upstream, wait))?
        .map_err(|e| CallError::NoClientInput {
            detail: e.to_string(),
        })?;
    let accepted = match answer {
        ClientResult::ElicitResult(r) => {
            serde_json::to_value(r).unwrap_or_default()["action"] == "accept"
        }
        _ => false,
    };
    if !accepted {
        return Err(declined(upstream));
    }
    connected(creds, call, upstream, wait).await?;
    let done = ServerNotification::CustomNotification(CustomNotification::new(
        "notifications/elicitation/complete",
        Some(json!({"elicitationId": ask.elicitation_id})),
    ));
    let _ = d.client.notify(done).await;
    Ok(Obtained::Connected)
}

/// The URL-mode elicitation that sends the person to the connect page.
fn question(ask: &Ask, message: &str) -> Value {
    json!({
        "mode": "url",
        "message": message,
        "url": ask.url,
        "elicitationId": ask.elicitation_id,
    })
}

/// Waits, at most `wait`, for the person to finish the connect page.
async fn connected(
    creds: &UserCredentials,
    call: &Call,
    upstream: &str,
    wait: Duration,
) -> Result<Secret, CallError> {
    let owner = &call.identity.key();
    let token = tokio::select! {
        t = creds.wait_connected(owner, upstream, wait) => t.map_err(store_down)?,
        _ = call.ct.cancelled() => return Err(CallError::Cancelled),
    };
    token.ok_or_else(|| not_connected_in_time(upstream, wait))
}

/// The person did not connect while the call waited: said as what it is, not as a client that
/// gave no input.
pub(super) fn not_connected_in_time(upstream: &str, wait: Duration) -> CallError {
    refusal(
        "credential_not_connected_in_time",
        upstream,
        format!(
            "your `{upstream}` account was not connected within {} s, so the call did not run: call the tool again for a new link",
            wait.as_secs()
        ),
    )
}
