//! Per-user upstream credentials (`[credentials.NAME] per_user`): each person's own token for
//! an upstream, collected on a page fedgate serves (`/connect/<upstream>?state=…`), sealed at
//! rest (`seal`), kept in SQLite or Redis (`stores::credentials`) so every replica uses it,
//! and sent only on that person's requests to that upstream.
//!
//! A `state` is sealed too: it names the person, the upstream, an expiry and a nonce, so any
//! replica can open it, and the store lets each nonce through once. With `kind = "oauth"` the
//! page sends the person on to the upstream's authorization server (`oauth`) with a second
//! sealed state that also holds the PKCE verifier; the callback claims the nonce.

mod accounts;
mod events;
mod identity;
pub mod oauth;
mod registration;
pub mod seal;
mod sign_in;

use std::{path::Path, sync::Arc, time::Duration};

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

pub use identity::{Proven, SIGNED_IN_PATH};
pub use oauth::OAuthError;
pub use seal::{SealError, Sealer};

use crate::stores::StoreError;

/// Why a credential could not be read, stored or asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Seal(#[from] SealError),
    /// A token that must be refreshed could not be: the authorization server did not answer
    /// (or not usefully). The credential is kept; the person is not asked again.
    #[error(
        "the authorization server of `{upstream}` did not answer a refresh of your token ({why}); your account stays connected: call again in a minute"
    )]
    Provider { upstream: String, why: String },
}
pub use crate::stores::credentials::{self as store, Connected, CredentialStore, Info};

use crate::{
    policy::token::PerUserOAuth, secret::Secret, telemetry::credential_metrics::CredentialMetrics,
};

/// How long a connect link stays valid.
pub const STATE_TTL: Duration = Duration::from_secs(600);
/// Longest token the page accepts.
pub const MAX_TOKEN_BYTES: usize = 4096;
/// How often a waiting call looks at the store for a credential another replica stored.
const POLL_EVERY: Duration = Duration::from_secs(1);

/// A person's token on its way to the upstream: put in the outgoing request's (never
/// serialized) extensions, read by the upstream's HTTP client.
#[derive(Debug, Clone)]
pub struct PersonToken(pub Secret);

/// What a sealed credential holds: the token, and with OAuth the refresh token and expiry.
#[derive(Serialize, Deserialize)]
struct Plain {
    token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refresh: Option<String>,
    /// When `token` expires, ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<u64>,
    /// How long `token` lived when it was granted (ms), for the refresh margin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lifetime_ms: Option<u64>,
}

impl Plain {
    fn granted(g: &oauth::Granted) -> Self {
        Self {
            token: g.access.expose().to_owned(),
            refresh: g.refresh.as_ref().map(|r| r.expose().to_owned()),
            expires_at_ms: g.expires_at_ms,
            lifetime_ms: g.lifetime_ms,
        }
    }

    /// Whether the token is due for a refresh: `percent` of its lifetime (or, not knowing it,
    /// [`oauth::EXPIRY_MARGIN_MS`]) or less is left.
    fn expiring(&self, percent: u8) -> bool {
        let margin = self.lifetime_ms.map_or(oauth::EXPIRY_MARGIN_MS, |l| {
            l.saturating_mul(u64::from(percent)) / 100
        });
        self.expires_at_ms
            .is_some_and(|e| crate::clock::now_ms().saturating_add(margin) >= e)
    }

    fn expired(&self) -> bool {
        self.expires_at_ms
            .is_some_and(|e| crate::clock::now_ms() >= e)
    }
}

/// A stored credential, opened: the token and what is known about it.
struct Opened {
    plain: Plain,
    connected_at_ms: u64,
    info: Info,
}

/// Where the OAuth settings of a per-user upstream come from (the upstream set, which a reload
/// changes): its settings and URL, `None` for one whose person pastes a token.
pub type Targets = Arc<dyn Fn(&str) -> Option<(Arc<PerUserOAuth>, String)> + Send + Sync + 'static>;

/// One credential forgotten, and what its authorization server said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Forgot {
    pub upstream: String,
    /// `revoked` (the server confirmed), `no_endpoint` (it has no revocation endpoint, or the
    /// credential is a pasted token), `failed` (it did not confirm; the token may stay valid
    /// there until it expires).
    pub at_provider: &'static str,
}

/// An upstream whose per-user credential is OAuth, as the credential steps need it.
#[derive(Debug, Clone, Copy)]
pub struct OAuthTarget<'a> {
    pub settings: &'a PerUserOAuth,
    /// Where the upstream's protected-resource metadata is discovered.
    pub upstream_url: &'a str,
}

/// What a sealed connect state holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ticket {
    /// The person.
    #[serde(rename = "o")]
    pub owner: String,
    #[serde(rename = "u")]
    pub upstream: String,
    /// Expiry, ms since the epoch.
    #[serde(rename = "e")]
    pub expires_at_ms: u64,
    /// Hex; also the elicitation id.
    #[serde(rename = "n")]
    pub nonce: String,
    /// The PKCE verifier, in the state sent to an authorization server only.
    #[serde(rename = "v", default, skip_serializing_if = "Option::is_none")]
    pub verifier: Option<String>,
    /// Scopes asked for besides the configured ones (a step-up the upstream asked for).
    #[serde(rename = "x", default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

/// A request to connect: where to send the person and the id of the elicitation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub url: String,
    pub elicitation_id: String,
}

/// Why a page submission was refused. The words are shown to the person; none holds a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("this link is not valid: open the link your assistant gave you again")]
    BadState,
    #[error("this link has expired: call the tool again to get a new one")]
    Expired,
    #[error("this link was used already: call the tool again to get a new one")]
    Used,
    #[error("this link is for another upstream")]
    OtherUpstream,
    /// The browser did not show it is the person the link was made for.
    #[error(
        "this link was made for {0}: only they can connect with it, with their own key or token; nothing was stored"
    )]
    NotYou(String),
    /// The sign-in came back to a browser that did not start it (a forwarded sign-in link).
    #[error(
        "this sign-in was started in another browser: open the link your assistant gave you and sign in from there; nothing was stored"
    )]
    OtherBrowser,
    #[error(
        "this link was tried with wrong keys too often and connects nothing any more: call the tool again to get a new one"
    )]
    TooManyProofs,
    #[error("the token is empty")]
    EmptyToken,
    #[error("the token is longer than {MAX_TOKEN_BYTES} bytes")]
    TokenTooLong,
    #[error("the token holds spaces or control characters: paste only the token")]
    TokenMalformed,
    #[error("the credential store is not available; try again in a moment")]
    Store,
    /// The authorization server sent the person back with an error (its code only).
    #[error(
        "the sign-in did not complete: the authorization server said `{0}`; nothing was stored"
    )]
    Denied(String),
    #[error("the authorization server sent back no code")]
    NoCode,
    #[error("{0}; nothing was stored")]
    OAuth(OAuthError),
    /// The identity provider's sign-in did not show who the browser is.
    #[error("the identity provider's sign-in was not accepted: {0}; nothing was stored")]
    IdToken(identity::IdTokenRefusal),
}

/// The person an owner key names, as a page shows them: `alice (API key)`.
pub fn person(owner: &str) -> String {
    let (kind, name) = owner.split_once(':').unwrap_or(("", owner));
    let kind = match kind {
        "api_key" => "API key",
        "jwt" => "signed-in token",
        "client_cert" => "client certificate",
        _ => "identity",
    };
    format!("{} ({kind})", crate::names::shown(name))
}

/// Per-user credentials of every upstream, and the calls waiting for one.
pub struct UserCredentials {
    sealer: Sealer,
    store: Arc<dyn CredentialStore>,
    /// Where the connect page is reached: `[gateway] public_url`, else the listener's address.
    base_url: parking_lot::RwLock<String>,
    waiters: DashMap<(String, String), Arc<Notify>>,
    /// One refresh at a time per (person, upstream) on this replica: a rotated refresh token
    /// is used once.
    refreshing: DashMap<(String, String), Arc<tokio::sync::Mutex<()>>>,
    /// Refreshes that failed without the grant being gone: how many in a row, and when the
    /// next may be tried (ms), so a provider's bad minute is not asked on every call.
    refresh_backoff: DashMap<(String, String), (u32, u64)>,
    /// When this replica last noted a use of each credential (ms).
    touched: DashMap<(String, String), u64>,
    targets: parking_lot::RwLock<Option<Targets>>,
    /// Clients fedgate registered at authorization servers (RFC 7591), by upstream; kept
    /// sealed in the store too (every replica, and after a restart, uses the same).
    registrations: DashMap<String, registration::Registered>,
    /// One registration at a time per upstream on this replica.
    registering: DashMap<String, Arc<tokio::sync::Mutex<()>>>,
    audit: parking_lot::Mutex<Option<crate::telemetry::audit::Audit>>,
    pub oauth: oauth::OAuthClient,
    metrics: CredentialMetrics,
    /// Wrong proofs given on each link's page (by the link's digest, with its expiry): past
    /// [`MAX_PROOF_FAILURES`] the link connects nothing any more, on this replica.
    proof_failures: DashMap<[u8; 32], (u32, u64)>,
}

/// The store's owner of the clients fedgate registered (no person's key has this kind).
const REGISTRATION_OWNER: &str = "fedgate:registration";

/// How often this replica notes a use of one credential.
const TOUCH_EVERY_MS: u64 = 60_000;

/// What a refresh came to.
pub(super) enum Refresh {
    /// A new token (or one another call just refreshed).
    Fresh(Secret),
    /// The refresh failed for now; the token still works until it expires.
    Kept(Secret),
    /// The grant is gone (or there is nothing to refresh with): the credential was dropped.
    Gone,
    /// The refresh failed for now and the token does not work (expired, or refused by the
    /// upstream): the credential is kept, the call fails; the words say why.
    Unavailable(String),
    /// The credential store did not answer.
    Store(CredentialError),
}

/// Wrong keys a connect page takes before its link is spent.
pub const MAX_PROOF_FAILURES: u32 = 5;
/// Links whose failures are remembered at once; past it the expired ones are forgotten first.
const MAX_REMEMBERED_LINKS: usize = 10_000;

impl std::fmt::Debug for UserCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserCredentials")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// A sealed state as text in a URL: base64url, a third shorter than hex (authorization
/// servers bound the `state` they take back).
pub(crate) fn state_text(sealed: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed)
}

/// The sealed bytes of a state's text.
pub(crate) fn state_bytes(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim())
        .ok()
}

fn link_digest(state: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(state.trim().as_bytes()).into()
}

fn bound(owner: &str, upstream: &str) -> Vec<u8> {
    format!("credential\0{owner}\0{upstream}").into_bytes()
}

const STATE_BINDING: &[u8] = b"connect-state";
/// The grant an account page gives the person who proved who they are.
const ACCOUNT_BINDING: &[u8] = b"account-page";
/// How long an account page's buttons work.
const ACCOUNT_GRANT_TTL: Duration = Duration::from_secs(600);
/// A stateless-era caller's `requestState` for a connect question: sealed like a state, with
/// its own binding (a page state is no retry state and the other way round) and a prefix that
/// tells it from an upstream's parked state.
const RETRY_BINDING: &[u8] = b"connect-retry";
/// The state sent to an authorization server (it holds the PKCE verifier).
const OAUTH_BINDING: &[u8] = b"connect-oauth";
pub const RETRY_PREFIX: &str = "fgc.";

impl UserCredentials {
    pub fn new(
        sealer: Sealer,
        store: Arc<dyn CredentialStore>,
        public_url: Option<String>,
        metrics: CredentialMetrics,
    ) -> Self {
        Self {
            sealer,
            store,
            base_url: parking_lot::RwLock::new(public_url.unwrap_or_default()),
            waiters: DashMap::new(),
            refreshing: DashMap::new(),
            refresh_backoff: DashMap::new(),
            touched: DashMap::new(),
            targets: Default::default(),
            registrations: DashMap::new(),
            registering: DashMap::new(),
            audit: Default::default(),
            proof_failures: DashMap::new(),
            oauth: oauth::OAuthClient::new(),
            metrics,
        }
    }

    /// SQLite at `path`, or the shared Redis store.
    pub fn open(
        sealer: Sealer,
        path: &Path,
        redis: Option<crate::stores::redis::Redis>,
        public_url: Option<String>,
        metrics: CredentialMetrics,
    ) -> Result<Self, CredentialError> {
        let store: Arc<dyn CredentialStore> = match redis {
            #[cfg(feature = "redis")]
            Some(r) => Arc::new(store::redis::RedisCredentials(r)),
            #[cfg(not(feature = "redis"))]
            Some(r) => r.never(),
            None => Arc::new(store::SqliteCredentials::open(path)?),
        };
        Ok(Self::new(sealer, store, public_url, metrics))
    }

    /// Gives credentials stored by name alone (before an identity was its kind and name) to
    /// the one kind of identity that can have that name (`sole_kind`: an API key's name when
    /// no JWT may claim it), and drops the others: whose they were cannot be told, so those
    /// people connect again. Returns (migrated, dropped).
    pub async fn adopt_kinds(
        &self,
        sole_kind: impl Fn(&str) -> Option<crate::policy::identity::IdentityKind>,
    ) -> Result<(usize, usize), CredentialError> {
        let (mut migrated, mut dropped) = (0, 0);
        for c in self.store.list().await? {
            if crate::policy::identity::has_kind(&c.owner) || c.owner == REGISTRATION_OWNER {
                continue;
            }
            let opened = self.stored(&c.owner, &c.upstream).await?;
            if let (Some(o), Some(kind)) = (opened, sole_kind(&c.owner)) {
                let owner = format!("{}:{}", kind.as_str(), c.owner);
                self.put(&owner, &c.upstream, &o.plain, o.connected_at_ms, o.info)
                    .await?;
                migrated += 1;
            } else {
                dropped += 1;
            }
            self.store.remove(&c.owner, Some(&c.upstream)).await?;
        }
        Ok((migrated, dropped))
    }

    /// Whether people reach the connect page over https (its cookie is then `Secure`).
    pub fn served_over_https(&self) -> bool {
        self.base_url.read().starts_with("https://")
    }

    /// The listener's own address, when no `public_url` is configured.
    pub fn set_listener_url(&self, url: String) {
        let mut b = self.base_url.write();
        if b.is_empty() {
            *b = url;
        }
    }

    pub fn count(&self, upstream: &str, event: &str) {
        self.metrics.count(upstream, event);
    }

    /// Where the OAuth settings of each upstream are looked up, for revocation.
    pub fn set_targets(&self, targets: Targets) {
        *self.targets.write() = Some(targets);
    }

    /// What the person stored for `upstream`, opened. A value that no longer opens (its key
    /// was retired and dropped) counts as not connected.
    async fn stored(&self, owner: &str, upstream: &str) -> Result<Option<Opened>, CredentialError> {
        let Some(stored) = self.store.get(owner, upstream).await? else {
            return Ok(None);
        };
        let sealed = hex::decode(&stored.sealed).unwrap_or_default();
        let Ok(plain) = self.sealer.open(&sealed, &bound(owner, upstream)) else {
            tracing::warn!(
                upstream,
                "a stored per-user credential does not open with the configured keys; the person is asked again"
            );
            return Ok(None);
        };
        let Ok(plain) = serde_json::from_slice::<Plain>(&plain) else {
            return Ok(None);
        };
        if self.sealer.is_stale(&sealed) {
            // Sealed again with the current key: a retired key can then be dropped.
            let _ = self
                .put(
                    owner,
                    upstream,
                    &plain,
                    stored.connected_at_ms,
                    stored.info.clone(),
                )
                .await;
        }
        Ok(Some(Opened {
            plain,
            connected_at_ms: stored.connected_at_ms,
            info: stored.info,
        }))
    }

    /// The person's token for `upstream`, if they connected it; an OAuth token due for a
    /// refresh is refreshed first. `None` when there is none, or its grant is gone (the person
    /// is asked again); an authorization server that does not answer leaves a still-valid
    /// token in use, and an expired one an error (`Provider`), the credential kept.
    pub async fn token(
        &self,
        owner: &str,
        upstream: &str,
        oauth: Option<OAuthTarget<'_>>,
    ) -> Result<Option<Secret>, CredentialError> {
        let Some(o) = self.stored(owner, upstream).await? else {
            return Ok(None);
        };
        match oauth {
            Some(target) if o.plain.expiring(target.settings.refresh_margin_percent) => {
                match self
                    .refresh(owner, upstream, &o.plain.token, target, false)
                    .await
                {
                    Refresh::Fresh(t) | Refresh::Kept(t) => Ok(Some(t)),
                    Refresh::Gone => Ok(None),
                    Refresh::Unavailable(why) => Err(CredentialError::Provider {
                        upstream: upstream.to_owned(),
                        why,
                    }),
                    Refresh::Store(e) => Err(e),
                }
            }
            _ => Ok(Some(Secret::new(o.plain.token))),
        }
    }

    /// Seals and stores `plain`; `connected_at_ms` is when the person connected (kept across
    /// refreshes and new keys).
    async fn put(
        &self,
        owner: &str,
        upstream: &str,
        plain: &Plain,
        connected_at_ms: u64,
        mut info: Info,
    ) -> Result<(), CredentialError> {
        info.expires_at_ms = plain.expires_at_ms;
        let plain = serde_json::to_vec(plain).map_err(|e| SealError::Encode(e.to_string()))?;
        let sealed = self.sealer.seal(&plain, &bound(owner, upstream))?;
        let stored = store::Stored {
            sealed: hex::encode(sealed),
            connected_at_ms,
            info,
            last_used_ms: None,
        };
        Ok(self.store.put(owner, upstream, &stored).await?)
    }

    /// The upstream refused the person's credential (`used`). An OAuth credential with a
    /// refresh token is refreshed once (`Some` new token); a grant that is gone, or a pasted
    /// token, is dropped (`None`: the person is asked again); an authorization server that
    /// does not answer keeps the credential and is an error.
    pub async fn rejected(
        &self,
        owner: &str,
        upstream: &str,
        used: &Secret,
        oauth: Option<OAuthTarget<'_>>,
    ) -> Result<Option<Secret>, CredentialError> {
        self.metrics.count(upstream, "rejected");
        if let Some(target) = oauth {
            match self
                .refresh(owner, upstream, used.expose(), target, true)
                .await
            {
                Refresh::Fresh(fresh) if fresh.expose() != used.expose() => return Ok(Some(fresh)),
                Refresh::Unavailable(why) => {
                    return Err(CredentialError::Provider {
                        upstream: upstream.to_owned(),
                        why,
                    });
                }
                Refresh::Store(e) => return Err(e),
                _ => {}
            }
        }
        if let Err(e) = self.store.remove(owner, Some(upstream)).await {
            tracing::warn!(upstream, "dropping a rejected credential failed: {e}");
        }
        Ok(None)
    }

    pub async fn list(&self) -> Result<Vec<Connected>, CredentialError> {
        let mut all = self.store.list().await?;
        all.retain(|c| c.owner != REGISTRATION_OWNER);
        Ok(all)
    }

    /// The scopes asked for in the sign-in that made the person's credential, if known.
    pub async fn asked_scopes(
        &self,
        owner: &str,
        upstream: &str,
    ) -> Result<Option<Vec<String>>, CredentialError> {
        Ok(self
            .store
            .get(owner, upstream)
            .await?
            .and_then(|s| s.info.asked_scopes))
    }

    /// A new connect link for `owner` and `upstream`.
    pub fn ask(&self, owner: &str, upstream: &str) -> Result<Ask, SealError> {
        self.ask_with_scopes(owner, upstream, Vec::new())
    }

    /// A new connect link that also asks the authorization server for `scopes`.
    pub fn ask_with_scopes(
        &self,
        owner: &str,
        upstream: &str,
        scopes: Vec<String>,
    ) -> Result<Ask, SealError> {
        let nonce = hex::encode(self.sealer.random::<16>()?);
        let ticket = Ticket {
            owner: owner.to_owned(),
            upstream: upstream.to_owned(),
            expires_at_ms: crate::clock::now_ms() + STATE_TTL.as_millis() as u64,
            nonce: nonce.clone(),
            verifier: None,
            scopes,
        };
        let plain = serde_json::to_vec(&ticket).map_err(|e| SealError::Encode(e.to_string()))?;
        let state = state_text(&self.sealer.seal(&plain, STATE_BINDING)?);
        self.metrics.count(upstream, "asked");
        Ok(Ask {
            url: format!(
                "{}/connect/{upstream}?state={state}",
                self.base_url.read().trim_end_matches('/')
            ),
            elicitation_id: nonce,
        })
    }

    /// The `requestState` that comes back with a stateless-era caller's retry of `ask`.
    pub fn retry_state(&self, owner: &str, upstream: &str, ask: &Ask) -> Result<String, SealError> {
        let ticket = Ticket {
            owner: owner.to_owned(),
            upstream: upstream.to_owned(),
            expires_at_ms: crate::clock::now_ms() + STATE_TTL.as_millis() as u64,
            nonce: ask.elicitation_id.clone(),
            verifier: None,
            scopes: Vec::new(),
        };
        let plain = serde_json::to_vec(&ticket).map_err(|e| SealError::Encode(e.to_string()))?;
        Ok(format!(
            "{RETRY_PREFIX}{}",
            state_text(&self.sealer.seal(&plain, RETRY_BINDING)?)
        ))
    }

    /// Whether a retry state is this person's, for `upstream`, and unexpired.
    pub fn is_retry_of(&self, state: &str, owner: &str, upstream: &str) -> bool {
        let Some(sealed) = state.strip_prefix(RETRY_PREFIX).and_then(state_bytes) else {
            return false;
        };
        self.sealer
            .open(&sealed, RETRY_BINDING)
            .ok()
            .and_then(|plain| serde_json::from_slice::<Ticket>(&plain).ok())
            .is_some_and(|t| {
                t.owner == owner
                    && t.upstream == upstream
                    && t.expires_at_ms >= crate::clock::now_ms()
            })
    }

    /// The ticket of a state, if it is ours, unexpired and for `upstream` (not yet claimed),
    /// and its page has not been given too many wrong proofs.
    pub fn check_state(&self, state: &str, upstream: &str) -> Result<Ticket, Refused> {
        let ticket = self.open_state(state, upstream, STATE_BINDING)?;
        if self
            .proof_failures
            .get(&link_digest(state))
            .is_some_and(|f| f.0 >= MAX_PROOF_FAILURES)
        {
            return Err(Refused::TooManyProofs);
        }
        Ok(ticket)
    }

    /// A wrong proof on the page of `state` (whose ticket is `ticket`).
    pub fn proof_failed(&self, state: &str, ticket: &Ticket) {
        if self.proof_failures.len() >= MAX_REMEMBERED_LINKS {
            let now = crate::clock::now_ms();
            self.proof_failures
                .retain(|_, (_, expires)| *expires >= now);
        }
        if self.proof_failures.len() < MAX_REMEMBERED_LINKS {
            self.proof_failures
                .entry(link_digest(state))
                .or_insert((0, ticket.expires_at_ms))
                .0 += 1;
        }
    }

    fn open_state(&self, state: &str, upstream: &str, binding: &[u8]) -> Result<Ticket, Refused> {
        let sealed = state_bytes(state).ok_or(Refused::BadState)?;
        let plain = self
            .sealer
            .open(&sealed, binding)
            .map_err(|_| Refused::BadState)?;
        let ticket: Ticket = serde_json::from_slice(&plain).map_err(|_| Refused::BadState)?;
        if ticket.expires_at_ms < crate::clock::now_ms() {
            return Err(Refused::Expired);
        }
        if ticket.upstream != upstream {
            return Err(Refused::OtherUpstream);
        }
        Ok(ticket)
    }

    /// A page submission: the state opens and is claimed once, the token looks like one; then
    /// it is sealed and stored, and a call waiting for it goes on.
    pub async fn submit(
        &self,
        upstream: &str,
        state: &str,
        token: &str,
    ) -> Result<Ticket, Refused> {
        let refused = |r: Refused| {
            self.metrics.count(upstream, "refused");
            r
        };
        let ticket = self.check_state(state, upstream).map_err(refused)?;
        check_token(token).map_err(refused)?;
        self.claim(upstream, &ticket).await?;
        let plain = Plain {
            token: token.to_owned(),
            refresh: None,
            expires_at_ms: None,
            lifetime_ms: None,
        };
        self.connect(upstream, ticket, &plain, Info::default())
            .await
    }

    /// Lets a state's nonce through once.
    async fn claim(&self, upstream: &str, ticket: &Ticket) -> Result<(), Refused> {
        match self.store.claim(&ticket.nonce, ticket.expires_at_ms).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.metrics.count(upstream, "refused");
                Err(Refused::Used)
            }
            Err(e) => {
                tracing::warn!(upstream, "per-user credentials: {e}");
                self.metrics.count(upstream, "failed");
                Err(Refused::Store)
            }
        }
    }

    /// Stores what the person connected and wakes the call waiting for it.
    async fn connect(
        &self,
        upstream: &str,
        ticket: Ticket,
        plain: &Plain,
        info: Info,
    ) -> Result<Ticket, Refused> {
        let now = crate::clock::now_ms();
        if let Err(e) = self.put(&ticket.owner, upstream, plain, now, info).await {
            tracing::warn!(upstream, "per-user credentials: {e}");
            self.metrics.count(upstream, "failed");
            return Err(Refused::Store);
        }
        self.refresh_backoff
            .remove(&(ticket.owner.clone(), upstream.to_owned()));
        self.event(events::Event::new(
            Some(&ticket.owner),
            upstream,
            "connected",
        ));
        if let Some(n) = self
            .waiters
            .get(&(ticket.owner.clone(), upstream.to_owned()))
        {
            n.notify_waiters();
        }
        Ok(ticket)
    }

    /// Waits until the person has connected `upstream` (on this replica or another), at most
    /// `within`.
    pub async fn wait_connected(
        &self,
        owner: &str,
        upstream: &str,
        within: Duration,
    ) -> Result<Option<Secret>, CredentialError> {
        let key = (owner.to_owned(), upstream.to_owned());
        let notify = self.waiters.entry(key.clone()).or_default().clone();
        let deadline = tokio::time::Instant::now() + within;
        let found = loop {
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(t) = self.token(owner, upstream, None).await? {
                break Some(t);
            }
            tokio::select! {
                _ = &mut woken => {}
                // Another replica may have stored it: its page submission wakes nobody here.
                _ = tokio::time::sleep(POLL_EVERY) => {}
                _ = tokio::time::sleep_until(deadline) => break None,
            }
        };
        drop(notify);
        // The last waiter removes the entry.
        self.waiters
            .remove_if(&key, |_, n| Arc::strong_count(n) == 1);
        Ok(found)
    }
}

/// A pasted token: 1..=MAX_TOKEN_BYTES of visible ASCII.
pub fn check_token(token: &str) -> Result<(), Refused> {
    if token.is_empty() {
        return Err(Refused::EmptyToken);
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Refused::TokenTooLong);
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Refused::TokenMalformed);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
