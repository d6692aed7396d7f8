//! The stores (F16), one trait per store with this replica's implementation and a shared
//! one on an existing distributed engine:
//!
//! | store | trait | this replica | every replica |
//! |---|---|---|---|
//! | rate limits | `rate_limits::RateLimitStore` | `PerReplica` (governor) | `rate_limits::redis::InRedis` |
//! | idempotency records | `idempotency::SharedRecords` | `ThisReplica` (memory, `idempotency::local`) | `idempotency::redis::InRedis` |
//! | approval plans | `approval::shared::PlanStore` | `ThisReplica` (`approval::Plans`) | `SharedPlans` (Redis) |
//! | per-user credentials | `credentials::CredentialStore` | SQLite | `credentials::redis` |
//! | workspaces' stages | `stages::StageStore` | SQLite | `stages::redis` |
//! | flow runs | `flows::log::RunLog` | SQLite | PostgreSQL (`flows::log::PgLog`) |
//!
//! The first three are held as a [`Store`]: the shared implementation behind a [`Fallback`],
//! the one place `[cluster] fail` decides (this replica's store, or a refusal) and counts.
//! Credentials, stages and flow runs have no per-replica fallback: a replica that wrote them
//! alone would disagree with the others, so an outage refuses, whatever `fail` says. The plan
//! and run-log traits live beside their types (`approval`, `flows`), which this module cannot
//! depend on. Without `[cluster]` every store is the embedded, per-process one.

pub mod credentials;
pub mod fallback;
pub mod idempotency;
pub mod rate_limits;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(not(feature = "redis"))]
#[path = "redis_absent.rs"]
pub mod redis;
pub mod stages;

pub use fallback::{Fallback, Store, Unavailable};

/// How long a SQLite store waits for a lock another process holds (a backup, an operator's
/// `sqlite3`) before the operation fails. It waits on the blocking pool, never on a runtime
/// worker.
pub const SQLITE_BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

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
