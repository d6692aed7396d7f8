//! Where sealed per-user credentials live: one row per (person, upstream), and the connect
//! states already used (a `state` opens one page submission, once). SQLite here, beside the
//! run log; Redis with `[cluster] redis` (`redis`), so every replica uses them.

pub mod redis;

use crate::stores::StoreError;
use std::path::Path;

use parking_lot::Mutex;
use rusqlite::{OptionalExtension, params};

/// A sealed credential as stored; only `Sealer::open` makes it a token again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stored {
    /// Hex of the sealed value.
    pub sealed: String,
    pub connected_at_ms: u64,
}

/// Who connected which upstream (never the token).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Connected {
    pub owner: String,
    pub upstream: String,
    pub connected_at_ms: u64,
}

/// Most connections the admin API lists.
pub const MAX_LISTED: usize = 1000;

#[async_trait::async_trait]
pub trait CredentialStore: Send + Sync + std::fmt::Debug {
    async fn get(&self, owner: &str, upstream: &str) -> Result<Option<Stored>, StoreError>;
    async fn put(&self, owner: &str, upstream: &str, stored: &Stored) -> Result<(), StoreError>;
    /// Removes one upstream's credential of `owner`, or all of them; how many went.
    async fn remove(&self, owner: &str, upstream: Option<&str>) -> Result<usize, StoreError>;
    /// By owner and upstream, at most [`MAX_LISTED`].
    async fn list(&self) -> Result<Vec<Connected>, StoreError>;
    /// Marks a connect state used; false when it was used before.
    async fn claim(&self, nonce: &str, expires_at_ms: u64) -> Result<bool, StoreError>;
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS user_credentials (
  owner TEXT NOT NULL, upstream TEXT NOT NULL, sealed TEXT NOT NULL,
  connected_at_ms INTEGER NOT NULL, PRIMARY KEY (owner, upstream));
CREATE TABLE IF NOT EXISTS used_connect_states (
  nonce TEXT PRIMARY KEY, expires_at_ms INTEGER NOT NULL);
";

/// Credentials in a SQLite file (WAL).
#[derive(Debug)]
pub struct SqliteCredentials(Mutex<rusqlite::Connection>);

fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Local("credential", e.to_string())
}

impl SqliteCredentials {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let c = rusqlite::Connection::open(path)
            .map_err(|e| StoreError::Local("credential", format!("{}: {e}", path.display())))?;
        c.pragma_update(None, "journal_mode", "WAL")
            .and_then(|_| c.execute_batch(SCHEMA))
            .map_err(|e| StoreError::Local("credential", format!("{}: {e}", path.display())))?;
        Ok(Self(Mutex::new(c)))
    }
}

#[async_trait::async_trait]
impl CredentialStore for SqliteCredentials {
    async fn get(&self, owner: &str, upstream: &str) -> Result<Option<Stored>, StoreError> {
        self.0
            .lock()
            .query_row(
                "SELECT sealed, connected_at_ms FROM user_credentials \
                 WHERE owner = ?1 AND upstream = ?2",
                params![owner, upstream],
                |r| {
                    Ok(Stored {
                        sealed: r.get(0)?,
                        connected_at_ms: r.get::<_, i64>(1)?.max(0) as u64,
                    })
                },
            )
            .optional()
            .map_err(db)
    }

    async fn put(&self, owner: &str, upstream: &str, stored: &Stored) -> Result<(), StoreError> {
        self.0
            .lock()
            .execute(
                "INSERT INTO user_credentials (owner, upstream, sealed, connected_at_ms) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (owner, upstream) DO UPDATE SET \
                 sealed = excluded.sealed, connected_at_ms = excluded.connected_at_ms",
                params![
                    owner,
                    upstream,
                    stored.sealed,
                    stored.connected_at_ms as i64
                ],
            )
            .map(|_| ())
            .map_err(db)
    }

    async fn remove(&self, owner: &str, upstream: Option<&str>) -> Result<usize, StoreError> {
        let c = self.0.lock();
        match upstream {
            Some(u) => c.execute(
                "DELETE FROM user_credentials WHERE owner = ?1 AND upstream = ?2",
                params![owner, u],
            ),
            None => c.execute(
                "DELETE FROM user_credentials WHERE owner = ?1",
                params![owner],
            ),
        }
        .map_err(db)
    }

    async fn list(&self) -> Result<Vec<Connected>, StoreError> {
        let c = self.0.lock();
        let mut q = c
            .prepare(
                "SELECT owner, upstream, connected_at_ms FROM user_credentials \
                 ORDER BY owner, upstream LIMIT ?1",
            )
            .map_err(db)?;
        q.query_map(params![MAX_LISTED as i64], |r| {
            Ok(Connected {
                owner: r.get(0)?,
                upstream: r.get(1)?,
                connected_at_ms: r.get::<_, i64>(2)?.max(0) as u64,
            })
        })
        .map_err(db)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(db)
    }

    async fn claim(&self, nonce: &str, expires_at_ms: u64) -> Result<bool, StoreError> {
        let c = self.0.lock();
        // Used states are kept only until they would have expired anyway.
        c.execute(
            "DELETE FROM used_connect_states WHERE expires_at_ms < ?1",
            params![crate::clock::now_ms() as i64],
        )
        .map_err(db)?;
        let n = c
            .execute(
                "INSERT OR IGNORE INTO used_connect_states (nonce, expires_at_ms) VALUES (?1, ?2)",
                params![nonce, expires_at_ms as i64],
            )
            .map_err(db)?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rows_are_per_owner_and_upstream_and_states_claim_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteCredentials::open(&dir.path().join("c.db")).unwrap();
        let row = |t: &str| Stored {
            sealed: t.into(),
            connected_at_ms: 5,
        };
        s.put("alice", "gh", &row("a1")).await.unwrap();
        s.put("alice", "jira", &row("a2")).await.unwrap();
        s.put("bob", "gh", &row("b1")).await.unwrap();
        s.put("alice", "gh", &row("a3")).await.unwrap();
        assert_eq!(s.get("alice", "gh").await.unwrap().unwrap().sealed, "a3");
        assert_eq!(s.list().await.unwrap().len(), 3);
        assert_eq!(s.remove("alice", Some("gh")).await.unwrap(), 1);
        assert_eq!(s.get("alice", "gh").await.unwrap(), None);
        assert_eq!(s.remove("alice", None).await.unwrap(), 1);
        assert_eq!(s.get("bob", "gh").await.unwrap().unwrap().sealed, "b1");
        let later = crate::clock::now_ms() + 60_000;
        assert!(s.claim("n1", later).await.unwrap());
        assert!(!s.claim("n1", later).await.unwrap());
    }
}
