//! What each face of the server is handed: small sets of shared handles that `Core` builds
//! once, so a handler holds what it answers with, not the whole gateway. The MCP handler gets
//! [`McpParts`], the HTTP edge [`EdgeParts`], the admin API [`AdminParts`]; only the reloader
//! holds `Core` itself (it swaps what a reload changes).

use std::{
    sync::{Arc, OnceLock},
    time::Duration,
};

use arc_swap::ArcSwap;
use rmcp::model::RequestStateCodec;
use tokio::sync::watch;

use super::{session_limit::SessionLimit, sessions::Hub};
use crate::{
    approval::Plans,
    credentials::UserCredentials,
    pipeline::CallStack,
    policy::{identity::Authenticator, view::Views},
    router::cursor::Cursors,
    stages::Stages,
    tasks::TaskHandles,
    telemetry::{call_feed::CallFeed, metrics::Metrics},
    tool_search::ToolSearch,
    upstream::pool::Pool,
};

/// The MCP handler's: the catalog it lists and routes from, sessions and their
/// subscriptions, who callers are, tool search, stages, cursors, task handles and flows.
#[derive(Debug, Clone)]
pub struct McpParts {
    pub pool: Arc<Pool>,
    pub hub: Arc<Hub>,
    pub auth: Arc<ArcSwap<Authenticator>>,
    pub search: Arc<ToolSearch>,
    pub stages: Option<Arc<Stages>>,
    pub cursors: Cursors,
    pub tasks: TaskHandles,
    /// Flow runs are tasks too (`[flows]`).
    pub flows: Option<Arc<crate::flows::Engine>>,
    /// Per-user credentials: a person's list shows their own tools of the upstreams that act
    /// as each person.
    pub credentials: Option<Arc<UserCredentials>>,
}

/// The HTTP edge's: who callers are and through which view, readiness, the sealing key of
/// session ids, the `/connect` pages' credentials, metrics, and the count of calls in flight.
#[derive(Debug, Clone)]
pub struct EdgeParts {
    pub auth: Arc<ArcSwap<Authenticator>>,
    pub views: Arc<ArcSwap<Views>>,
    pub pool: Arc<Pool>,
    pub seal: Arc<RequestStateCodec>,
    pub credentials: Option<Arc<UserCredentials>>,
    pub metrics: Arc<Metrics>,
    pub gauges: Gauges,
    pub in_flight: InFlight,
}

/// The admin API's: the operator sees and acts on every part, and calls tools through the
/// same stack as clients (built once: a stack owns sweepers and the parked-call lot).
#[derive(Debug, Clone)]
pub struct AdminParts {
    pub pool: Arc<Pool>,
    pub metrics: Arc<Metrics>,
    pub gauges: Gauges,
    pub auth: Arc<ArcSwap<Authenticator>>,
    pub views: Arc<ArcSwap<Views>>,
    pub search: Arc<ToolSearch>,
    pub plans: Arc<Plans>,
    pub cluster: crate::stores::Cluster,
    pub feed: Option<CallFeed>,
    pub stages: Option<Arc<Stages>>,
    pub flows: Option<Arc<crate::flows::Engine>>,
    pub credentials: Option<Arc<UserCredentials>>,
    pub stack: CallStack,
}

/// The gauges that mirror state (upstreams, breakers, pending plans, sessions), brought up
/// to date when metrics are read.
#[derive(Debug, Clone)]
pub struct Gauges {
    pub(super) pool: Arc<Pool>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) plans: Arc<Plans>,
    pub(super) hub: Arc<Hub>,
    /// The HTTP listener's sessions, once it listens.
    pub(super) sessions: Arc<OnceLock<Arc<SessionLimit>>>,
}

impl Gauges {
    pub fn refresh(&self) {
        self.pool.refresh_gauges();
        // Expired plans are counted and audited by the call stack's sweeper.
        self.metrics
            .plans_pending
            .set(self.plans.count_pending() as i64);
        let open = self.sessions.get().map(|s| s.open_sessions());
        self.metrics
            .sessions_active
            .set(open.unwrap_or_else(|| self.hub.len()) as i64);
    }

    /// Counts the HTTP listener's sessions in `fedgate_sessions_active`, the ones that never
    /// sent `notifications/initialized` too.
    pub(super) fn count_sessions(&self, sessions: Arc<SessionLimit>) {
        let _ = self.sessions.set(sessions);
    }

    /// Every metric in Prometheus' text format, the mirrored gauges fresh.
    pub fn render(&self) -> String {
        self.refresh();
        self.metrics.render()
    }
}

/// The count of requests in flight, for draining on shutdown.
#[derive(Debug, Clone)]
pub struct InFlight(watch::Sender<usize>);

impl Default for InFlight {
    fn default() -> Self {
        Self(watch::channel(0).0)
    }
}

/// Counts a request as in flight until dropped.
#[derive(Debug)]
pub struct Started(watch::Sender<usize>);

impl Drop for Started {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl InFlight {
    /// Marks a request in flight until the returned guard is dropped.
    pub fn start(&self) -> Started {
        self.0.send_modify(|n| *n += 1);
        Started(self.0.clone())
    }

    /// Waits (bounded) until no request is in flight; returns whether it got there.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let mut rx = self.0.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|n| *n == 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}
