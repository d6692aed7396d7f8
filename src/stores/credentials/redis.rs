//! Per-user credentials in Redis (`[cluster] redis`): one hash `user-credentials` whose fields
//! are `["owner","upstream"]` (JSON, so no name can collide with another) and whose values are
//! the sealed credential with its time; used connect states are keys set once (`SET NX`) that
//! expire with the state.

use crate::stores::StoreError;
use redis::AsyncCommands;

use super::{Connected, CredentialStore, MAX_LISTED, Stored};
use crate::stores::redis::Redis;

#[derive(Debug, Clone)]
pub struct RedisCredentials(pub Redis);

fn down(_: crate::stores::redis::StoreDown) -> StoreError {
    StoreError::Down("credential")
}

fn field(owner: &str, upstream: &str) -> String {
    serde_json::json!([owner, upstream]).to_string()
}

impl RedisCredentials {
    fn hash(&self) -> String {
        self.0.key(&["user-credentials"])
    }

    /// When each credential was last used, apart from the credential so that noting a use
    /// never writes over a refresh another replica made.
    fn used(&self) -> String {
        self.0.key(&["user-credentials-used"])
    }

    async fn all(&self) -> Result<Vec<(String, String)>, StoreError> {
        let hash = self.hash();
        self.0
            .run(
                "credentials_list",
                |mut c| async move { c.hgetall(&hash).await },
            )
            .await
            .map_err(down)
    }
}

#[async_trait::async_trait]
impl CredentialStore for RedisCredentials {
    async fn get(&self, owner: &str, upstream: &str) -> Result<Option<Stored>, StoreError> {
        let (hash, used, f) = (self.hash(), self.used(), field(owner, upstream));
        let (raw, last_used): (Option<String>, Option<u64>) = self
            .0
            .run("credential_get", |mut c| async move {
                let raw: Option<String> = c.hget(&hash, &f).await?;
                let last: Option<u64> = c.hget(&used, &f).await?;
                Ok((raw, last))
            })
            .await
            .map_err(down)?;
        raw.map(|r| {
            serde_json::from_str::<Stored>(&r)
                .map(|mut s| {
                    s.last_used_ms = last_used;
                    s
                })
                .map_err(|e| StoreError::Unreadable("credential", e.to_string()))
        })
        .transpose()
    }

    async fn put(&self, owner: &str, upstream: &str, stored: &Stored) -> Result<(), StoreError> {
        let (hash, f) = (self.hash(), field(owner, upstream));
        let v = serde_json::to_string(stored)
            .map_err(|e| StoreError::Unreadable("credential", e.to_string()))?;
        self.0
            .run("credential_put", |mut c| async move {
                c.hset::<_, _, _, ()>(&hash, &f, v).await
            })
            .await
            .map_err(down)
    }

    async fn remove(&self, owner: &str, upstream: Option<&str>) -> Result<usize, StoreError> {
        let fields: Vec<String> = match upstream {
            Some(u) => vec![field(owner, u)],
            None => self
                .all()
                .await?
                .into_iter()
                .map(|(f, _)| f)
                .filter(|f| serde_json::from_str::<[String; 2]>(f).is_ok_and(|[o, _]| o == owner))
                .collect(),
        };
        if fields.is_empty() {
            return Ok(0);
        }
        let (hash, used) = (self.hash(), self.used());
        let n: usize = self
            .0
            .run("credential_remove", |mut c| async move {
                let n: usize = c.hdel(&hash, &fields).await?;
                c.hdel::<_, _, ()>(&used, &fields).await?;
                Ok(n)
            })
            .await
            .map_err(down)?;
        Ok(n)
    }

    async fn list(&self) -> Result<Vec<Connected>, StoreError> {
        let used_hash = self.used();
        let used: std::collections::HashMap<String, u64> = self
            .0
            .run("credentials_used", |mut c| async move {
                c.hgetall(&used_hash).await
            })
            .await
            .map_err(down)?;
        let mut out: Vec<Connected> = self
            .all()
            .await?
            .into_iter()
            .filter_map(|(f, v)| {
                let last_used_ms = used.get(&f).copied();
                let [owner, upstream] = serde_json::from_str::<[String; 2]>(&f).ok()?;
                let stored: Stored = serde_json::from_str(&v).ok()?;
                Some(Connected {
                    owner,
                    upstream,
                    connected_at_ms: stored.connected_at_ms,
                    info: stored.info,
                    last_used_ms,
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.owner, &a.upstream).cmp(&(&b.owner, &b.upstream)));
        out.truncate(MAX_LISTED);
        Ok(out)
    }

    async fn claim(&self, nonce: &str, expires_at_ms: u64) -> Result<bool, StoreError> {
        let key = self.0.key(&["connect-state", nonce]);
        let ttl_ms = expires_at_ms
            .saturating_sub(crate::clock::now_ms())
            .max(1_000);
        let set: Option<String> = self
            .0
            .run("connect_state_claim", |mut c| async move {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(1)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms)
                    .query_async(&mut c)
                    .await
            })
            .await
            .map_err(down)?;
        Ok(set.is_some())
    }

    async fn owned(&self, owner: &str) -> Result<Vec<String>, StoreError> {
        let mut out: Vec<String> = self
            .all()
            .await?
            .into_iter()
            .filter_map(|(f, _)| {
                let [o, upstream] = serde_json::from_str::<[String; 2]>(&f).ok()?;
                (o == owner).then_some(upstream)
            })
            .collect();
        out.sort();
        Ok(out)
    }

    async fn touch(&self, owner: &str, upstream: &str, at_ms: u64) -> Result<(), StoreError> {
        let (hash, used, f) = (self.hash(), self.used(), field(owner, upstream));
        self.0
            .run("credential_touch", |mut c| async move {
                // Only a credential that is there is noted.
                if c.hexists(&hash, &f).await? {
                    c.hset::<_, _, _, ()>(&used, &f, at_ms).await?;
                }
                Ok(())
            })
            .await
            .map_err(down)
    }
}
