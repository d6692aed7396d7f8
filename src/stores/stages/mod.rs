//! Where stage instances live: one row per (workflow, workspace) with its state, and every
//! move with who made it, why and on which record. SQLite here; Redis for
//! `[cluster] redis` (`redis`), so every replica sees the same stage.

#[cfg(feature = "redis")]
pub mod redis;

use crate::stores::StoreError;
use std::path::Path;

use parking_lot::Mutex;
use rusqlite::{OptionalExtension, params};

/// One move of a workspace's stage.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Move {
    pub from: String,
    pub to: String,
    /// `kind:name` of the caller who made it.
    pub by: String,
    pub reason: Option<String>,
    pub record: Option<String>,
    pub at_ms: u64,
}

/// A workspace's stage: its state (the workflow's initial one until a first move) and history.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Instance {
    pub state: String,
    pub history: Vec<Move>,
}

/// Most instances the admin API and the console list.
pub const MAX_LISTED: usize = 200;

/// A workspace with its stage, as listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Listed {
    pub workflow: String,
    pub workspace: String,
    #[serde(flatten)]
    pub instance: Instance,
}

/// Stage instances, durable.
#[async_trait::async_trait]
pub trait StageStore: Send + Sync + std::fmt::Debug {
    /// The instance, `None` before its first move.
    async fn get(&self, workflow: &str, workspace: &str) -> Result<Option<Instance>, StoreError>;
    /// Records `m` if the workspace is still in `m.from` (absent counts as `initial`); false
    /// when another move came first.
    async fn advance(
        &self,
        workflow: &str,
        workspace: &str,
        initial: &str,
        m: &Move,
    ) -> Result<bool, StoreError>;
    /// Workspaces that moved at least once, by workflow and workspace, at most [`MAX_LISTED`].
    async fn list(&self) -> Result<Vec<Listed>, StoreError>;
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS stage_instances (
  workflow TEXT NOT NULL, workspace TEXT NOT NULL, state TEXT NOT NULL,
  PRIMARY KEY (workflow, workspace));
CREATE TABLE IF NOT EXISTS stage_moves (
  workflow TEXT NOT NULL, workspace TEXT NOT NULL, seq INTEGER NOT NULL,
  from_state TEXT NOT NULL, to_state TEXT NOT NULL, by TEXT NOT NULL,
  reason TEXT, record TEXT, at_ms INTEGER NOT NULL,
  PRIMARY KEY (workflow, workspace, seq));
";

/// Stage instances in a SQLite file (WAL). Every statement runs on the blocking pool: a slow
/// disk holds no runtime worker (the stage gate is on the call path).
#[derive(Debug)]
pub struct SqliteStages(std::sync::Arc<Mutex<rusqlite::Connection>>);

impl SqliteStages {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let c = rusqlite::Connection::open(path)
            .map_err(|e| StoreError::Local("stage", format!("{}: {e}", path.display())))?;
        c.pragma_update(None, "journal_mode", "WAL")
            .and_then(|_| c.busy_timeout(crate::stores::SQLITE_BUSY_WAIT))
            .and_then(|_| c.execute_batch(SCHEMA))
            .map_err(|e| StoreError::Local("stage", format!("{}: {e}", path.display())))?;
        Ok(Self(std::sync::Arc::new(Mutex::new(c))))
    }

    /// Runs `f` on the connection, on the blocking pool.
    async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut rusqlite::Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let conn = self.0.clone();
        tokio::task::spawn_blocking(move || f(&mut conn.lock()))
            .await
            .map_err(|e| StoreError::Local("stage", e.to_string()))?
    }
}

fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Local("stage", e.to_string())
}

impl SqliteStages {
    fn read(
        c: &rusqlite::Connection,
        workflow: &str,
        workspace: &str,
    ) -> Result<Option<Instance>, StoreError> {
        let state: Option<String> = c
            .query_row(
                "SELECT state FROM stage_instances WHERE workflow = ?1 AND workspace = ?2",
                params![workflow, workspace],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?;
        let Some(state) = state else { return Ok(None) };
        let mut q = c
            .prepare(
                "SELECT from_state, to_state, by, reason, record, at_ms FROM stage_moves \
                 WHERE workflow = ?1 AND workspace = ?2 ORDER BY seq",
            )
            .map_err(db)?;
        let history = q
            .query_map(params![workflow, workspace], |r| {
                Ok(Move {
                    from: r.get(0)?,
                    to: r.get(1)?,
                    by: r.get(2)?,
                    reason: r.get(3)?,
                    record: r.get(4)?,
                    at_ms: r.get::<_, i64>(5)?.max(0) as u64,
                })
            })
            .map_err(db)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db)?;
        Ok(Some(Instance { state, history }))
    }
}

#[async_trait::async_trait]
impl StageStore for SqliteStages {
    async fn get(&self, workflow: &str, workspace: &str) -> Result<Option<Instance>, StoreError> {
        let (workflow, workspace) = (workflow.to_owned(), workspace.to_owned());
        self.run(move |c| Self::read(c, &workflow, &workspace))
            .await
    }

    async fn list(&self) -> Result<Vec<Listed>, StoreError> {
        self.run(Self::list_all).await
    }

    async fn advance(
        &self,
        workflow: &str,
        workspace: &str,
        initial: &str,
        m: &Move,
    ) -> Result<bool, StoreError> {
        let (workflow, workspace, initial, m) = (
            workflow.to_owned(),
            workspace.to_owned(),
            initial.to_owned(),
            m.clone(),
        );
        self.run(move |c| Self::advance_in(c, &workflow, &workspace, &initial, &m))
            .await
    }
}

impl SqliteStages {
    fn list_all(c: &mut rusqlite::Connection) -> Result<Vec<Listed>, StoreError> {
        let mut q = c
            .prepare(
                "SELECT workflow, workspace FROM stage_instances ORDER BY workflow, workspace \
                 LIMIT ?1",
            )
            .map_err(db)?;
        let keys = q
            .query_map(params![MAX_LISTED as i64], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(db)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db)?;
        let mut out = Vec::with_capacity(keys.len());
        for (workflow, workspace) in keys {
            if let Some(instance) = Self::read(c, &workflow, &workspace)? {
                out.push(Listed {
                    workflow,
                    workspace,
                    instance,
                });
            }
        }
        Ok(out)
    }

    fn advance_in(
        c: &mut rusqlite::Connection,
        workflow: &str,
        workspace: &str,
        initial: &str,
        m: &Move,
    ) -> Result<bool, StoreError> {
        // IMMEDIATE: wait for another writer at BEGIN (busy_timeout) instead of being refused
        // at once when the read-then-write transaction comes to write.
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db)?;
        let now: String = tx
            .query_row(
                "SELECT state FROM stage_instances WHERE workflow = ?1 AND workspace = ?2",
                params![workflow, workspace],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?
            .unwrap_or_else(|| initial.to_owned());
        if now != m.from {
            return Ok(false);
        }
        tx.execute(
            "INSERT INTO stage_instances (workflow, workspace, state) VALUES (?1, ?2, ?3) \
             ON CONFLICT (workflow, workspace) DO UPDATE SET state = excluded.state",
            params![workflow, workspace, m.to],
        )
        .map_err(db)?;
        tx.execute(
            "INSERT INTO stage_moves (workflow, workspace, seq, from_state, to_state, by, reason, \
             record, at_ms) SELECT ?1, ?2, COALESCE(MAX(seq), 0) + 1, ?3, ?4, ?5, ?6, ?7, ?8 \
             FROM stage_moves WHERE workflow = ?1 AND workspace = ?2",
            params![
                workflow,
                workspace,
                m.from,
                m.to,
                m.by,
                m.reason,
                m.record,
                m.at_ms as i64
            ],
        )
        .map_err(db)?;
        tx.commit().map_err(db)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(from: &str, to: &str) -> Move {
        Move {
            from: from.into(),
            to: to.into(),
            by: "api_key:rev".into(),
            reason: Some("checked".into()),
            record: None,
            at_ms: 1,
        }
    }

    #[tokio::test]
    async fn moves_persist_across_reopening_and_a_stale_move_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stages.db");
        {
            let s = SqliteStages::open(&path).unwrap();
            assert_eq!(s.get("research", "ws1").await.unwrap(), None);
            assert!(
                s.advance("research", "ws1", "new", &mv("new", "collecting"))
                    .await
                    .unwrap()
            );
            assert!(
                !s.advance("research", "ws1", "new", &mv("new", "verifying"))
                    .await
                    .unwrap(),
                "the workspace is no longer in `new`"
            );
            assert!(
                s.advance("research", "ws1", "new", &mv("collecting", "verifying"))
                    .await
                    .unwrap()
            );
        }
        let s = SqliteStages::open(&path).unwrap();
        let i = s.get("research", "ws1").await.unwrap().unwrap();
        assert_eq!(i.state, "verifying");
        assert_eq!(
            i.history,
            [mv("new", "collecting"), mv("collecting", "verifying")]
        );
        assert_eq!(
            s.get("research", "ws2").await.unwrap(),
            None,
            "workspaces are apart"
        );
        let listed = s.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].workspace, "ws1");
    }
}
