//! Each person's own connection to an upstream that acts as each person (a `per_user`
//! credential), on the call path. Such an upstream may list nothing without a token, or list
//! each person other tools, so a caller with no connection of their own to it yet has no
//! catalog that names its tools:
//! - a call into its namespace goes to [`ConnectFirst`], which connects the caller (their
//!   stored credential, else the connect step's question) and sends the call in again at the
//!   top, where the caller's own catalog routes it — or says truthfully that no such tool is
//!   theirs;
//! - `fedgate__connect` (listed while some upstream acts as each person) does the same for an
//!   upstream by name, so a person who sees none of its tools can connect and then list them;
//! - [`open_stored`] opens the connections of a person who connected before (their stored
//!   credential), so their `tools/list` shows their own tools.

use std::{sync::Arc, time::Duration};

use rmcp::model::{ServerResult, Tool};
use serde_json::{Value, json};

use super::{
    Call, CallError, CallFuture, Exposed, OwnTool, Target, TargetKind,
    connect::{
        anonymous, ask_person, declared_elicitation, not_connected_in_time, refusal, resume,
        step_up, store_down, take_retry,
    },
    own,
    reentry::Reentry,
};
use crate::{
    credentials::{OAuthTarget, UserCredentials},
    names::CONNECT_TOOL,
    policy::identity::{Identity, IdentityKind},
    secret::Secret,
    upstream::{Upstream, error::UpstreamError, pool::Pool},
};

/// What connecting a person needs.
#[derive(Debug, Clone)]
pub struct Personal {
    pub pool: Arc<Pool>,
    pub creds: Arc<UserCredentials>,
    /// How long a caller's human has to connect while the call waits.
    pub wait: Duration,
}

/// How a person's connection turned out.
enum Connected {
    Open,
    /// A stateless-era caller's question (it retries with the answer).
    Ask(Box<ServerResult>),
}

impl Personal {
    /// The route of a tool call `name` that no catalog of this caller names, when it falls in
    /// the namespace of an upstream that acts as each person and the caller has no connection
    /// of their own to it yet.
    pub(super) fn connect_first(
        &self,
        reentry: &Reentry,
        identity: &Identity,
        name: &str,
    ) -> Option<Target> {
        if identity.kind == IdentityKind::Anonymous {
            return None;
        }
        let up = self.pool.namespace_owner(name)?;
        if !up.per_user() || !up.listed() || self.pool.has_person_connection(&up, &identity.key()) {
            return None;
        }
        Some(Target {
            owner: up.shared_name(),
            kind: TargetKind::Gateway(Arc::new(ConnectFirst {
                personal: self.clone(),
                reentry: reentry.clone(),
                upstream: up,
            })),
            exposed: Exposed::Tool(name.to_owned()),
        })
    }

    /// Connects the caller to `up` as themselves: with their stored token, else after asking
    /// them for one. A token the upstream refuses is refreshed (OAuth) or dropped and asked
    /// for again, once.
    async fn connect(&self, call: &mut Call, up: &Arc<Upstream>) -> Result<Connected, CallError> {
        let upstream = up.name().to_owned();
        if call.identity.kind == IdentityKind::Anonymous {
            return Err(anonymous(&upstream));
        }
        let owner = call.identity.key();
        let oauth = self.pool.per_user_oauth(&upstream);
        let target = oauth.as_ref().map(|(settings, url)| OAuthTarget {
            settings,
            upstream_url: url,
        });
        let mut answered = take_retry(&mut call.op)
            .filter(|(state, _)| self.creds.is_retry_of(state, &owner, &upstream))
            .map(|(_, accepted)| accepted);
        for _ in 0..2 {
            let token = match self.token(&owner, &upstream, target).await? {
                Some(t) => t,
                None => {
                    if let Some(q) =
                        ask_person(&self.creds, call, &upstream, self.wait, answered.take()).await?
                    {
                        return Ok(Connected::Ask(Box::new(q)));
                    }
                    self.token(&owner, &upstream, target)
                        .await?
                        .ok_or_else(|| not_connected_in_time(&upstream, self.wait))?
                }
            };
            match self.pool.person_connection(up, &owner, &token).await {
                Ok(_) => return Ok(Connected::Open),
                Err(UpstreamError::PersonRefused) => {
                    // Refreshed, or dropped (then the next round asks the person again).
                    self.creds
                        .rejected(&owner, &upstream, &token, target)
                        .await
                        .map_err(store_down)?;
                }
                Err(UpstreamError::PersonNeedsScope(wanted)) => {
                    let as_error = declared_elicitation(call);
                    return Err(
                        step_up(&self.creds, &owner, &upstream, &wanted, target, as_error).await,
                    );
                }
                Err(e) => return Err(super::forward::person_refusal(&upstream, e)),
            }
        }
        Err(refusal(
            "credential_rejected",
            &upstream,
            format!("upstream `{upstream}` refused the credential you connected, twice"),
        ))
    }

    async fn token(
        &self,
        owner: &str,
        upstream: &str,
        target: Option<OAuthTarget<'_>>,
    ) -> Result<Option<Secret>, CallError> {
        self.creds
            .token(owner, upstream, target)
            .await
            .map_err(store_down)
    }
}

/// Opens `who`'s own connections to the upstreams that act as each person which they have
/// connected before, so their lists show their own tools. Quietly skips what fails: the
/// list shows what it can, and a call says why it cannot run.
pub async fn open_stored(pool: &Arc<Pool>, creds: &UserCredentials, who: &Identity) {
    if who.kind == IdentityKind::Anonymous {
        return;
    }
    let owner = who.key();
    let upstreams = pool.upstreams();
    let pending = upstreams
        .iter()
        .filter(|u| u.per_user() && u.listed() && !pool.has_person_connection(u, &owner))
        .map(|up| {
            let owner = owner.clone();
            async move {
                let oauth = pool.per_user_oauth(up.name());
                let target = oauth.as_ref().map(|(settings, url)| OAuthTarget {
                    settings,
                    upstream_url: url,
                });
                if let Ok(Some(token)) = creds.token(&owner, up.name(), target).await
                    && let Err(e) = pool.person_connection(up, &owner, &token).await
                {
                    tracing::debug!(upstream = %up.name(), "a person's connection for their list: {e}");
                }
            }
        });
    futures::future::join_all(pending).await;
}

/// A call to a tool of an upstream that acts as each person, by a caller not connected to it
/// yet: connect them, then the call goes in again at the top as they call now.
#[derive(Debug)]
struct ConnectFirst {
    personal: Personal,
    reentry: Reentry,
    upstream: Arc<Upstream>,
}

impl OwnTool for ConnectFirst {
    fn definition(&self) -> Tool {
        own::definition(CONNECT_TOOL, "", json!({"type": "object"}))
    }

    fn call(&self, call: Call) -> CallFuture {
        let (personal, reentry, up) = (
            self.personal.clone(),
            self.reentry.clone(),
            self.upstream.clone(),
        );
        Box::pin(async move {
            let mut call = call;
            match personal.connect(&mut call, &up).await? {
                Connected::Ask(q) => Ok(*q),
                Connected::Open => resume(&reentry, call, up.name()).await,
            }
        })
    }
}

/// `fedgate__connect`: a person connects their account for an upstream that acts as each
/// person — the way to its tools when it lists none without an account.
#[derive(Debug)]
pub struct ConnectTool(pub Personal);

impl OwnTool for ConnectTool {
    fn definition(&self) -> Tool {
        let names: Vec<String> = self
            .0
            .pool
            .upstreams()
            .iter()
            .filter(|u| u.per_user())
            .map(|u| format!("`{}`", u.name()))
            .collect();
        own::definition(
            CONNECT_TOOL,
            &format!(
                "Connect your own account for an upstream that acts as each person ({}), so \
                 its tools are listed for you and run as you. Opens a sign-in link when you \
                 have not connected it yet; list the tools again afterwards.",
                names.join(", ")
            ),
            json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["upstream"],
                "properties": {
                    "upstream": {
                        "type": "string",
                        "title": "Upstream",
                        "description": "The upstream to connect"
                    }
                }
            }),
        )
    }

    fn call(&self, call: Call) -> CallFuture {
        let personal = self.0.clone();
        Box::pin(async move {
            let mut call = call;
            let args = own::arguments(&call);
            let name = args.get("upstream").and_then(Value::as_str).unwrap_or("");
            let sep = personal.pool.separator().to_owned();
            let up = personal.pool.upstream_named(name).filter(|u| {
                u.per_user()
                    && call.identity.access.tier(u.spec().tier.rank)
                    && (call.identity.access.sees_all()
                        || call.identity.access.tool(&format!("{name}{sep}*")))
            });
            let Some(up) = up else {
                return own::answer(
                    json!({"error": format!("no upstream that acts as each person is named `{}`", crate::names::shown(name))}),
                    true,
                )
                .await;
            };
            if !up.listed() {
                let s = up.status();
                return Err(CallError::UpstreamUnavailable {
                    upstream: up.name().to_owned(),
                    phase: s.phase,
                    detail: s.last_error,
                });
            }
            match personal.connect(&mut call, &up).await? {
                Connected::Ask(q) => Ok(*q),
                Connected::Open => {
                    let tools = up
                        .persons
                        .lists_of(&call.identity.key())
                        .map_or(0, |l| l.tools.len());
                    own::answer(
                        json!({
                            "connected": up.name(),
                            "tools": tools,
                            "note": "your account is connected: list the tools again to see what it offers you",
                        }),
                        false,
                    )
                    .await
                }
            }
        })
    }
}
