//! Idempotency records across replicas. The first call with a key marks it in flight in Redis
//! (`SET NX` with a short expiry that the running call keeps renewing); a duplicate on any
//! replica waits for the recorded result, or for the mark to go (the first call failed, or its
//! replica died and stopped renewing), and then leads itself. Concurrent duplicates never both run. Only tool-call results up to
//! [`MAX_RESULT_BYTES`] are recorded; for a larger one the mark is removed and a later
//! duplicate runs again.

use std::time::Duration;

use redis::AsyncCommands;
use rmcp::model::{CallToolResult, ServerResult};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{SharedClaim, SharedRecords};
use crate::stores::redis::{Redis, StoreDown};

/// Largest result recorded in Redis (its JSON).
pub const MAX_RESULT_BYTES: usize = 1 << 20;
/// How often a waiting duplicate looks again, at most.
const MAX_POLL: Duration = Duration::from_millis(200);
/// How long an in-flight mark lives without renewal (a dead leader's duplicates wait this long).
const MARK_TTL: Duration = Duration::from_secs(10);
/// How often the leader renews its mark.
const MARK_RENEW: Duration = Duration::from_secs(3);

/// What Redis holds under a key.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum Mark {
    Running {
        args: String,
        token: String,
    },
    Done {
        args: String,
        result: CallToolResult,
    },
}

/// Idempotency records every replica shares, in Redis.
#[derive(Debug, Clone)]
pub struct InRedis(pub Redis);

#[async_trait::async_trait]
impl SharedRecords for InRedis {
    async fn claim(
        &self,
        scoped: &str,
        args: &str,
        ttl: Duration,
    ) -> Result<SharedClaim, StoreDown> {
        claim(&self.0, scoped, args, ttl).await
    }
}

/// This call leads its key across replicas; dropped without `finish`, it removes its mark so a
/// duplicate may run.
#[derive(Debug)]
pub struct SharedLead {
    redis: Redis,
    key: String,
    args: String,
    mark: Option<String>,
    ttl: Duration,
    /// Keeps the mark alive while the call runs; ends with the lead.
    _renew: tokio_util::task::AbortOnDropHandle<()>,
}

/// The Redis key of a scoped idempotency key (hashed: scoped keys hold names of any length).
fn key_of(redis: &Redis, scoped: &str) -> String {
    redis.key(&["idem", &hex::encode(Sha256::digest(scoped.as_bytes()))])
}

/// Claims `scoped` for a call with arguments digest `args`; a recorded result lives `ttl`.
/// Waits while another replica runs the same call.
async fn claim(
    redis: &Redis,
    scoped: &str,
    args: &str,
    ttl: Duration,
) -> Result<SharedClaim, StoreDown> {
    let key = key_of(redis, scoped);
    let token = format!("{:032x}", rand::random::<u128>());
    let mark = serde_json::to_string(&Mark::Running {
        args: args.to_owned(),
        token,
    })
    .unwrap_or_default();
    let px = MARK_TTL.as_millis() as u64;
    let mut poll = Duration::from_millis(10);
    loop {
        let (k, m) = (key.clone(), mark.clone());
        let set: Option<String> = redis
            .run("idempotency_claim", |mut c| async move {
                redis::cmd("SET")
                    .arg(&k)
                    .arg(&m)
                    .arg("NX")
                    .arg("PX")
                    .arg(px)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        if set.is_some() {
            let renew = renew(redis.clone(), key.clone(), mark.clone());
            return Ok(SharedClaim::Lead(Some(SharedLead {
                redis: redis.clone(),
                key,
                args: args.to_owned(),
                mark: Some(mark),
                ttl,
                _renew: tokio_util::task::AbortOnDropHandle::new(tokio::spawn(renew)),
            })));
        }
        let k = key.clone();
        let held: Option<String> = redis
            .run("idempotency_get", |mut c| async move { c.get(&k).await })
            .await?;
        match held.and_then(|h| serde_json::from_str::<Mark>(&h).ok()) {
            // Gone since (expired, or its call failed): try to lead again.
            None => continue,
            Some(Mark::Done { args: a, result }) => {
                return Ok(if a == args {
                    SharedClaim::Recorded(Box::new(ServerResult::CallToolResult(result)))
                } else {
                    SharedClaim::Conflict
                });
            }
            Some(Mark::Running { args: a, .. }) if a != args => return Ok(SharedClaim::Conflict),
            Some(Mark::Running { .. }) => {
                tokio::time::sleep(poll).await;
                poll = (poll * 2).min(MAX_POLL);
            }
        }
    }
}

/// Extends `key`'s expiry only while it still holds `mark`.
static EXTEND: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0",
    )
});

/// Renews the mark every few seconds while the call runs (aborted when it ends).
async fn renew(redis: Redis, key: String, mark: String) {
    loop {
        tokio::time::sleep(MARK_RENEW).await;
        let (k, m) = (key.clone(), mark.clone());
        let _ = redis
            .run("idempotency_renew", |mut c| async move {
                EXTEND
                    .key(&k)
                    .arg(&m)
                    .arg(MARK_TTL.as_millis() as u64)
                    .invoke_async::<i64>(&mut c)
                    .await
            })
            .await;
    }
}

/// Removes `key` only while it still holds `mark` (this call's own).
static RELEASE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    )
});

impl SharedLead {
    /// Records the call's final answer for every replica (a tool result within the size
    /// limit), or releases the key.
    pub async fn finish(mut self, result: &ServerResult) {
        let Some(mark) = self.mark.take() else {
            return;
        };
        let done = match result {
            ServerResult::CallToolResult(r) => serde_json::to_string(&Mark::Done {
                args: self.args.clone(),
                result: r.clone(),
            })
            .ok()
            .filter(|s| s.len() <= MAX_RESULT_BYTES),
            _ => None,
        };
        let key = self.key.clone();
        let px = u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let outcome = match done {
            Some(done) => {
                self.redis
                    .run("idempotency_record", |mut c| async move {
                        redis::cmd("SET")
                            .arg(&key)
                            .arg(done)
                            .arg("PX")
                            .arg(px)
                            .query_async::<()>(&mut c)
                            .await
                    })
                    .await
            }
            None => release(&self.redis, key, mark).await,
        };
        // Unrecorded, the mark expires by itself; duplicates then run again.
        let _ = outcome;
    }
}

async fn release(redis: &Redis, key: String, mark: String) -> Result<(), StoreDown> {
    redis
        .run("idempotency_release", |mut c| async move {
            RELEASE
                .key(&key)
                .arg(&mark)
                .invoke_async::<i64>(&mut c)
                .await
                .map(|_| ())
        })
        .await
}

impl Drop for SharedLead {
    fn drop(&mut self) {
        // Failed or cancelled before an answer: duplicates may run now, not when the mark expires.
        if let Some(mark) = self.mark.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let (redis, key) = (self.redis.clone(), self.key.clone());
            rt.spawn(async move {
                let _ = release(&redis, key, mark).await;
            });
        }
    }
}
