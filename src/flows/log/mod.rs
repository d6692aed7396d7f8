//! The run log: runs, their events and their artifacts, behind a small async storage trait:
//! SQLite for one process (its calls run on the blocking pool), PostgreSQL for replicas
//! (an async client), so no call of the log blocks a runtime worker.

use crate::flows::error::RunError;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::events::{Event, Stamped};

#[cfg(feature = "postgres")]
mod postgres;
mod sqlite;
mod sqlite_lock;

#[cfg(feature = "postgres")]
pub use postgres::PgLog;
pub use sqlite::SqliteLog;

/// Most runs one listing returns (`GET /admin/flows/runs?limit=`, `fedgate flows runs`).
pub const MAX_RUNS_LISTED: usize = 500;

/// A listing's `LIMIT`: the asked number, capped.
pub(crate) fn listed(limit: usize) -> i64 {
    // At most 500: fits.
    limit.min(MAX_RUNS_LISTED) as i64
}

/// Who started a run: enough to call as them again after a restart (their roles are looked
/// up in the config of the moment, so a revoked role stops a resumed run's calls).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Caller {
    pub kind: String,
    pub name: String,
    pub roles: Vec<String>,
    pub unrestricted: bool,
    /// The workspace the starting call worked in (`workflow/workspace`): the stage gate
    /// decides on the run's nodes as that workspace stands when each runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// A run as created.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub flow: String,
    /// The flow file's digest when the run was created.
    pub digest: String,
    pub inputs: Value,
    pub caller: Caller,
    pub created_ms: i64,
    /// The run this one replays (`fedgate flows replay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("run log: {0}")]
pub struct LogError(pub String);

impl From<rusqlite::Error> for LogError {
    fn from(e: rusqlite::Error) -> Self {
        LogError(e.to_string())
    }
}

impl From<serde_json::Error> for LogError {
    fn from(e: serde_json::Error) -> Self {
        LogError(e.to_string())
    }
}

/// The run log of a config: PostgreSQL (shared, with leases) when `[cluster] postgres` is set,
/// else the SQLite file of `[flows] db`. `replica` signs this process' claims on runs.
/// `drive`: this process drives runs (a gateway, an in-process `flows run`), else it only reads.
pub async fn open(
    snapshot: &crate::config::Snapshot,
    replica: &str,
    metrics: &crate::telemetry::cluster_metrics::ClusterMetrics,
    drive: bool,
) -> Result<Arc<dyn RunLog>, RunError> {
    match &snapshot.cluster.postgres {
        #[cfg(feature = "postgres")]
        Some(url) => {
            let owner = format!("{replica}/{:08x}", rand::random::<u32>());
            let log = PgLog::open(url.expose(), owner, snapshot.cluster.lease, metrics.clone())
                .await
                .map_err(|e| LogError(format!("[cluster] postgres: {e}")))?;
            Ok(Arc::new(log))
        }
        // Refused at load (`config::cluster`); kept for a snapshot made otherwise.
        #[cfg(not(feature = "postgres"))]
        Some(_) => {
            let _ = (replica, metrics);
            Err(LogError(crate::config::cluster::without_feature("postgres")).into())
        }
        None => Ok(SqliteLog::open_as(&snapshot.flows.db, drive)?),
    }
}

/// What the engine needs of a run log.
#[async_trait::async_trait]
pub trait RunLog: Send + Sync + std::fmt::Debug {
    /// Records a new run (durably, before its caller hears of it).
    async fn create(&self, run: &RunRecord) -> Result<(), LogError>;
    /// Appends events in one transaction; returns them stamped.
    async fn append(
        &self,
        run_id: &str,
        at_ms: i64,
        events: &[Event],
    ) -> Result<Vec<Stamped>, LogError>;
    async fn events(&self, run_id: &str) -> Result<Vec<Stamped>, LogError>;
    async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, LogError>;
    /// Newest first, at most `limit` and never more than [`MAX_RUNS_LISTED`].
    async fn runs(&self, limit: usize) -> Result<Vec<RunRecord>, LogError>;
    /// Runs without a final event, oldest first (resumed on start).
    async fn unfinished(&self) -> Result<Vec<String>, LogError>;
    async fn put_artifact(&self, run_id: &str, id: &str, body: &[u8]) -> Result<(), LogError>;
    async fn artifact(&self, id: &str) -> Result<Option<Vec<u8>>, LogError>;

    // A log several replicas share also says who drives which run: a replica claims a run
    // for a lease, renews it while it drives the run, and another replica may claim the run
    // once the lease expired. A log of one process needs none of it (the defaults).

    /// Why this process may not record runs here (another process drives the log).
    fn driven_elsewhere(&self) -> Option<LogError> {
        None
    }
    /// How long a claim lasts without renewal; `None`: this process alone uses the log.
    fn lease(&self) -> Option<std::time::Duration> {
        None
    }
    /// Claims an unfinished run for this replica.
    async fn claim(&self, _run_id: &str) -> Result<Claimed, LogError> {
        Ok(Claimed::Yes { from: None })
    }
    /// Renews this replica's claims on `run_ids`; answers the runs it no longer holds.
    async fn renew(&self, _run_ids: &[String]) -> Result<Vec<String>, LogError> {
        Ok(Vec::new())
    }
    /// Gives a run up (this replica stops driving it; another may claim it at once).
    async fn release(&self, _run_id: &str) -> Result<(), LogError> {
        Ok(())
    }
    /// Unfinished runs nobody holds a live claim on, oldest first.
    async fn claimable(&self) -> Result<Vec<String>, LogError> {
        self.unfinished().await
    }
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// This replica drives the run now; `from` names the replica whose lease expired.
    Yes { from: Option<String> },
    /// Another replica holds it.
    No,
}

/// A run's columns, as both logs store them.
pub(crate) type Row = (String, String, String, String, String, i64, Option<String>);

pub(crate) fn to_record(
    (run_id, flow, digest, inputs, caller, created_ms, replay_of): Row,
) -> Result<RunRecord, LogError> {
    Ok(RunRecord {
        run_id,
        flow,
        digest,
        inputs: serde_json::from_str(&inputs)?,
        caller: serde_json::from_str(&caller)?,
        created_ms,
        replay_of,
    })
}

pub(crate) const RUN_COLUMNS: &str = "run_id, flow, digest, inputs, caller, created_ms, replay_of";
