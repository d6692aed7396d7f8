//! Observability: the audit log and Prometheus metrics (traces arrive with the operations work).

pub mod audit;
pub mod metrics;
