//! Per-user upstream credentials (`[credentials.NAME] per_user`): each person's own token for
//! an upstream, collected on a page fedgate serves (`/connect/<upstream>?state=…`), sealed at
//! rest (`seal`), kept in SQLite or Redis (`store`, `redis_store`) so every replica uses it,
//! and sent only on that person's requests to that upstream.
//!
//! A `state` is sealed too: it names the person, the upstream, an expiry and a nonce, so any
//! replica can open it, and the store lets each nonce through once.

pub mod redis_store;
pub mod seal;
pub mod store;

use std::{path::Path, sync::Arc, time::Duration};

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

pub use seal::Sealer;
pub use store::{Connected, CredentialStore};

use crate::{secret::Secret, telemetry::credential_metrics::CredentialMetrics};

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

/// What a sealed credential holds.
#[derive(Serialize, Deserialize)]
struct Plain {
    token: String,
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
    #[error("the token is empty")]
    EmptyToken,
    #[error("the token is longer than {MAX_TOKEN_BYTES} bytes")]
    TokenTooLong,
    #[error("the token holds spaces or control characters: paste only the token")]
    TokenMalformed,
    #[error("the credential store is not available; try again in a moment")]
    Store,
}

/// Per-user credentials of every upstream, and the calls waiting for one.
pub struct UserCredentials {
    sealer: Sealer,
    store: Arc<dyn CredentialStore>,
    /// Where the connect page is reached: `[gateway] public_url`, else the listener's address.
    base_url: parking_lot::RwLock<String>,
    waiters: DashMap<(String, String), Arc<Notify>>,
    metrics: CredentialMetrics,
}

impl std::fmt::Debug for UserCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserCredentials")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

fn bound(owner: &str, upstream: &str) -> Vec<u8> {
    format!("credential\0{owner}\0{upstream}").into_bytes()
}

const STATE_BINDING: &[u8] = b"connect-state";
/// A stateless-era caller's `requestState` for a connect question: sealed like a state, with
/// its own binding (a page state is no retry state and the other way round) and a prefix that
/// tells it from an upstream's parked state.
const RETRY_BINDING: &[u8] = b"connect-retry";
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
            metrics,
        }
    }

    /// SQLite at `path`, or the shared Redis store.
    pub fn open(
        sealer: Sealer,
        path: &Path,
        redis: Option<crate::cluster::redis::Redis>,
        public_url: Option<String>,
        metrics: CredentialMetrics,
    ) -> Result<Self, String> {
        let store: Arc<dyn CredentialStore> = match redis {
            Some(r) => Arc::new(redis_store::RedisCredentials(r)),
            None => Arc::new(store::SqliteCredentials::open(path)?),
        };
        Ok(Self::new(sealer, store, public_url, metrics))
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

    /// The person's token for `upstream`, if they connected it. A value that no longer opens
    /// (its key was retired and dropped) counts as not connected.
    pub async fn token(&self, owner: &str, upstream: &str) -> Result<Option<Secret>, String> {
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
            let _ = self.put(owner, upstream, &plain.token).await;
        }
        Ok(Some(Secret::new(plain.token)))
    }

    async fn put(&self, owner: &str, upstream: &str, token: &str) -> Result<(), String> {
        let plain = serde_json::to_vec(&Plain {
            token: token.to_owned(),
        })
        .map_err(|e| e.to_string())?;
        let sealed = self.sealer.seal(&plain, &bound(owner, upstream))?;
        let stored = store::Stored {
            sealed: hex::encode(sealed),
            connected_at_ms: crate::clock::now_ms(),
        };
        self.store.put(owner, upstream, &stored).await
    }

    /// Forgets one or all of a person's credentials; how many there were.
    pub async fn revoke(&self, owner: &str, upstream: Option<&str>) -> Result<usize, String> {
        let gone = self.store.remove(owner, upstream).await?;
        if gone > 0 {
            self.metrics.count(upstream.unwrap_or("*"), "revoked");
        }
        Ok(gone)
    }

    /// The upstream refused the person's credential: it is dropped, so they are asked again.
    pub async fn rejected(&self, owner: &str, upstream: &str) {
        self.metrics.count(upstream, "rejected");
        if let Err(e) = self.store.remove(owner, Some(upstream)).await {
            tracing::warn!(upstream, "dropping a rejected credential failed: {e}");
        }
    }

    pub async fn list(&self) -> Result<Vec<Connected>, String> {
        self.store.list().await
    }

    /// A new connect link for `owner` and `upstream`.
    pub fn ask(&self, owner: &str, upstream: &str) -> Result<Ask, String> {
        let nonce = hex::encode(self.sealer.random::<16>()?);
        let ticket = Ticket {
            owner: owner.to_owned(),
            upstream: upstream.to_owned(),
            expires_at_ms: crate::clock::now_ms() + STATE_TTL.as_millis() as u64,
            nonce: nonce.clone(),
        };
        let plain = serde_json::to_vec(&ticket).map_err(|e| e.to_string())?;
        let state = hex::encode(self.sealer.seal(&plain, STATE_BINDING)?);
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
    pub fn retry_state(&self, owner: &str, upstream: &str, ask: &Ask) -> Result<String, String> {
        let ticket = Ticket {
            owner: owner.to_owned(),
            upstream: upstream.to_owned(),
            expires_at_ms: crate::clock::now_ms() + STATE_TTL.as_millis() as u64,
            nonce: ask.elicitation_id.clone(),
        };
        let plain = serde_json::to_vec(&ticket).map_err(|e| e.to_string())?;
        Ok(format!(
            "{RETRY_PREFIX}{}",
            hex::encode(self.sealer.seal(&plain, RETRY_BINDING)?)
        ))
    }

    /// Whether a retry state is this person's, for `upstream`, and unexpired.
    pub fn is_retry_of(&self, state: &str, owner: &str, upstream: &str) -> bool {
        let Some(sealed) = state
            .strip_prefix(RETRY_PREFIX)
            .and_then(|h| hex::decode(h).ok())
        else {
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

    /// The ticket of a state, if it is ours, unexpired and for `upstream` (not yet claimed).
    pub fn check_state(&self, state: &str, upstream: &str) -> Result<Ticket, Refused> {
        let sealed = hex::decode(state.trim()).map_err(|_| Refused::BadState)?;
        let plain = self
            .sealer
            .open(&sealed, STATE_BINDING)
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
        match self.store.claim(&ticket.nonce, ticket.expires_at_ms).await {
            Ok(true) => {}
            Ok(false) => return Err(refused(Refused::Used)),
            Err(e) => {
                tracing::warn!(upstream, "credential store: {e}");
                self.metrics.count(upstream, "failed");
                return Err(Refused::Store);
            }
        }
        if let Err(e) = self.put(&ticket.owner, upstream, token).await {
            tracing::warn!(upstream, "credential store: {e}");
            self.metrics.count(upstream, "failed");
            return Err(Refused::Store);
        }
        self.metrics.count(upstream, "connected");
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
    ) -> Result<Option<Secret>, String> {
        let key = (owner.to_owned(), upstream.to_owned());
        let notify = self.waiters.entry(key.clone()).or_default().clone();
        let deadline = tokio::time::Instant::now() + within;
        let found = loop {
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(t) = self.token(owner, upstream).await? {
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
mod tests {
    use super::*;

    fn creds(dir: &Path) -> UserCredentials {
        let sealer = Sealer::new(&Secret::new("k".repeat(32)), &[]).unwrap();
        let registry = prometheus::Registry::new();
        let metrics = CredentialMetrics::register(&registry).unwrap();
        UserCredentials::open(
            sealer,
            &dir.join("c.db"),
            None,
            Some("http://gw".into()),
            metrics,
        )
        .unwrap()
    }

    fn state_of(url: &str) -> &str {
        url.split("state=").nth(1).unwrap()
    }

    #[tokio::test]
    async fn a_link_connects_once_for_its_person_and_upstream() {
        let dir = tempfile::tempdir().unwrap();
        let c = creds(dir.path());
        let ask = c.ask("alice", "gh").unwrap();
        assert!(ask.url.starts_with("http://gw/connect/gh?state="));
        let state = state_of(&ask.url);
        assert_eq!(
            c.submit("jira", state, "t").await.unwrap_err(),
            Refused::OtherUpstream
        );
        assert_eq!(
            c.submit("gh", "00ff", "t").await.unwrap_err(),
            Refused::BadState
        );
        assert_eq!(
            c.submit("gh", state, "a b").await.unwrap_err(),
            Refused::TokenMalformed
        );
        assert_eq!(
            c.submit("gh", state, &"x".repeat(MAX_TOKEN_BYTES + 1))
                .await
                .unwrap_err(),
            Refused::TokenTooLong
        );
        assert_eq!(c.token("alice", "gh").await.unwrap(), None);
        let t = c.submit("gh", state, "tok-a").await.unwrap();
        assert_eq!((t.owner.as_str(), t.nonce), ("alice", ask.elicitation_id));
        assert_eq!(
            c.submit("gh", state, "tok-b").await.unwrap_err(),
            Refused::Used
        );
        assert_eq!(
            c.token("alice", "gh").await.unwrap().unwrap().expose(),
            "tok-a"
        );
        assert_eq!(c.token("bob", "gh").await.unwrap(), None);
        assert_eq!(c.revoke("alice", None).await.unwrap(), 1);
        assert_eq!(c.token("alice", "gh").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_waiting_call_wakes_when_the_page_stores_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let c = Arc::new(creds(dir.path()));
        let ask = c.ask("alice", "gh").unwrap();
        let waiter = {
            let c = c.clone();
            tokio::spawn(async move {
                c.wait_connected("alice", "gh", Duration::from_secs(30))
                    .await
            })
        };
        c.submit("gh", state_of(&ask.url), "tok").await.unwrap();
        let got = waiter.await.unwrap().unwrap().unwrap();
        assert_eq!(got.expose(), "tok");
    }

    #[test]
    fn a_retry_state_answers_only_its_person_and_upstream() {
        let dir = tempfile::tempdir().unwrap();
        let c = creds(dir.path());
        let ask = c.ask("alice", "gh").unwrap();
        let state = c.retry_state("alice", "gh", &ask).unwrap();
        assert!(c.is_retry_of(&state, "alice", "gh"));
        assert!(!c.is_retry_of(&state, "bob", "gh"));
        assert!(!c.is_retry_of(&state, "alice", "jira"));
        // The page's state is no retry state, and a retry state opens no page.
        let page = state_of(&ask.url);
        assert!(!c.is_retry_of(&format!("{RETRY_PREFIX}{page}"), "alice", "gh"));
        assert!(c.check_state(&state[RETRY_PREFIX.len()..], "gh").is_err());
    }
}
