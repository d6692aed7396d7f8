//! What a command says when it fails: its own words (a usage problem, what it found), or the
//! typed error of the part that failed. Printed as `fedgate: <error>` with exit code 1.

use crate::{
    config::Invalid,
    flows::error::RunError,
    server::error::{ReloadError, StartError, StdioError},
    server_catalog::BrokenCatalog,
    telemetry::TelemetryError,
    upstream::error::UpstreamError,
};

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command's own words.
    #[error("{0}")]
    Message(String),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Reload(#[from] ReloadError),
    #[error(transparent)]
    Stdio(#[from] StdioError),
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    FlowStart(#[from] crate::flows::StartError),
    #[error(transparent)]
    RunLog(#[from] crate::flows::log::LogError),
    /// `fedgate call --bearer`: the key does not authenticate.
    #[error(transparent)]
    Auth(#[from] crate::policy::identity::AuthError),
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error(transparent)]
    Catalog(#[from] BrokenCatalog),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error(transparent)]
    Demo(#[from] crate::demo::DemoError),
}

impl From<String> for CliError {
    fn from(s: String) -> Self {
        CliError::Message(s)
    }
}

impl From<&str> for CliError {
    fn from(s: &str) -> Self {
        CliError::Message(s.to_owned())
    }
}

/// A run's scheduler that stopped before it answered.
impl From<tokio::sync::oneshot::error::RecvError> for CliError {
    fn from(e: tokio::sync::oneshot::error::RecvError) -> Self {
        CliError::Run(RunError::from(e))
    }
}
