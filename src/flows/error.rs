//! What can go wrong with a run, by kind: the admin API and the CLI answer by kind (404 for a
//! run that does not exist, 409 for one in the wrong state, 503 when the run log does not
//! answer), never by matching the words.

use super::log::LogError;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no run `{0}`")]
    NoRun(String),
    #[error("flow `{0}` is not loaded")]
    FlowNotLoaded(String),
    #[error("flow `{flow}` has no node `{node}`")]
    NoNode { flow: String, node: String },
    #[error("run {0} has not finished; {1}")]
    Unfinished(String, &'static str),
    #[error("node `{node}` of run {run} is not waiting for a decision")]
    NotDeciding { run: String, node: String },
    #[error("run {0} is not driven by this gateway")]
    NotDriven(String),
    #[error("run {0} ended")]
    Ended(String),
    #[error("the run is being driven already")]
    Driven,
    /// This process stopped driving the run (shutdown, or its lease went to another replica).
    #[error("stopped driving the run here; it resumes from its events")]
    LeftHere,
    /// The run log did not answer (or refused a write).
    #[error(transparent)]
    Log(#[from] LogError),
    /// The log's worker thread or the run's scheduler stopped before it answered.
    #[error("the run's worker stopped: {0}")]
    Stopped(String),
}

impl From<tokio::task::JoinError> for RunError {
    fn from(e: tokio::task::JoinError) -> Self {
        RunError::Stopped(e.to_string())
    }
}

impl From<tokio::sync::oneshot::error::RecvError> for RunError {
    fn from(e: tokio::sync::oneshot::error::RecvError) -> Self {
        RunError::Stopped(e.to_string())
    }
}

impl From<serde_json::Error> for RunError {
    fn from(e: serde_json::Error) -> Self {
        RunError::Log(LogError::from(e))
    }
}
