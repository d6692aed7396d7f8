//! Observability: the audit log, Prometheus metrics and OpenTelemetry traces.

pub mod audit;
pub mod benign;
pub mod call_feed;
pub mod cluster_metrics;
pub mod credential_metrics;
pub mod flow_metrics;
pub mod metrics;
pub mod one_line;
pub mod search_metrics;
pub mod stage_metrics;
pub mod traces;

/// A fresh correlation id (128 random bits, hex: the shape of a trace id): ties one call's
/// audit record, logs and spans together.
pub fn correlation_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}
