//! Observability: the audit log (metrics and traces arrive with the operations work).

pub mod audit;
