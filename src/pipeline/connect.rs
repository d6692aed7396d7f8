//! Connect: a call to an upstream whose credential is per user (`per_user`) runs with the
//! caller's own token. Without one, the caller's human is sent to fedgate's connect page — by
//! a URL-mode `elicitation/create` on the call's stream when the caller declared URL
//! elicitation (the call then waits for the page and runs once), else by MCP's URL-required
//! error with a `blocked` plan. A token the upstream refuses (401) is dropped and asked for
//! again once. In the upstream terminal before retry and breaker: a person without a token is
//! no failure of the upstream.

use std::{sync::Arc, time::Duration};

use rmcp::model::{ClientResult, CustomNotification, ServerNotification, ServerRequest};
use serde_json::json;

use super::{
    Call, CallError, CallFuture, ConnectRefusal,
    step::{CallService, Step},
};
use crate::{
    credentials::{PersonToken, UserCredentials},
    policy::identity::IdentityKind,
    secret::Secret,
    upstream::http_client::PERSON_REJECTED,
};

#[derive(Debug, Clone)]
pub struct Connect {
    pub credentials: Option<Arc<UserCredentials>>,
    /// How long a caller's human has to connect while the call waits.
    pub wait: Duration,
}

fn refusal(code: &'static str, upstream: &str, message: String) -> CallError {
    CallError::Connect(Box::new(ConnectRefusal {
        code,
        upstream: upstream.to_owned(),
        url: None,
        message,
        as_error: false,
    }))
}

fn store_down(e: String) -> CallError {
    tracing::warn!("credential store: {e}");
    CallError::StoreUnavailable {
        feature: "per-user credentials",
    }
}

impl Step for Connect {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        let per_user = call
            .target
            .as_ref()
            .and_then(|t| t.upstream())
            .filter(|u| {
                u.spec()
                    .credential
                    .as_ref()
                    .is_some_and(|i| i.credential.per_user().is_some())
            })
            .map(|u| u.name().to_owned());
        let (Some(creds), Some(upstream)) = (self.credentials.clone(), per_user) else {
            return inner.call(call);
        };
        let mut inner = inner.clone();
        let wait = self.wait;
        Box::pin(async move {
            if call.identity.kind == IdentityKind::Anonymous {
                return Err(refusal(
                    "credential_anonymous",
                    &upstream,
                    format!(
                        "upstream `{upstream}` acts with each caller's own account; anonymous callers have none"
                    ),
                ));
            }
            let owner = call.identity.name.clone();
            for attempt in 0..2 {
                let token = match creds.token(&owner, &upstream).await.map_err(store_down)? {
                    Some(t) => t,
                    None => obtain(&creds, &call, &upstream, &owner, wait).await?,
                };
                let mut c = call.clone();
                c.person = Some(PersonToken(token));
                match inner.call(c).await {
                    Err(CallError::UpstreamRefused { error, .. })
                        if error.code.0 == PERSON_REJECTED =>
                    {
                        creds.rejected(&owner, &upstream).await;
                        if attempt == 1 {
                            break;
                        }
                    }
                    other => return other,
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

/// Whether the caller declared elicitation at all.
fn declared_elicitation(call: &Call) -> bool {
    call.downstream.as_ref().is_some_and(|d| {
        d.capabilities
            .as_ref()
            .is_some_and(|c| c.elicitation.is_some())
    })
}

/// Whether the caller declared URL-mode elicitation.
fn can_open_urls(call: &Call) -> bool {
    call.downstream.as_ref().is_some_and(|d| {
        !d.modern
            && d.capabilities
                .as_ref()
                .and_then(|c| c.elicitation.as_ref())
                .is_some_and(|e| e.url.is_some())
    })
}

/// Gets the person's token: asks them on the call's stream and waits, or refuses with the link.
async fn obtain(
    creds: &UserCredentials,
    call: &Call,
    upstream: &str,
    owner: &str,
    wait: Duration,
) -> Result<Secret, CallError> {
    let ask = creds.ask(owner, upstream).map_err(|detail| CallError::Internal {
        detail: format!("connect link: {detail}"),
    })?;
    let message = format!(
        "`{upstream}` acts with your own account: connect it on the page that opens (once); the call goes on after that"
    );
    let (Some(d), true) = (call.downstream.as_ref(), can_open_urls(call)) else {
        return Err(CallError::Connect(Box::new(ConnectRefusal {
            code: "credential_required",
            upstream: upstream.to_owned(),
            url: Some((ask.url, ask.elicitation_id)),
            message,
            as_error: declared_elicitation(call),
        })));
    };
    let request: ServerRequest = serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": {
            "mode": "url",
            "message": message,
            "url": ask.url,
            "elicitationId": ask.elicitation_id,
        },
    }))
    .map_err(|e| CallError::Internal {
        detail: format!("connect question: {e}"),
    })?;
    let answer = tokio::time::timeout(wait, d.request(request))
        .await
        .map_err(|_| CallError::NoClientInput {
            detail: format!("no answer to the connect request within {wait:?}"),
        })?
        .map_err(|detail| CallError::NoClientInput { detail })?;
    let accepted = match answer {
        ClientResult::ElicitResult(r) => {
            serde_json::to_value(r).unwrap_or_default()["action"] == "accept"
        }
        _ => false,
    };
    if !accepted {
        return Err(refusal(
            "credential_declined",
            upstream,
            format!("connecting your `{upstream}` account was declined; nothing ran"),
        ));
    }
    let token = tokio::select! {
        t = creds.wait_connected(owner, upstream, wait) => t.map_err(store_down)?,
        _ = call.ct.cancelled() => return Err(CallError::Cancelled),
    };
    let Some(token) = token else {
        return Err(CallError::NoClientInput {
            detail: format!("`{upstream}` was not connected within {wait:?}"),
        });
    };
    let done = ServerNotification::CustomNotification(CustomNotification::new(
        "notifications/elicitation/complete",
        Some(json!({"elicitationId": ask.elicitation_id})),
    ));
    let _ = d.peer.send_notification(done).await;
    Ok(token)
}
