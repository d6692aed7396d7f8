//! Shared state across replicas (F16), on existing distributed engines: Redis for rate limits,
//! idempotency records (here), approval plans (`approval::shared`), workspaces' stages
//! (`stages::redis_store`) and per-user credentials (`credentials::redis_store`); PostgreSQL
//! for flow runs (`flows::pg_log`, as the flows own their run log). Without `[cluster]` none of this exists and every store is the
//! embedded, per-process one.

pub mod fallback;
pub mod idempotency;
pub mod rate_limits;
pub mod redis;

pub use fallback::{Fallback, Store, Unavailable};

use crate::{config::cluster::ClusterSettings, telemetry::cluster_metrics::ClusterMetrics};

/// Why a store did not answer — a shared one (Redis) or the embedded one of this replica
/// (SQLite). Callers decide on the fact (a fail mode, a `store` refusal); the words are for
/// the log and name the store (`what`: "credential", "stage").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("the shared {0} store (redis) does not answer")]
    Down(&'static str),
    #[error("{0} store: {1}")]
    Local(&'static str, String),
    #[error("{0} store: unreadable value: {1}")]
    Unreadable(&'static str, String),
}

/// Why a shared store could not be set up or subscribed to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// `[cluster] redis` is unusable (the URL is shown without its secrets).
    #[error("[cluster] redis: {0}")]
    Redis(String),
    #[error("subscribing to `{0}`: {1}")]
    Subscribe(String, String),
}

/// The shared stores this replica uses.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    pub redis: Option<redis::Redis>,
}

impl Cluster {
    pub fn open(
        settings: &ClusterSettings,
        metrics: &ClusterMetrics,
    ) -> Result<Self, ClusterError> {
        let redis = match &settings.redis {
            Some(url) => Some(redis::Redis::open(url.expose(), settings, metrics.clone())?),
            None => None,
        };
        Ok(Self { redis })
    }

    /// A store of this replica: `local` alone, or — with `[cluster] redis` — the shared
    /// implementation `shared` makes, with `local` as its fallback (`feature` labels its
    /// fallbacks, `name` is how a refusal names it).
    pub fn store<S: ?Sized>(
        &self,
        local: std::sync::Arc<S>,
        shared: impl FnOnce(redis::Redis) -> std::sync::Arc<S>,
        feature: &'static str,
        name: &'static str,
    ) -> Store<S> {
        match &self.redis {
            None => Store::local(local),
            Some(r) => Store::shared(Fallback::new(
                shared(r.clone()),
                local,
                r.clone(),
                feature,
                name,
            )),
        }
    }
}
