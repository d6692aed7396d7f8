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

/// Why a telemetry sink could not be set up at start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot set up metrics: {0}")]
    Metrics(String),
    #[error("cannot open audit log `{0}`: {1}")]
    Audit(String, String),
    #[error("cannot set up the OTLP trace exporter: {0}")]
    Traces(String),
}
