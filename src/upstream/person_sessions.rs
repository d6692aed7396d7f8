//! Connections to an upstream as each person, for an upstream with a `per_user` credential:
//! `initialize` or discovery, the lists and the calls all carry that person's token, so an
//! upstream that wants a token on every request — or a handshake-era one that binds its
//! session to the token — serves each person as themselves, with their own tools.
//!
//! One connection per person and upstream, opened on their first list or call and closed after
//! `person_sessions.idle_ms` without a call; at most `person_sessions.max` of them per upstream
//! (the least recently used idle one makes room; with none idle a new person is refused, never
//! queued without bound). They are per replica: a stateless-era upstream keeps no session to
//! share, and a handshake-era session is bound to the connection that opened it, so each
//! replica opens its own for the person.

use std::{collections::HashMap, sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use tokio::{sync::OnceCell, time::Instant};
use tokio_util::sync::CancellationToken;

use super::{
    Connection, Upstream,
    client::{UpstreamClient, UpstreamEvent},
    connect::{self, Established},
    error::UpstreamError,
    inflight::Inflight,
    pool::Pool,
    supervisor,
};
use crate::{
    config::TransportSpec,
    router::catalog::Lists,
    secret::Secret,
    upstream::http_client::{PERSON_NEEDS_SCOPE, PERSON_REJECTED},
};

type Slot = Arc<OnceCell<Arc<PersonSession>>>;

/// The people an upstream is connected as, by identity key.
#[derive(Debug, Default)]
pub struct PersonSessions {
    open: parking_lot::Mutex<HashMap<String, Slot>>,
}

/// One person's connection and what it lists for them.
#[derive(Debug)]
pub struct PersonSession {
    pub conn: Arc<Connection>,
    lists: ArcSwap<Lists>,
    /// Shared with the connection's HTTP client: a refreshed token replaces it in place.
    token: Arc<ArcSwap<Secret>>,
    last_used: parking_lot::Mutex<Instant>,
    stop: CancellationToken,
}

impl PersonSession {
    pub fn lists(&self) -> Arc<Lists> {
        self.lists.load_full()
    }

    fn touch(&self, token: &Secret) {
        *self.last_used.lock() = Instant::now();
        if self.token.load().expose() != token.expose() {
            self.token.store(Arc::new(token.clone()));
        }
    }

    fn idle_since(&self) -> Instant {
        *self.last_used.lock()
    }
}

impl PersonSessions {
    /// The lists `owner`'s own connection serves, while it is open.
    pub fn lists_of(&self, owner: &str) -> Option<Arc<Lists>> {
        self.session_of(owner).map(|s| s.lists())
    }

    fn session_of(&self, owner: &str) -> Option<Arc<PersonSession>> {
        self.open.lock().get(owner).and_then(|c| c.get().cloned())
    }

    /// How many people it is connected as (or connecting).
    pub fn len(&self) -> usize {
        self.open.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes every person's connection (the upstream stopped or was replaced).
    pub fn close_all(&self) {
        for slot in self.open.lock().values() {
            if let Some(s) = slot.get() {
                s.stop.cancel();
            }
        }
    }

    /// `owner`'s connection, opened with `token` when there is none (concurrent callers of
    /// one person share one attempt); a token refreshed since replaces the connection's.
    pub(super) async fn connection(
        &self,
        pool: &Arc<Pool>,
        up: &Arc<Upstream>,
        owner: &str,
        token: &Secret,
    ) -> Result<Arc<PersonSession>, UpstreamError> {
        let slot = self.slot(owner, up.spec().person_sessions.max)?;
        let opened = slot
            .get_or_try_init(|| open(pool, up, owner, token))
            .await
            .cloned();
        match opened {
            Ok(s) => {
                s.touch(token);
                Ok(s)
            }
            Err(e) => {
                let mut open = self.open.lock();
                if open
                    .get(owner)
                    .is_some_and(|c| Arc::ptr_eq(c, &slot) && c.get().is_none())
                {
                    open.remove(owner);
                }
                Err(e)
            }
        }
    }

    /// `owner`'s slot; a new one when there is room, made by closing the least recently used
    /// idle connection when the upstream is at `max`.
    fn slot(&self, owner: &str, max: usize) -> Result<Slot, UpstreamError> {
        let mut open = self.open.lock();
        if let Some(s) = open.get(owner) {
            return Ok(s.clone());
        }
        if open.len() >= max {
            let oldest = open
                .iter()
                .filter_map(|(k, c)| c.get().map(|s| (k, s)))
                .filter(|(_, s)| s.conn.inflight.is_empty())
                .min_by_key(|(_, s)| s.idle_since())
                .map(|(k, s)| (k.clone(), s.stop.clone()));
            let Some((key, stop)) = oldest else {
                return Err(UpstreamError::PersonSessionsFull { max });
            };
            stop.cancel();
            open.remove(&key);
        }
        let slot = Slot::default();
        open.insert(owner.to_owned(), slot.clone());
        Ok(slot)
    }

    /// Forgets `session` (it closed), unless a newer one took its place.
    fn closed(&self, owner: &str, session: &Arc<PersonSession>) {
        let mut open = self.open.lock();
        if open
            .get(owner)
            .and_then(|c| c.get())
            .is_some_and(|s| Arc::ptr_eq(s, session))
        {
            open.remove(owner);
        }
    }
}

/// Connects as `owner` and lists what the upstream shows them; then serves the connection in
/// a task of its own until it is idle, closed or stopped.
async fn open(
    pool: &Arc<Pool>,
    up: &Arc<Upstream>,
    owner: &str,
    token: &Secret,
) -> Result<Arc<PersonSession>, UpstreamError> {
    let spec = up.spec();
    let TransportSpec::Http { url, headers, .. } = &spec.transport else {
        return Err(UpstreamError::NotStdio);
    };
    let inflight = Arc::new(Inflight::default());
    let (events, rx) = tokio::sync::mpsc::unbounded_channel();
    let client = UpstreamClient {
        upstream: up.shared_name(),
        inflight: inflight.clone(),
        events,
    };
    let shared_token = Arc::new(ArcSwap::from_pointee(token.clone()));
    let limit = spec.startup_timeout;
    let connecting = connect::connect_http(&spec, url, headers, client, Some(shared_token.clone()));
    let est: Established = tokio::time::timeout(limit, connecting)
        .await
        .map_err(|_| UpstreamError::NoHandshake {
            limit,
            stdout: String::new(),
        })??;
    let peer = est.service.peer().clone();
    let lists = match tokio::time::timeout(limit, supervisor::get_ready(up, &peer, est.era)).await {
        Ok(Ok(l)) => supervisor::index_lists(up, l),
        Ok(Err(e)) => {
            est.service.cancellation_token().cancel();
            return Err(listing_failed(&e));
        }
        Err(_) => {
            est.service.cancellation_token().cancel();
            return Err(UpstreamError::NoHandshake {
                limit,
                stdout: String::new(),
            });
        }
    };
    let session = Arc::new(PersonSession {
        conn: Arc::new(Connection {
            peer,
            inflight,
            era: est.era,
            broken: Default::default(),
        }),
        lists: ArcSwap::from_pointee(lists),
        token: shared_token,
        last_used: parking_lot::Mutex::new(Instant::now()),
        stop: up.stop_token().child_token(),
    });
    tracing::debug!(upstream = %up.name(), era = ?est.era, "connected as a person");
    pool.person_session_opened();
    tokio::spawn(serve(
        pool.clone(),
        up.clone(),
        owner.to_owned(),
        session.clone(),
        est,
        rx,
    ));
    Ok(session)
}

/// What a person's list request failed with: their credential refused, or the upstream's
/// own words.
fn listing_failed(e: &rmcp::ServiceError) -> UpstreamError {
    match e {
        rmcp::ServiceError::McpError(m) if m.code.0 == PERSON_REJECTED => {
            UpstreamError::PersonRefused
        }
        rmcp::ServiceError::McpError(m) if m.code.0 == PERSON_NEEDS_SCOPE => {
            UpstreamError::PersonNeedsScope(
                m.data
                    .as_ref()
                    .and_then(|d| d["scope"].as_str())
                    .unwrap_or_default()
                    .to_owned(),
            )
        }
        other => UpstreamError::Handshake {
            detail: format!(
                "listing as the person failed: {}",
                crate::error::plain(other)
            ),
            stdout: String::new(),
        },
    }
}

/// Serves one person's connection until it is idle past `idle_ms`, closes, breaks or stops;
/// their lists follow the upstream's change notifications.
async fn serve(
    pool: Arc<Pool>,
    up: Arc<Upstream>,
    owner: String,
    session: Arc<PersonSession>,
    est: Established,
    mut events: tokio::sync::mpsc::UnboundedReceiver<UpstreamEvent>,
) {
    let ct = est.service.cancellation_token();
    let waiting = est.service.waiting();
    tokio::pin!(waiting);
    let why = loop {
        let idle = up.spec().person_sessions.idle;
        let due = session.idle_since() + idle;
        tokio::select! {
            _ = &mut waiting => break "connection closed".to_owned(),
            why = session.conn.broken.reported() => break why,
            _ = session.stop.cancelled() => break "closed".to_owned(),
            _ = tokio::time::sleep_until(due) => {
                if session.idle_since() + idle <= Instant::now() && session.conn.inflight.is_empty() {
                    break format!("idle for {idle:?}");
                }
            }
            Some(ev) = events.recv() => relist(&pool, &up, &session, ev).await,
        }
    };
    ct.cancel();
    tracing::debug!(upstream = %up.name(), "a person's connection ended: {why}");
    up.persons.closed(&owner, &session);
    pool.person_session_closed(&owner);
}

/// A person's lists after the upstream said they changed (bounded like a call).
async fn relist(pool: &Pool, up: &Upstream, session: &PersonSession, ev: UpstreamEvent) {
    if let UpstreamEvent::ResourceUpdated(p) = ev {
        pool.downstreams().resource_updated(p);
        return;
    }
    let limit: Duration = up.spec().call_timeout;
    let peer = session.conn.peer.clone();
    match tokio::time::timeout(limit, supervisor::fetch_lists(&peer)).await {
        Ok(Ok(l)) => {
            session
                .lists
                .store(Arc::new(supervisor::index_lists(up, l)));
            pool.downstreams().lists_changed(super::Changed::ALL);
        }
        Ok(Err(e)) => tracing::warn!(upstream = %up.name(), "a person's lists after a change: {e}"),
        Err(_) => {
            tracing::warn!(upstream = %up.name(), "a person's lists took longer than {limit:?}")
        }
    }
}
