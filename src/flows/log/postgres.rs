//! Flow runs on PostgreSQL: the run log's trait with the SQLite log's schema (runs, events,
//! artifacts; event bodies are the same JSON), plus a lease per run. A replica claims a run
//! for `lease`, renews the claim while it drives the run, and every append checks the claim in
//! the same transaction (a replica that lost its run can record nothing more). When a replica
//! dies its claims run out, and another replica claims the run and resumes it from its events,
//! under the crash-recovery rules of the flows. Times come from the database's clock, so the
//! replicas' clocks do not matter.

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::{sync::Mutex, time::Instant};
use tokio_postgres::{Client, Config, NoTls};

use super::{Claimed, LogError, RUN_COLUMNS, Row, RunLog, RunRecord, to_record};
use crate::flows::events::{Event, Stamped};
use crate::telemetry::cluster_metrics::ClusterMetrics;

/// Bumped when the tables below change.
const SCHEMA_VERSION: i32 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS fedgate_schema (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS fedgate_runs (
    run_id TEXT PRIMARY KEY,
    flow TEXT NOT NULL,
    digest TEXT NOT NULL,
    inputs TEXT NOT NULL,
    caller TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    replay_of TEXT,
    finished BOOLEAN NOT NULL DEFAULT FALSE,
    owner TEXT,
    lease_until_ms BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS fedgate_events (
    run_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS fedgate_artifacts (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    body BYTEA NOT NULL
);
CREATE INDEX IF NOT EXISTS fedgate_runs_unfinished ON fedgate_runs (finished, created_ms);
";

/// The database's clock, in milliseconds.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One operation on the connection: a future borrowing the client.
type Op<'c, T> = BoxFuture<'c, Result<T, tokio_postgres::Error>>;

/// The run log on PostgreSQL, over one connection of the async client (operations take turns
/// on it; a lost connection is made again by the next operation).
pub struct PgLog {
    config: Config,
    client: Mutex<Option<Client>>,
    /// This replica, as it signs its claims.
    owner: String,
    lease: Duration,
    metrics: ClusterMetrics,
}

impl std::fmt::Debug for PgLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may hold a password.
        f.debug_struct("PgLog")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

fn err(e: tokio_postgres::Error) -> LogError {
    // The server's own message, never the connection parameters.
    LogError(match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => e.to_string(),
    })
}

impl PgLog {
    /// Connects, and creates the tables once (replicas starting together take turns).
    pub async fn open(
        url: &str,
        owner: String,
        lease: Duration,
        metrics: ClusterMetrics,
    ) -> Result<Self, LogError> {
        let mut config: Config = url
            .parse()
            .map_err(|_| LogError("[cluster] postgres is not a valid URL".into()))?;
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("fedgate");
        let log = Self {
            config,
            client: Mutex::new(None),
            owner,
            lease,
            metrics,
        };
        let version = log
            .with("schema", |c: &mut Client| {
                Box::pin(async move {
                    let tx = c.transaction().await?;
                    tx.execute("SELECT pg_advisory_xact_lock(7268290061)", &[])
                        .await?;
                    tx.batch_execute(SCHEMA).await?;
                    let version: Option<i32> = tx
                        .query_opt("SELECT version FROM fedgate_schema", &[])
                        .await?
                        .map(|r| r.get(0));
                    if version.is_none() {
                        tx.execute(
                            "INSERT INTO fedgate_schema (version) VALUES ($1)",
                            &[&SCHEMA_VERSION],
                        )
                        .await?;
                    }
                    tx.commit().await?;
                    Ok(version.unwrap_or(SCHEMA_VERSION))
                })
            })
            .await?;
        if version != SCHEMA_VERSION {
            return Err(LogError(format!(
                "postgres run log schema version {version}, this fedgate reads version {SCHEMA_VERSION}"
            )));
        }
        Ok(log)
    }

    /// Runs `f` on the connection, connecting first when there is none or it was lost;
    /// timed and counted per operation.
    async fn with<T>(
        &self,
        op: &'static str,
        f: impl for<'c> FnOnce(&'c mut Client) -> Op<'c, T> + Send,
    ) -> Result<T, LogError> {
        let started = Instant::now();
        let out = self.on_connection(f).await;
        self.metrics
            .op("postgres", op, started.elapsed().as_secs_f64());
        if out.is_err() {
            self.metrics.op_failed("postgres", op);
        }
        out
    }

    async fn on_connection<T>(
        &self,
        f: impl for<'c> FnOnce(&'c mut Client) -> Op<'c, T> + Send,
    ) -> Result<T, LogError> {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_none_or(Client::is_closed) {
            *slot = None;
            let (client, connection) = self.config.connect(NoTls).await.map_err(err)?;
            // The connection's I/O runs as its own task; it ends when the client is dropped
            // or the server goes away (the next operation then connects again).
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!("postgres run log connection: {}", err(e).0);
                }
            });
            *slot = Some(client);
        }
        let Some(client) = slot.as_mut() else {
            return Err(LogError("postgres: no connection".into()));
        };
        let out = f(client).await;
        if matches!(&out, Err(e) if e.is_closed()) {
            *slot = None;
        }
        out.map_err(err)
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }
}

fn row(r: &tokio_postgres::Row) -> Row {
    (
        r.get(0),
        r.get(1),
        r.get(2),
        r.get(3),
        r.get(4),
        r.get(5),
        r.get(6),
    )
}

#[async_trait::async_trait]
impl RunLog for PgLog {
    async fn create(&self, run: &RunRecord) -> Result<(), LogError> {
        let (inputs, caller) = (
            serde_json::to_string(&run.inputs)?,
            serde_json::to_string(&run.caller)?,
        );
        let (run, owner, lease) = (run.clone(), self.owner.clone(), self.lease_ms());
        let insert = format!(
            "INSERT INTO fedgate_runs ({RUN_COLUMNS}, owner, lease_until_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, {NOW_MS} + $9)"
        );
        self.with("create", move |c: &mut Client| {
            Box::pin(async move {
                c.execute(
                    &insert,
                    &[
                        &run.run_id,
                        &run.flow,
                        &run.digest,
                        &inputs,
                        &caller,
                        &run.created_ms,
                        &run.replay_of,
                        &owner,
                        &lease,
                    ],
                )
                .await
                .map(|_| ())
            })
        })
        .await
    }

    async fn append(
        &self,
        run_id: &str,
        at_ms: i64,
        events: &[Event],
    ) -> Result<Vec<Stamped>, LogError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let bodies = events
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()?;
        let finished = events.iter().rev().find_map(|e| match e {
            Event::RunFinished { .. } => Some(true),
            Event::RunReopened => Some(false),
            _ => None,
        });
        let (run, owner) = (run_id.to_owned(), self.owner.clone());
        let outcome = self
            .with("append", move |c: &mut Client| {
                Box::pin(
                    async move { append_events(c, &run, &owner, at_ms, bodies, finished).await },
                )
            })
            .await?;
        let last = outcome.map_err(|HeldBy(holder)| {
            LogError(format!(
                "run {run_id} is driven by replica {holder} now (this replica's lease ran out)"
            ))
        })?;
        Ok(events
            .iter()
            .enumerate()
            .map(|(i, event)| Stamped {
                seq: (last + 1 + i as i64) as u64,
                at_ms,
                event: event.clone(),
            })
            .collect())
    }

    async fn events(&self, run_id: &str) -> Result<Vec<Stamped>, LogError> {
        let run = run_id.to_owned();
        let rows = self
            .with("events", move |c: &mut Client| {
                Box::pin(async move {
                    c.query(
                        "SELECT seq, at_ms, body FROM fedgate_events WHERE run_id = $1 ORDER BY seq",
                        &[&run],
                    )
                    .await
                })
            })
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Stamped {
                    seq: r.get::<_, i64>(0) as u64,
                    at_ms: r.get(1),
                    event: serde_json::from_str(r.get::<_, &str>(2))?,
                })
            })
            .collect()
    }

    async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, LogError> {
        let select = format!("SELECT {RUN_COLUMNS} FROM fedgate_runs WHERE run_id = $1");
        let run = run_id.to_owned();
        let found = self
            .with("run", move |c: &mut Client| {
                Box::pin(async move { c.query_opt(&select, &[&run]).await })
            })
            .await?;
        found.map(|r| to_record(row(&r))).transpose()
    }

    async fn runs(&self, limit: usize) -> Result<Vec<RunRecord>, LogError> {
        let limit = super::listed(limit);
        let select = format!(
            "SELECT {RUN_COLUMNS} FROM fedgate_runs ORDER BY created_ms DESC, run_id DESC LIMIT $1"
        );
        let rows = self
            .with("runs", move |c: &mut Client| {
                Box::pin(async move { c.query(&select, &[&limit]).await })
            })
            .await?;
        rows.iter().map(|r| to_record(row(r))).collect()
    }

    async fn unfinished(&self) -> Result<Vec<String>, LogError> {
        let rows = self
            .with("unfinished", |c: &mut Client| {
                Box::pin(async move {
                    c.query(
                        "SELECT run_id FROM fedgate_runs WHERE NOT finished ORDER BY created_ms, run_id",
                        &[],
                    )
                    .await
                })
            })
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn put_artifact(&self, run_id: &str, id: &str, body: &[u8]) -> Result<(), LogError> {
        let (run, id, body) = (run_id.to_owned(), id.to_owned(), body.to_vec());
        self.with("put_artifact", move |c: &mut Client| {
            Box::pin(async move {
                c.execute(
                    "INSERT INTO fedgate_artifacts (id, run_id, body) VALUES ($1, $2, $3) \
                     ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body",
                    &[&id, &run, &body],
                )
                .await
                .map(|_| ())
            })
        })
        .await
    }

    async fn artifact(&self, id: &str) -> Result<Option<Vec<u8>>, LogError> {
        let id = id.to_owned();
        let found = self
            .with("artifact", move |c: &mut Client| {
                Box::pin(async move {
                    c.query_opt("SELECT body FROM fedgate_artifacts WHERE id = $1", &[&id])
                        .await
                })
            })
            .await?;
        Ok(found.map(|r| r.get(0)))
    }

    fn lease(&self) -> Option<Duration> {
        Some(self.lease)
    }

    async fn claim(&self, run_id: &str) -> Result<Claimed, LogError> {
        let (run, owner, lease) = (run_id.to_owned(), self.owner.clone(), self.lease_ms());
        self.with("claim", move |c: &mut Client| {
            Box::pin(async move { claim_run(c, &run, &owner, lease).await })
        })
        .await
    }

    async fn renew(&self, run_ids: &[String]) -> Result<Vec<String>, LogError> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, owner, lease) = (run_ids.to_vec(), self.owner.clone(), self.lease_ms());
        let update = format!(
            "UPDATE fedgate_runs SET lease_until_ms = {NOW_MS} + $2 \
             WHERE owner = $1 AND run_id = ANY($3) RETURNING run_id"
        );
        let kept = self
            .with("renew", move |c: &mut Client| {
                Box::pin(async move { c.query(&update, &[&owner, &lease, &ids]).await })
            })
            .await?;
        let kept: Vec<String> = kept.iter().map(|r| r.get(0)).collect();
        Ok(run_ids
            .iter()
            .filter(|id| !kept.contains(id))
            .cloned()
            .collect())
    }

    async fn release(&self, run_id: &str) -> Result<(), LogError> {
        let (run, owner) = (run_id.to_owned(), self.owner.clone());
        self.with("release", move |c: &mut Client| {
            Box::pin(async move {
                c.execute(
                    "UPDATE fedgate_runs SET owner = NULL, lease_until_ms = 0 WHERE run_id = $1 AND owner = $2",
                    &[&run, &owner],
                )
                .await
                .map(|_| ())
            })
        })
        .await
    }

    async fn claimable(&self) -> Result<Vec<String>, LogError> {
        let select = format!(
            "SELECT run_id FROM fedgate_runs WHERE NOT finished \
             AND (owner IS NULL OR lease_until_ms < {NOW_MS}) ORDER BY created_ms, run_id"
        );
        let rows = self
            .with("claimable", move |c: &mut Client| {
                Box::pin(async move { c.query(&select, &[]).await })
            })
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

/// Another replica's claim on a run: its name.
struct HeldBy(String);

/// Appends a run's events in one transaction, if `owner` still holds the run: the last
/// sequence number before them, or who holds the run now.
async fn append_events(
    c: &mut Client,
    run: &str,
    owner: &str,
    at_ms: i64,
    bodies: Vec<String>,
    finished: Option<bool>,
) -> Result<Result<i64, HeldBy>, tokio_postgres::Error> {
    let tx = c.transaction().await?;
    // The claim is checked where the events are written: a replica that lost the run records
    // nothing more.
    let holder: Option<Option<String>> = tx
        .query_opt(
            "SELECT owner FROM fedgate_runs WHERE run_id = $1 FOR UPDATE",
            &[&run],
        )
        .await?
        .map(|r| r.get(0));
    if let Some(Some(o)) = holder
        && o != owner
    {
        return Ok(Err(HeldBy(o)));
    }
    let last: i64 = tx
        .query_one(
            "SELECT COALESCE(MAX(seq), 0) FROM fedgate_events WHERE run_id = $1",
            &[&run],
        )
        .await?
        .get(0);
    let insert = tx
        .prepare("INSERT INTO fedgate_events (run_id, seq, at_ms, body) VALUES ($1, $2, $3, $4)")
        .await?;
    for (i, body) in bodies.iter().enumerate() {
        let seq = last + 1 + i as i64;
        tx.execute(&insert, &[&run, &seq, &at_ms, body]).await?;
    }
    match finished {
        // A finished run is nobody's any more.
        Some(true) => {
            tx.execute(
                "UPDATE fedgate_runs SET finished = TRUE, owner = NULL, lease_until_ms = 0 WHERE run_id = $1",
                &[&run],
            )
            .await?
        }
        Some(false) => {
            tx.execute(
                "UPDATE fedgate_runs SET finished = FALSE WHERE run_id = $1",
                &[&run],
            )
            .await?
        }
        None => 0,
    };
    tx.commit().await?;
    Ok(Ok(last))
}

/// Claims an unfinished run for `owner` when nobody holds it or the holder's lease ran out.
async fn claim_run(
    c: &mut Client,
    run: &str,
    owner: &str,
    lease: i64,
) -> Result<Claimed, tokio_postgres::Error> {
    let tx = c.transaction().await?;
    let current = tx
        .query_opt(
            &format!(
                "SELECT owner, lease_until_ms < {NOW_MS} FROM fedgate_runs \
                 WHERE run_id = $1 AND NOT finished FOR UPDATE"
            ),
            &[&run],
        )
        .await?;
    let Some(current) = current else {
        return Ok(Claimed::No);
    };
    let (holder, expired): (Option<String>, bool) = (current.get(0), current.get(1));
    let free = match &holder {
        None => true,
        Some(h) => h == owner || expired,
    };
    if !free {
        return Ok(Claimed::No);
    }
    tx.execute(
        &format!(
            "UPDATE fedgate_runs SET owner = $2, lease_until_ms = {NOW_MS} + $3 WHERE run_id = $1"
        ),
        &[&run, &owner, &lease],
    )
    .await?;
    tx.commit().await?;
    Ok(Claimed::Yes {
        from: holder.filter(|h| h != owner),
    })
}
