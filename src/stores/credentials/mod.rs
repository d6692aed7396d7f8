//! Where sealed per-user credentials live: one row per (person, upstream), and the connect
//! states already used (a `state` opens one page submission, once). SQLite here, beside the
//! run log; Redis with `[cluster] redis` (`redis`), so every replica uses them.

#[cfg(feature = "redis")]
pub mod redis;

use crate::stores::StoreError;
use std::{path::Path, sync::Arc};

use parking_lot::Mutex;
use rusqlite::{OptionalExtension, params};

/// A sealed credential as stored; only `Sealer::open` makes it a token again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stored {
    /// Hex of the sealed value.
    pub sealed: String,
    /// When the person connected (a refresh or a new key leaves it as it was).
    pub connected_at_ms: u64,
    #[serde(default, flatten)]
    pub info: Info,
    /// When a call last used it (kept apart from the row, see [`CredentialStore::touch`]);
    /// read by `get`, never written by `put`.
    #[serde(skip)]
    pub last_used_ms: Option<u64>,
}

/// What may be shown about a credential: times and scopes, never a token.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Info {
    /// When an OAuth token was last refreshed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refreshed_at_ms: Option<u64>,
    /// When the access token expires, when the authorization server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// The scopes granted, when the authorization server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    /// Which account at the provider it is (from the ID token: e-mail, user name, name or
    /// subject), when `openid` was granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The scopes asked for in the sign-in that made it (the configured ones and any a
    /// step-up added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_scopes: Option<Vec<String>>,
}

/// Who connected which upstream (never the token).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Connected {
    pub owner: String,
    pub upstream: String,
    pub connected_at_ms: u64,
    #[serde(flatten)]
    pub info: Info,
    /// When a call last used it (on any replica, to the minute).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_used_ms: Option<u64>,
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
    /// The upstreams `owner` connected, however many.
    async fn owned(&self, owner: &str) -> Result<Vec<String>, StoreError>;
    /// Marks a connect state used; false when it was used before.
    async fn claim(&self, nonce: &str, expires_at_ms: u64) -> Result<bool, StoreError>;
    /// Notes that a call used the credential at `at_ms` (nothing when there is none).
    async fn touch(&self, owner: &str, upstream: &str, at_ms: u64) -> Result<(), StoreError>;
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS user_credentials (
  owner TEXT NOT NULL, upstream TEXT NOT NULL, sealed TEXT NOT NULL,
  connected_at_ms INTEGER NOT NULL, PRIMARY KEY (owner, upstream));
CREATE TABLE IF NOT EXISTS used_connect_states (
  nonce TEXT PRIMARY KEY, expires_at_ms INTEGER NOT NULL);
";

/// Columns added since the table was first made, each added to an older file at open.
const ADDED_COLUMNS: [(&str, &str); 2] = [
    ("info", "TEXT NOT NULL DEFAULT '{}'"),
    ("last_used_ms", "INTEGER"),
];

fn add_columns(c: &rusqlite::Connection) -> rusqlite::Result<()> {
    let mut q = c.prepare("SELECT name FROM pragma_table_info('user_credentials')")?;
    let have: Vec<String> = q.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    for (name, kind) in ADDED_COLUMNS {
        if !have.iter().any(|h| h == name) {
            c.execute_batch(&format!(
                "ALTER TABLE user_credentials ADD COLUMN {name} {kind}"
            ))?;
        }
    }
    Ok(())
}

fn info_of(text: &str) -> Info {
    serde_json::from_str(text).unwrap_or_default()
}

fn ms(v: i64) -> u64 {
    v.max(0) as u64
}

/// Credentials in a SQLite file (WAL). Every statement runs on the blocking pool: a slow disk
/// holds no runtime worker (and so no other call).
#[derive(Debug)]
/// Two connections: writes take one, reads the other, so a write waiting for a lock another
/// process holds (WAL lets readers through) does not hold up the calls that only read.
pub struct SqliteCredentials {
    write: Arc<Mutex<rusqlite::Connection>>,
    read: Arc<Mutex<rusqlite::Connection>>,
}

fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Local("credential", e.to_string())
}

impl SqliteCredentials {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let c = rusqlite::Connection::open(path)
            .map_err(|e| StoreError::Local("credential", format!("{}: {e}", path.display())))?;
        c.pragma_update(None, "journal_mode", "WAL")
            .and_then(|_| c.busy_timeout(crate::stores::SQLITE_BUSY_WAIT))
            .and_then(|_| c.execute_batch(SCHEMA))
            .and_then(|_| add_columns(&c))
            .map_err(|e| StoreError::Local("credential", format!("{}: {e}", path.display())))?;
        let r = rusqlite::Connection::open(path)
            .and_then(|r| r.busy_timeout(crate::stores::SQLITE_BUSY_WAIT).map(|()| r))
            .map_err(|e| StoreError::Local("credential", format!("{}: {e}", path.display())))?;
        Ok(Self {
            write: Arc::new(Mutex::new(c)),
            read: Arc::new(Mutex::new(r)),
        })
    }

    /// Runs the write `f`, on the blocking pool.
    async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        Self::on(self.write.clone(), f).await
    }

    /// Runs the read `f`, on the blocking pool.
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        Self::on(self.read.clone(), f).await
    }

    async fn on<T, F>(conn: Arc<Mutex<rusqlite::Connection>>, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        tokio::task::spawn_blocking(move || f(&conn.lock()))
            .await
            .map_err(|e| StoreError::Local("credential", e.to_string()))?
            .map_err(db)
    }
}

#[async_trait::async_trait]
impl CredentialStore for SqliteCredentials {
    async fn get(&self, owner: &str, upstream: &str) -> Result<Option<Stored>, StoreError> {
        let (owner, upstream) = (owner.to_owned(), upstream.to_owned());
        self.read(move |c| {
            c.query_row(
                "SELECT sealed, connected_at_ms, info, last_used_ms FROM user_credentials \
                 WHERE owner = ?1 AND upstream = ?2",
                params![owner, upstream],
                |r| {
                    Ok(Stored {
                        sealed: r.get(0)?,
                        connected_at_ms: ms(r.get(1)?),
                        info: info_of(&r.get::<_, String>(2)?),
                        last_used_ms: r.get::<_, Option<i64>>(3)?.map(ms),
                    })
                },
            )
            .optional()
        })
        .await
    }

    async fn put(&self, owner: &str, upstream: &str, stored: &Stored) -> Result<(), StoreError> {
        let info = serde_json::to_string(&stored.info)
            .map_err(|e| StoreError::Unreadable("credential", e.to_string()))?;
        let (owner, upstream) = (owner.to_owned(), upstream.to_owned());
        let (sealed, at) = (stored.sealed.clone(), stored.connected_at_ms as i64);
        self.run(move |c| {
            c.execute(
                "INSERT INTO user_credentials (owner, upstream, sealed, connected_at_ms, info) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (owner, upstream) DO UPDATE SET \
                 sealed = excluded.sealed, connected_at_ms = excluded.connected_at_ms, \
                 info = excluded.info",
                params![owner, upstream, sealed, at, info],
            )
            .map(|_| ())
        })
        .await
    }

    async fn remove(&self, owner: &str, upstream: Option<&str>) -> Result<usize, StoreError> {
        let (owner, upstream) = (owner.to_owned(), upstream.map(str::to_owned));
        self.run(move |c| match upstream {
            Some(u) => c.execute(
                "DELETE FROM user_credentials WHERE owner = ?1 AND upstream = ?2",
                params![owner, u],
            ),
            None => c.execute(
                "DELETE FROM user_credentials WHERE owner = ?1",
                params![owner],
            ),
        })
        .await
    }

    async fn list(&self) -> Result<Vec<Connected>, StoreError> {
        self.read(|c| {
            let mut q = c.prepare(
                "SELECT owner, upstream, connected_at_ms, info, last_used_ms \
                 FROM user_credentials ORDER BY owner, upstream LIMIT ?1",
            )?;
            q.query_map(params![MAX_LISTED as i64], |r| {
                Ok(Connected {
                    owner: r.get(0)?,
                    upstream: r.get(1)?,
                    connected_at_ms: ms(r.get(2)?),
                    info: info_of(&r.get::<_, String>(3)?),
                    last_used_ms: r.get::<_, Option<i64>>(4)?.map(ms),
                })
            })?
            .collect::<Result<Vec<_>, _>>()
        })
        .await
    }

    async fn claim(&self, nonce: &str, expires_at_ms: u64) -> Result<bool, StoreError> {
        let nonce = nonce.to_owned();
        let now = crate::clock::now_ms() as i64;
        self.run(move |c| {
            // Used states are kept only until they would have expired anyway.
            c.execute(
                "DELETE FROM used_connect_states WHERE expires_at_ms < ?1",
                params![now],
            )?;
            let n = c.execute(
                "INSERT OR IGNORE INTO used_connect_states (nonce, expires_at_ms) VALUES (?1, ?2)",
                params![nonce, expires_at_ms as i64],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn owned(&self, owner: &str) -> Result<Vec<String>, StoreError> {
        let owner = owner.to_owned();
        self.read(move |c| {
            let mut q = c.prepare(
                "SELECT upstream FROM user_credentials WHERE owner = ?1 ORDER BY upstream",
            )?;
            q.query_map(params![owner], |r| r.get(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .await
    }

    async fn touch(&self, owner: &str, upstream: &str, at_ms: u64) -> Result<(), StoreError> {
        let (owner, upstream) = (owner.to_owned(), upstream.to_owned());
        self.run(move |c| {
            c.execute(
                "UPDATE user_credentials SET last_used_ms = ?3 WHERE owner = ?1 AND upstream = ?2",
                params![owner, upstream, at_ms as i64],
            )
            .map(|_| ())
        })
        .await
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
            info: Info {
                scopes: Some(vec!["repo".into()]),
                ..Info::default()
            },
            last_used_ms: None,
        };
        s.put("alice", "gh", &row("a1")).await.unwrap();
        s.put("alice", "jira", &row("a2")).await.unwrap();
        s.put("bob", "gh", &row("b1")).await.unwrap();
        s.put("alice", "gh", &row("a3")).await.unwrap();
        assert_eq!(s.get("alice", "gh").await.unwrap().unwrap().sealed, "a3");
        assert_eq!(s.list().await.unwrap().len(), 3);
        s.touch("alice", "gh", 77).await.unwrap();
        let listed = s.list().await.unwrap();
        assert_eq!(listed[0].last_used_ms, Some(77));
        assert_eq!(
            listed[0].info.scopes.as_deref(),
            Some(&["repo".to_owned()][..])
        );
        assert_eq!(listed[1].last_used_ms, None);
        assert_eq!(
            s.get("alice", "gh").await.unwrap().unwrap().last_used_ms,
            Some(77)
        );
        assert_eq!(s.remove("alice", Some("gh")).await.unwrap(), 1);
        assert_eq!(s.get("alice", "gh").await.unwrap(), None);
        assert_eq!(s.owned("alice").await.unwrap(), ["jira"]);
        assert_eq!(s.remove("alice", None).await.unwrap(), 1);
        assert_eq!(s.get("bob", "gh").await.unwrap().unwrap().sealed, "b1");
        let later = crate::clock::now_ms() + 60_000;
        assert!(s.claim("n1", later).await.unwrap());
        assert!(!s.claim("n1", later).await.unwrap());
    }

    #[tokio::test]
    async fn a_file_from_before_the_info_columns_opens_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let old = rusqlite::Connection::open(&path).unwrap();
        old.execute_batch(SCHEMA).unwrap();
        old.execute(
            "INSERT INTO user_credentials VALUES ('alice', 'gh', 'aa', 9)",
            [],
        )
        .unwrap();
        drop(old);
        let s = SqliteCredentials::open(&path).unwrap();
        let got = s.get("alice", "gh").await.unwrap().unwrap();
        assert_eq!((got.sealed.as_str(), got.connected_at_ms), ("aa", 9));
        assert_eq!(got.info, Info::default());
        // Opening again finds the columns there.
        drop(s);
        let s = SqliteCredentials::open(&path).unwrap();
        assert_eq!(s.list().await.unwrap().len(), 1);
        let later = crate::clock::now_ms() + 60_000;
        assert!(s.claim("n1", later).await.unwrap());
        assert!(!s.claim("n1", later).await.unwrap());
    }
}
