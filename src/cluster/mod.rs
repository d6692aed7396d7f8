//! Shared state across replicas (F16), on existing distributed engines: Redis for rate limits,
//! idempotency records (here) and approval plans (`approval::shared`); PostgreSQL for flow runs (`flows::pg_log`, as
//! the flows own their run log). Without `[cluster]` none of this exists and every store is the
//! embedded, per-process one.

pub mod idempotency;
pub mod rate_limit;
pub mod redis;

use crate::{config::cluster::ClusterSettings, telemetry::cluster_metrics::ClusterMetrics};

/// The shared stores this replica uses.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    pub redis: Option<redis::Redis>,
}

impl Cluster {
    pub fn open(settings: &ClusterSettings, metrics: &ClusterMetrics) -> Result<Self, String> {
        let redis = match &settings.redis {
            Some(url) => Some(redis::Redis::open(url.expose(), settings, metrics.clone())?),
            None => None,
        };
        Ok(Self { redis })
    }
}
