//! Why a gateway could not be put together, a reload was refused, or a stdio session ended
//! badly. These reach the operator (the terminal, the log, `POST /admin/reload`), never a
//! client.

use crate::{
    credentials::{CredentialError, SealError},
    flows::error::RunError,
    stores::{ClusterError, StoreError},
    telemetry::TelemetryError,
};

/// A part of the gateway that could not be built from the snapshot.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("[gateway] state_key: {0}")]
    StateKey(String),
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The stage store (SQLite) could not be opened.
    #[error(transparent)]
    Stages(#[from] StoreError),
    #[error(transparent)]
    Credentials(#[from] CredentialError),
    #[error(transparent)]
    CredentialKey(#[from] SealError),
    /// The run log could not be opened.
    #[error(transparent)]
    Flows(#[from] RunError),
}

/// A reload that was refused; the running config stays.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    #[error("reload task failed: {0}")]
    Task(String),
    /// The file does not validate: its diagnostics, one after another.
    #[error("{0}")]
    Invalid(String),
}

/// A stdio session that did not start or did not end cleanly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StdioError {
    #[error("stdio client did not initialize: {0}")]
    Initialize(String),
    #[error("stdio session ended abnormally: {0}")]
    Ended(String),
}
