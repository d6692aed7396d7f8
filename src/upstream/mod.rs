//! Upstream MCP servers (F1): processes and connections, supervision, readiness.

pub mod client;
mod connect;
pub mod error;
mod events;
mod health_probe;
pub mod http_client;
pub mod inflight;
mod launch;
mod line_scan;
mod listen;
pub mod person_sessions;
pub mod pool;
pub mod reload;
pub mod sandbox;
pub mod spawn;
mod sse;
mod stdio_wire;
mod supervisor;
pub mod tap;

use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use parking_lot::RwLock;
use rmcp::{RoleClient, service::Peer};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::{
    config::UpstreamSpec,
    policy::{
        breaker::{Breaker, BreakerStatus},
        tool_breakers::ToolBreakers,
    },
    router::catalog::Lists,
};
pub use events::{Changed, Downstreams, NoDownstreams};
use inflight::Inflight;

/// Where an upstream is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Starting,
    Ready,
    Restarting,
    Failed,
    Stopped,
}

/// Which protocol era an upstream speaks, as detected at connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DetectedEra {
    /// `initialize` handshake (2025-06-18, 2025-11-25, …).
    Handshake,
    /// Stateless `server/discover` (2026-07-28).
    Stateless,
}

/// What `/readyz` shows of one upstream.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub phase: Phase,
    pub kind: &'static str,
    pub era: Option<DetectedEra>,
    pub protocol_version: Option<String>,
    pub server: Option<String>,
    pub restarts: u32,
    pub last_error: Option<String>,
    /// While restarting or failed: when the next attempt starts (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<String>,
    pub tools: usize,
    /// Ready for signed-in people only: it refuses requests without a credential, so it lists
    /// nothing until a person connects (their own connection lists their tools).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub signed_in_only: bool,
    /// People it is connected as right now (a `per_user` credential).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub person_sessions: Option<usize>,
    pub breaker: Option<BreakerStatus>,
    /// Tools whose own breaker is not closed.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tool_breakers: std::collections::BTreeMap<String, BreakerStatus>,
}

/// The merged lists of the ready upstreams; routes lead to the upstream itself.
pub type Catalog = crate::router::catalog::Catalog<Arc<Upstream>>;

/// A live connection to an upstream.
#[derive(Debug)]
pub struct Connection {
    pub peer: Peer<RoleClient>,
    pub inflight: Arc<Inflight>,
    pub era: DetectedEra,
    /// Set by a call that found the connection unusable (a request that could not even be
    /// written in time): the supervisor drops the connection and starts the upstream again.
    pub broken: Broken,
}

/// Why a connection was found unusable, once.
#[derive(Debug, Default)]
pub struct Broken {
    token: tokio_util::sync::CancellationToken,
    why: parking_lot::Mutex<Option<String>>,
}

impl Broken {
    pub fn report(&self, why: String) {
        self.why.lock().get_or_insert(why);
        self.token.cancel();
    }

    /// Resolves with the first reason reported.
    pub async fn reported(&self) -> String {
        self.token.cancelled().await;
        self.why.lock().clone().unwrap_or_default()
    }
}

/// One configured upstream: its spec, state, connection and lists.
#[derive(Debug)]
pub struct Upstream {
    /// Swapped by a reload that changes only policy (tier, tool filters, timeouts, pins).
    spec: ArcSwap<UpstreamSpec>,
    /// Stops this upstream alone (a reload removed or replaced it); a child of the pool's.
    stop: CancellationToken,
    name: Arc<str>,
    status: RwLock<Status>,
    conn: ArcSwapOption<Connection>,
    lists: ArcSwap<Lists>,
    pub breaker: Breaker,
    /// Breakers of single tools whose answers keep failing.
    pub tool_breakers: ToolBreakers,
    /// Resource URIs downstream clients subscribed to, for a stateless-era upstream (which
    /// has no `resources/subscribe`: its `subscriptions/listen` filter carries them).
    pub watched: tokio::sync::watch::Sender<std::collections::BTreeSet<String>>,
    /// Its listen stream's failures were logged and no stream has stayed open long since: an
    /// episode that outlives the connection it began on (a flapping server reconnects often).
    listen_failing: std::sync::atomic::AtomicBool,
    /// Its connections as each person (a `per_user` credential).
    pub persons: person_sessions::PersonSessions,
}

impl Upstream {
    pub fn new(spec: Arc<UpstreamSpec>, stop: CancellationToken) -> Self {
        let kind = spec.transport.kind();
        let breaker = Breaker::new(spec.breaker.clone());
        Self {
            name: spec.name.as_str().into(),
            spec: ArcSwap::new(spec),
            stop,
            status: RwLock::new(Status {
                phase: Phase::Starting,
                kind,
                era: None,
                protocol_version: None,
                server: None,
                restarts: 0,
                last_error: None,
                next_attempt_at: None,
                tools: 0,
                signed_in_only: false,
                person_sessions: None,
                breaker: None,
                tool_breakers: Default::default(),
            }),
            conn: ArcSwapOption::empty(),
            lists: ArcSwap::from_pointee(Lists::default()),
            breaker,
            tool_breakers: ToolBreakers::default(),
            watched: tokio::sync::watch::Sender::new(Default::default()),
            listen_failing: Default::default(),
            persons: Default::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as a shared string, for routes and labels (no copy per call).
    pub fn shared_name(&self) -> Arc<str> {
        self.name.clone()
    }

    /// The current spec (a reload may replace it; the name never changes).
    pub fn spec(&self) -> Arc<UpstreamSpec> {
        self.spec.load_full()
    }

    pub(crate) fn set_spec(&self, spec: Arc<UpstreamSpec>) {
        self.spec.store(spec);
    }

    /// Stops this upstream's supervisor (and its process).
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    pub(crate) fn stop_token(&self) -> &CancellationToken {
        &self.stop
    }

    pub fn status(&self) -> Status {
        let mut s = self.status.read().clone();
        let now = tokio::time::Instant::now();
        s.breaker = Some(self.breaker.status(now));
        s.tool_breakers = self.tool_breakers.tripped(now);
        if self.per_user() {
            s.person_sessions = Some(self.persons.len());
        }
        s
    }

    /// Whether it acts as each caller (a `per_user` credential).
    pub fn per_user(&self) -> bool {
        self.spec
            .load()
            .credential
            .as_ref()
            .is_some_and(|c| c.credential.per_user().is_some())
    }

    /// Ready, though for signed-in people only (see [`Status::signed_in_only`]).
    pub fn signed_in_only(&self) -> bool {
        let s = self.status.read();
        s.signed_in_only && s.phase == Phase::Ready
    }

    /// Part of the catalog: connected, or ready for signed-in people.
    pub fn listed(&self) -> bool {
        self.conn.load().is_some() || self.signed_in_only()
    }

    pub fn phase(&self) -> Phase {
        self.status.read().phase
    }

    /// The live connection, if the upstream is ready.
    pub fn connection(&self) -> Option<Arc<Connection>> {
        self.conn.load_full()
    }

    pub fn lists(&self) -> Arc<Lists> {
        self.lists.load_full()
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.write());
    }
}
