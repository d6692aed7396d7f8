//! Shared-store metrics (F16): latency and failures of each store operation, fallbacks to
//! per-replica state while a store is down. Labels are fixed sets (flow-run lease takeovers
//! are a flow metric).

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

#[derive(Debug, Clone)]
pub struct ClusterMetrics {
    pub op_duration: HistogramVec,
    pub op_errors: IntCounterVec,
    pub fallbacks: IntCounterVec,
}

impl ClusterMetrics {
    pub(super) fn register(
        registry: &Registry,
        buckets: &[f64],
    ) -> Result<Self, prometheus::Error> {
        let op_duration = HistogramVec::new(
            HistogramOpts::new(
                "fedgate_store_operation_seconds",
                "Duration of one shared-store operation, by store and operation",
            )
            .buckets(buckets.to_vec()),
            &["store", "op"],
        )?;
        let op_errors = IntCounterVec::new(
            Opts::new(
                "fedgate_store_errors_total",
                "Shared-store operations that failed or timed out, by store and operation",
            ),
            &["store", "op"],
        )?;
        let fallbacks = IntCounterVec::new(
            Opts::new(
                "fedgate_store_fallbacks_total",
                "Decisions made without the shared store (fail = local: per replica; closed: refused)",
            ),
            &["feature", "mode"],
        )?;
        registry.register(Box::new(op_duration.clone()))?;
        registry.register(Box::new(op_errors.clone()))?;
        registry.register(Box::new(fallbacks.clone()))?;
        Ok(Self {
            op_duration,
            op_errors,
            fallbacks,
        })
    }
}
