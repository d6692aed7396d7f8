//! Observability: the audit log, Prometheus metrics and OpenTelemetry traces.

pub mod audit;
pub mod benign;
pub mod call_feed;
pub mod cluster_metrics;
pub mod flow_metrics;
pub mod metrics;
pub mod one_line;
pub mod traces;
