//! Flow metrics (F12/F14): runs by flow and status, node executions by status, node
//! durations, runs in flight, artifact bytes. Flow ids come from config: the labels are bounded.

use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

#[derive(Debug, Clone)]
pub struct FlowMetrics {
    pub runs: IntCounterVec,
    pub nodes: IntCounterVec,
    pub node_duration: Histogram,
    pub in_flight: IntGauge,
    pub artifact_bytes: IntCounter,
    pub log_append: Histogram,
    pub lease_takeovers: IntCounter,
}

impl FlowMetrics {
    pub(super) fn register(
        registry: &Registry,
        buckets: &[f64],
    ) -> Result<Self, prometheus::Error> {
        let runs = IntCounterVec::new(
            Opts::new(
                "fedgate_flow_runs_total",
                "Flow runs ended, by flow and status",
            ),
            &["flow", "status"],
        )?;
        let nodes = IntCounterVec::new(
            Opts::new(
                "fedgate_flow_nodes_total",
                "Flow node executions ended, by flow and node status",
            ),
            &["flow", "status"],
        )?;
        let node_duration = Histogram::with_opts(
            HistogramOpts::new(
                "fedgate_flow_node_duration_seconds",
                "Duration of one flow node attempt (waiting for a permit included)",
            )
            .buckets(buckets.to_vec()),
        )?;
        let in_flight = IntGauge::new("fedgate_flow_runs_in_flight", "Flow runs being driven")?;
        let artifact_bytes = IntCounter::new(
            "fedgate_flow_artifact_bytes_total",
            "Bytes of node outputs stored as artifacts (over [flows] artifact_bytes)",
        )?;
        let log_append = Histogram::with_opts(
            HistogramOpts::new(
                "fedgate_flow_log_append_seconds",
                "Time to append one batch of events to the run log (one transaction)",
            )
            .buckets(buckets.to_vec()),
        )?;
        let lease_takeovers = IntCounter::new(
            "fedgate_flow_lease_takeovers_total",
            "Flow runs this replica claimed after another replica's lease ran out",
        )?;
        registry.register(Box::new(lease_takeovers.clone()))?;
        registry.register(Box::new(log_append.clone()))?;
        registry.register(Box::new(runs.clone()))?;
        registry.register(Box::new(nodes.clone()))?;
        registry.register(Box::new(node_duration.clone()))?;
        registry.register(Box::new(in_flight.clone()))?;
        registry.register(Box::new(artifact_bytes.clone()))?;
        Ok(Self {
            runs,
            nodes,
            node_duration,
            in_flight,
            artifact_bytes,
            log_append,
            lease_takeovers,
        })
    }

    /// Creates a flow's series at zero, so `rate()` and alerts see a zero before its first run.
    pub fn know_flow(&self, flow: &str) {
        for status in ["succeeded", "partial", "failed", "cancelled"] {
            self.runs.with_label_values(&[flow, status]);
            self.nodes.with_label_values(&[flow, status]);
        }
    }

    pub fn node_finished(&self, flow: &str, status: &str) {
        self.nodes.with_label_values(&[flow, status]).inc();
    }

    pub fn node_seconds(&self, took: Duration) {
        self.node_duration.observe(took.as_secs_f64());
    }

    pub fn artifact(&self, bytes: usize) {
        self.artifact_bytes.inc_by(bytes as u64);
    }

    pub fn run_finished(&self, flow: &str, status: &str) {
        self.runs.with_label_values(&[flow, status]).inc();
    }
}
