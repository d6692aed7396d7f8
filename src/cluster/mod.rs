//! Shared state across replicas (F16), on existing distributed engines: Redis for rate limits,
//! idempotency records and approval plans; PostgreSQL for flow runs. Without `[cluster]` none
//! of this exists and every store is the embedded, per-process one.

pub mod idempotency;
pub mod plans;
pub mod postgres;
pub mod rate_limit;
pub mod redis;

use std::sync::Arc;

use crate::{
    config::{cluster::ClusterSettings, snapshot::Snapshot},
    flows::log::{RunLog, SqliteLog},
    telemetry::cluster_metrics::ClusterMetrics,
};

/// The shared stores this replica uses.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    pub redis: Option<redis::Redis>,
    /// Approval plans in Redis.
    pub plans: Option<plans::SharedPlans>,
}

impl Cluster {
    pub fn open(settings: &ClusterSettings, metrics: &ClusterMetrics) -> Result<Self, String> {
        let redis = match &settings.redis {
            Some(url) => Some(redis::Redis::open(url.expose(), settings, metrics.clone())?),
            None => None,
        };
        let plans = redis.clone().map(plans::SharedPlans::new);
        Ok(Self { redis, plans })
    }
}

/// The flow run log: PostgreSQL (shared, with leases) when `[cluster] postgres` is set, else
/// the SQLite file of `[flows] db`. `replica` signs this process' claims on runs.
pub fn run_log(
    snapshot: &Snapshot,
    replica: &str,
    metrics: &ClusterMetrics,
) -> Result<Arc<dyn RunLog>, String> {
    match &snapshot.cluster.postgres {
        Some(url) => {
            let owner = format!("{replica}/{:08x}", rand::random::<u32>());
            let log =
                postgres::PgLog::open(url.expose(), owner, snapshot.cluster.lease, metrics.clone())
                    .map_err(|e| format!("[cluster] postgres: {e}"))?;
            Ok(Arc::new(log))
        }
        None => Ok(SqliteLog::open(&snapshot.flows.db).map_err(|e| e.to_string())?),
    }
}
