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
    /// One operation of `store` (`redis`, `postgres`) took `seconds`.
    pub fn op(&self, store: &'static str, op: &str, seconds: f64) {
        self.op_duration
            .with_label_values(&[store, op])
            .observe(seconds);
    }

    /// One operation of `store` failed or timed out.
    pub fn op_failed(&self, store: &'static str, op: &str) {
        self.op_errors.with_label_values(&[store, op]).inc();
    }

    /// One decision of `feature` made without the shared store (`mode`: `local`, `closed`).
    pub fn fell_back(&self, feature: &str, mode: &str) {
        self.fallbacks.with_label_values(&[feature, mode]).inc();
    }

    /// How many decisions of `feature` were made so (`mode`: `local`, `closed`).
    pub fn fallbacks_of(&self, feature: &str, mode: &str) -> u64 {
        self.fallbacks.with_label_values(&[feature, mode]).get()
    }

    /// How many operations of `store` failed.
    pub fn failures_of(&self, store: &'static str, op: &str) -> u64 {
        self.op_errors.with_label_values(&[store, op]).get()
    }

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
