//! The SQLite run log: one file (`[flows] db`), WAL, one connection; one process drives its
//! runs (`sqlite_lock`). Each call runs on the blocking pool.

use std::{path::Path, sync::Arc};

use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Claimed, LogError, RUN_COLUMNS, Row, RunLog, RunRecord, listed, to_record};
use crate::flows::events::{Event, Stamped};

/// The SQLite run log (WAL; one connection, writes serialized).
#[derive(Debug)]
pub struct SqliteLog {
    db: Arc<Db>,
}

/// The file and its connection, as the blocking pool uses them.
#[derive(Debug)]
struct Db {
    db: Mutex<Connection>,
    path: std::path::PathBuf,
    /// Whether this process drives the log's runs (see `sqlite_lock`).
    driver: super::sqlite_lock::Driver,
}

/// `PRAGMA user_version` of the schema below.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    flow TEXT NOT NULL,
    digest TEXT NOT NULL,
    inputs TEXT NOT NULL,
    caller TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    replay_of TEXT,
    finished INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at_ms INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS artifacts (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_unfinished ON runs (finished, created_ms);
";

impl SqliteLog {
    /// Opens the log to drive its runs, unless another process does (then it only reads).
    pub fn open(path: &Path) -> Result<Arc<Self>, LogError> {
        Self::open_as(path, true)
    }

    /// Opens the log; `drive`: take the driver's lock (else only read, and ask nobody).
    pub fn open_as(path: &Path, drive: bool) -> Result<Arc<Self>, LogError> {
        let at = |e: rusqlite::Error| LogError(format!("{}: {e}", path.display()));
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| LogError(format!("{}: {e}", dir.display())))?;
        }
        // Root may write a file whatever its mode; a log an operator made read-only is not one
        // this gateway should append to.
        if drive && std::fs::metadata(path).is_ok_and(|m| m.permissions().readonly()) {
            return Err(LogError(format!(
                "{} is read-only: the process that drives flow runs appends their events to it — make it writable, or give this process its own `[flows] db`",
                path.display()
            )));
        }
        let driver = match drive {
            true => super::sqlite_lock::take(path)?,
            false => super::sqlite_lock::Driver::Reader,
        };
        let db = Connection::open(path).map_err(at)?;
        // WAL with synchronous=NORMAL: a committed event survives a crash of the process (the
        // failure a run must survive); a power loss may take the last transactions.
        db.pragma_update(None, "journal_mode", "WAL").map_err(at)?;
        db.pragma_update(None, "synchronous", "NORMAL")
            .map_err(at)?;
        db.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(at)?;
        let version: i64 = db
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(at)?;
        let fresh: i64 = db
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .map_err(at)?;
        match (version, fresh) {
            (SCHEMA_VERSION, _) => {}
            (0, 0) => {
                db.execute_batch(SCHEMA).map_err(at)?;
                db.pragma_update(None, "user_version", SCHEMA_VERSION)
                    .map_err(at)?;
            }
            (v, _) => {
                return Err(LogError(format!(
                    "{}: run log schema version {v}, this fedgate reads version {SCHEMA_VERSION}",
                    path.display()
                )));
            }
        }
        Ok(Arc::new(Self {
            db: Arc::new(Db {
                db: Mutex::new(db),
                path: path.to_owned(),
                driver,
            }),
        }))
    }

    /// Runs `f` on the blocking pool.
    async fn on_db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Db) -> Result<T, LogError> + Send + 'static,
    ) -> Result<T, LogError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(|e| LogError(format!("the run log's call did not finish: {e}")))?
    }
}

#[async_trait::async_trait]
impl RunLog for SqliteLog {
    async fn create(&self, run: &RunRecord) -> Result<(), LogError> {
        let run = run.clone();
        self.on_db(move |d| d.create(&run)).await
    }

    async fn append(
        &self,
        run_id: &str,
        at_ms: i64,
        events: &[Event],
    ) -> Result<Vec<Stamped>, LogError> {
        let (run, events) = (run_id.to_owned(), events.to_vec());
        self.on_db(move |d| d.append(&run, at_ms, &events)).await
    }

    async fn events(&self, run_id: &str) -> Result<Vec<Stamped>, LogError> {
        let run = run_id.to_owned();
        self.on_db(move |d| d.events(&run)).await
    }

    async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, LogError> {
        let run = run_id.to_owned();
        self.on_db(move |d| d.run(&run)).await
    }

    async fn runs(&self, limit: usize) -> Result<Vec<RunRecord>, LogError> {
        self.on_db(move |d| d.runs(limit)).await
    }

    async fn unfinished(&self) -> Result<Vec<String>, LogError> {
        self.on_db(Db::unfinished).await
    }

    async fn put_artifact(&self, run_id: &str, id: &str, body: &[u8]) -> Result<(), LogError> {
        let (run, id, body) = (run_id.to_owned(), id.to_owned(), body.to_vec());
        self.on_db(move |d| d.put_artifact(&run, &id, &body)).await
    }

    async fn artifact(&self, id: &str) -> Result<Option<Vec<u8>>, LogError> {
        let id = id.to_owned();
        self.on_db(move |d| d.artifact(&id)).await
    }

    fn driven_elsewhere(&self) -> Option<LogError> {
        (!self.db.driver.drives()).then(|| self.db.driver.refusal(&self.db.path))
    }

    // One process drives the file's runs (see `sqlite_lock`); any other claims none.
    async fn claim(&self, _run_id: &str) -> Result<Claimed, LogError> {
        Ok(match self.db.driver.drives() {
            true => Claimed::Yes { from: None },
            false => Claimed::No,
        })
    }

    async fn claimable(&self) -> Result<Vec<String>, LogError> {
        match self.db.driver.drives() {
            true => self.unfinished().await,
            false => Ok(Vec::new()),
        }
    }
}

fn record(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
    ))
}

impl Db {
    fn create(&self, run: &RunRecord) -> Result<(), LogError> {
        if !self.driver.drives() {
            return Err(self.driver.refusal(&self.path));
        }
        self.db.lock().execute(
            "INSERT INTO runs (run_id, flow, digest, inputs, caller, created_ms, replay_of) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                run.run_id,
                run.flow,
                run.digest,
                serde_json::to_string(&run.inputs)?,
                serde_json::to_string(&run.caller)?,
                run.created_ms,
                run.replay_of
            ],
        )?;
        Ok(())
    }

    fn append(&self, run_id: &str, at_ms: i64, events: &[Event]) -> Result<Vec<Stamped>, LogError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        if !self.driver.drives() {
            return Err(self.driver.refusal(&self.path));
        }
        let mut db = self.db.lock();
        // IMMEDIATE: the write lock is taken at BEGIN, where SQLite waits out another
        // connection's lock (busy_timeout); a deferred transaction that read first would be
        // refused at once when it came to write.
        let tx = db.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let last: i64 = tx.query_row(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?1",
            [run_id],
            |r| r.get(0),
        )?;
        let mut out = Vec::with_capacity(events.len());
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO events (run_id, seq, at_ms, body) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for (i, event) in events.iter().enumerate() {
                let seq = last + 1 + i as i64;
                insert.execute(params![run_id, seq, at_ms, serde_json::to_string(event)?])?;
                let seq = seq as u64;
                out.push(Stamped {
                    seq,
                    at_ms,
                    event: event.clone(),
                });
            }
        }
        // The `finished` column only indexes the run list; the state is the events'.
        for e in events {
            let finished = match e {
                Event::RunFinished { .. } => Some(1),
                Event::RunReopened => Some(0),
                _ => None,
            };
            if let Some(f) = finished {
                tx.execute(
                    "UPDATE runs SET finished = ?1 WHERE run_id = ?2",
                    params![f, run_id],
                )?;
            }
        }
        tx.commit()?;
        Ok(out)
    }

    fn events(&self, run_id: &str) -> Result<Vec<Stamped>, LogError> {
        let db = self.db.lock();
        let mut q = db
            .prepare_cached("SELECT seq, at_ms, body FROM events WHERE run_id = ?1 ORDER BY seq")?;
        let rows = q.query_map([run_id], |r| {
            Ok((
                r.get::<_, i64>(0)? as u64,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, at_ms, body) = row?;
            out.push(Stamped {
                seq,
                at_ms,
                event: serde_json::from_str(&body)?,
            });
        }
        Ok(out)
    }

    fn run(&self, run_id: &str) -> Result<Option<RunRecord>, LogError> {
        let db = self.db.lock();
        let row = db
            .query_row(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?1"),
                [run_id],
                record,
            )
            .optional()?;
        row.map(to_record).transpose()
    }

    fn runs(&self, limit: usize) -> Result<Vec<RunRecord>, LogError> {
        let db = self.db.lock();
        let mut q = db.prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM runs ORDER BY created_ms DESC, run_id DESC LIMIT ?1"
        ))?;
        let rows = q.query_map([listed(limit)], record)?;
        rows.map(|r| to_record(r?)).collect()
    }

    fn unfinished(&self) -> Result<Vec<String>, LogError> {
        let db = self.db.lock();
        let mut q = db.prepare_cached(
            "SELECT run_id FROM runs WHERE finished = 0 ORDER BY created_ms, run_id",
        )?;
        let rows = q.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn put_artifact(&self, run_id: &str, id: &str, body: &[u8]) -> Result<(), LogError> {
        self.db.lock().execute(
            "INSERT OR REPLACE INTO artifacts (id, run_id, body) VALUES (?1, ?2, ?3)",
            params![id, run_id, body],
        )?;
        Ok(())
    }

    fn artifact(&self, id: &str) -> Result<Option<Vec<u8>>, LogError> {
        let db = self.db.lock();
        Ok(db
            .query_row("SELECT body FROM artifacts WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::{
        events::{NodeStatus, Output, RunState, RunStatus},
        log::{Caller, MAX_RUNS_LISTED},
    };

    /// A run record of flow `f` by a local operator.
    fn run_record(run_id: &str, created_ms: i64) -> RunRecord {
        RunRecord {
            run_id: run_id.into(),
            flow: "f".into(),
            digest: "d".into(),
            inputs: serde_json::json!({}),
            caller: Caller {
                kind: "local".into(),
                name: "op".into(),
                roles: vec![],
                unrestricted: true,
                workspace: None,
            },
            created_ms,
            replay_of: None,
        }
    }

    #[tokio::test]
    async fn a_corrupt_run_log_is_refused_naming_the_file_and_a_second_opener_drives_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.db");
        std::fs::write(&bad, b"this is not an SQLite database, not at all, no").unwrap();
        let e = SqliteLog::open(&bad).unwrap_err();
        assert!(e.0.contains("bad.db"), "{e:?}");
        assert_eq!(
            std::fs::read(&bad).unwrap(),
            b"this is not an SQLite database, not at all, no",
            "nothing written"
        );

        let path = dir.path().join("runs.db");
        let first = SqliteLog::open(&path).unwrap();
        let second = SqliteLog::open(&path).unwrap();
        assert!(first.driven_elsewhere().is_none());
        let why = second
            .driven_elsewhere()
            .expect("the second does not drive");
        assert!(
            why.0.contains(&format!("pid {}", std::process::id())),
            "{why:?}"
        );
        let record = run_record("r", 1);
        assert!(second.create(&record).await.is_err());
        first.create(&record).await.unwrap();
        assert!(second.append("r", 2, &[Event::RunReopened]).await.is_err());
        assert_eq!(second.claim("r").await.unwrap(), Claimed::No);
        assert!(second.claimable().await.unwrap().is_empty());
        assert_eq!(first.claimable().await.unwrap(), vec!["r".to_owned()]);
        // The driver gone, the next opener drives.
        drop(first);
        let third = SqliteLog::open(&path).unwrap();
        assert!(third.driven_elsewhere().is_none());
    }

    #[tokio::test]
    async fn a_listing_returns_at_most_the_cap_however_many_are_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let log = SqliteLog::open(&dir.path().join("runs.db")).unwrap();
        for i in 0..=MAX_RUNS_LISTED {
            log.create(&run_record(&format!("r{i}"), i as i64))
                .await
                .unwrap();
        }
        for asked in [usize::MAX, 1 << 63, 1_000_000] {
            assert_eq!(log.runs(asked).await.unwrap().len(), MAX_RUNS_LISTED);
        }
        let newest = log.runs(2).await.unwrap();
        assert_eq!(newest[0].run_id, format!("r{MAX_RUNS_LISTED}"));
        assert_eq!(newest.len(), 2);
    }

    #[tokio::test]
    async fn events_append_in_order_and_fold_to_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let log = SqliteLog::open(&dir.path().join("runs.db")).unwrap();
        let caller = Caller {
            kind: "local".into(),
            name: "op".into(),
            roles: vec![],
            unrestricted: true,
            workspace: None,
        };
        log.create(&RunRecord {
            run_id: "r1".into(),
            flow: "f".into(),
            digest: "d".into(),
            inputs: serde_json::json!({"x": 1}),
            caller: caller.clone(),
            created_ms: 1,
            replay_of: None,
        })
        .await
        .unwrap();
        assert_eq!(log.unfinished().await.unwrap(), vec!["r1".to_owned()]);
        log.append(
            "r1",
            10,
            &[
                Event::NodeReady { node: "a".into() },
                Event::NodeRunning {
                    node: "a".into(),
                    attempt: 1,
                },
            ],
        )
        .await
        .unwrap();
        let stamped = log
            .append(
                "r1",
                20,
                &[
                    Event::NodeSucceeded {
                        node: "a".into(),
                        output: Output::Inline(serde_json::json!(7)),
                    },
                    Event::RunFinished {
                        status: RunStatus::Succeeded,
                        outputs: None,
                        error: None,
                    },
                ],
            )
            .await
            .unwrap();
        assert_eq!(stamped.last().map(|s| s.seq), Some(4));
        let state = RunState::fold(&log.events("r1").await.unwrap());
        assert_eq!(state.node("a"), NodeStatus::Succeeded);
        assert_eq!(state.nodes["a"].attempts, 1);
        assert_eq!(state.finished, Some(RunStatus::Succeeded));
        assert!(log.unfinished().await.unwrap().is_empty());
        assert_eq!(log.run("r1").await.unwrap().unwrap().caller, caller);
        log.put_artifact("r1", "r1/a", b"big").await.unwrap();
        assert_eq!(
            log.artifact("r1/a").await.unwrap().as_deref(),
            Some(&b"big"[..])
        );
    }

    /// One runtime thread, and the file locked by another connection: the append waits for
    /// the lock on the blocking pool while the runtime's other tasks run, and completes once
    /// the lock is gone. A log that blocked the thread would run the append to its busy
    /// timeout before anything else.
    #[tokio::test(flavor = "current_thread")]
    async fn a_locked_log_holds_up_only_the_call_that_writes_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let log = SqliteLog::open(&path).unwrap();
        log.create(&run_record("r", 1)).await.unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let writer = {
            let log = log.clone();
            tokio::spawn(async move { log.append("r", 2, &[Event::RunReopened]).await })
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let _ = tx.send(());
        });
        rx.await.unwrap();
        assert!(
            !writer.is_finished(),
            "the append waits off the runtime's thread"
        );
        other.execute_batch("COMMIT").unwrap();
        let stamped = writer.await.unwrap().unwrap();
        assert_eq!(stamped.len(), 1);
        assert_eq!(log.events("r").await.unwrap().len(), 1);
    }
}
