//! Approval plans across replicas. Each plan is one Redis value (its whole state, the frozen
//! arguments included) under `plan:<id>`, expiring a minute after the plan does, and its id is
//! in the `plans` index. A replica acting on a plan imports the shared copy into its own
//! `Plans`, decides there with the usual rules, and writes the result back with a
//! compare-and-set on the exact value it imported: of two replicas running the same approved
//! plan at once, one write succeeds and the other is refused (`Used`). A plan is executed once.

#[cfg(feature = "redis")]
use std::sync::LazyLock;

#[cfg(feature = "redis")]
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{PendingPlan, PlanState, Plans};
use crate::stores::{
    Cluster,
    redis::{Redis, StoreDown},
};

/// How long a finished plan stays to answer precisely ("used", "expired"), past its expiry.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
const KEEP_AFTER_MS: u64 = 60_000;

/// A plan with every field (the admin API's form leaves out the arguments).
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    id: String,
    caller: String,
    upstream: String,
    tool: String,
    upstream_tool: String,
    arguments: Map<String, Value>,
    arguments_sha256: String,
    summary: String,
    idempotency_key: Option<Value>,
    policy_version: String,
    approvers: Vec<String>,
    #[serde(default)]
    safety: crate::envelope::Safety,
    created_ms: u64,
    expires_ms: u64,
    state: PlanState,
    approved_by: Option<String>,
}

impl From<PendingPlan> for Stored {
    fn from(p: PendingPlan) -> Self {
        Self {
            id: p.id,
            caller: p.caller,
            upstream: p.upstream,
            tool: p.tool,
            upstream_tool: p.upstream_tool,
            arguments: p.arguments,
            arguments_sha256: p.arguments_sha256,
            summary: p.summary,
            idempotency_key: p.idempotency_key,
            policy_version: p.policy_version,
            approvers: p.approvers,
            safety: p.safety,
            created_ms: p.created_ms,
            expires_ms: p.expires_ms,
            state: p.state,
            approved_by: p.approved_by,
        }
    }
}

impl From<Stored> for PendingPlan {
    fn from(s: Stored) -> Self {
        Self {
            id: s.id,
            caller: s.caller,
            upstream: s.upstream,
            tool: s.tool,
            upstream_tool: s.upstream_tool,
            arguments: s.arguments,
            arguments_sha256: s.arguments_sha256,
            summary: s.summary,
            idempotency_key: s.idempotency_key,
            policy_version: s.policy_version,
            approvers: s.approvers,
            safety: s.safety,
            created_ms: s.created_ms,
            expires_ms: s.expires_ms,
            state: s.state,
            approved_by: s.approved_by,
        }
    }
}

/// What a replica imported of one plan: the exact value its write-back must still find.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub struct Imported(Option<String>);

impl Imported {
    /// A plan this replica just made: its write-back must find no plan of that id.
    pub fn absent() -> Self {
        Self(None)
    }
}

/// Sets `KEYS[1]` to `ARGV[2]` (expiring in `ARGV[3]` ms) only while it holds `ARGV[1]`
/// (an empty `ARGV[1]`: only while it does not exist).
#[cfg(feature = "redis")]
static CAS: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local cur = redis.call('GET', KEYS[1])
if (ARGV[1] == '' and cur == false) or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
",
    )
});

/// The shared plans of one replica.
#[derive(Debug, Clone)]
pub struct SharedPlans {
    redis: Redis,
}

#[cfg(feature = "redis")]
use crate::clock::now_ms;

#[cfg(feature = "redis")]
impl SharedPlans {
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }

    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    fn key(&self, id: &str) -> String {
        self.redis.key(&["plan", id])
    }

    /// The shared copy of plan `id`, as a write-back base, without importing it.
    pub async fn current(&self, id: &str) -> Result<Imported, StoreDown> {
        let key = self.key(id);
        let raw: Option<String> = self
            .redis
            .run("plan_get", |mut c| async move { c.get(&key).await })
            .await?;
        Ok(Imported(raw))
    }

    /// Imports the shared copy of plan `id` into `plans` (replacing this replica's).
    pub async fn import(&self, plans: &Plans, id: &str) -> Result<Imported, StoreDown> {
        let Imported(raw) = self.current(id).await?;
        if let Some(stored) = raw
            .as_deref()
            .and_then(|r| serde_json::from_str::<Stored>(r).ok())
        {
            plans.put(stored.into());
        }
        Ok(Imported(raw))
    }

    /// Writes this replica's state of plan `id` back; `false` when another replica changed it
    /// since `imported` (this replica then holds the new state).
    pub async fn write_back(
        &self,
        plans: &Plans,
        id: &str,
        imported: Imported,
    ) -> Result<bool, StoreDown> {
        let Some(plan) = plans.get(id) else {
            return Ok(true);
        };
        let keep_ms = plan
            .expires_ms
            .saturating_add(KEEP_AFTER_MS)
            .saturating_sub(now_ms())
            .max(1);
        let (created, expires) = (plan.created_ms, plan.expires_ms);
        let value = serde_json::to_string(&Stored::from(plan)).unwrap_or_default();
        if imported.0.as_deref() == Some(value.as_str()) {
            return Ok(true);
        }
        let (key, index) = (self.key(id), self.redis.key(&["plans"]));
        let expected = imported.0.unwrap_or_default();
        let member = id.to_owned();
        let written: i64 = self
            .redis
            .run("plan_write", |mut c| async move {
                let written: i64 = CAS
                    .key(&key)
                    .arg(expected)
                    .arg(value)
                    .arg(keep_ms)
                    .invoke_async(&mut c)
                    .await?;
                if written == 1 {
                    // The index scores plans by expiry: listing drops what is long gone.
                    let _: () = c.zadd(&index, &member, expires.max(created)).await?;
                }
                Ok(written)
            })
            .await?;
        if written == 0 {
            let _ = self.import(plans, id).await;
        }
        Ok(written == 1)
    }

    /// Every plan not yet finished, on any replica, oldest first.
    pub async fn pending(&self) -> Result<Vec<PendingPlan>, StoreDown> {
        let index = self.redis.key(&["plans"]);
        let prefix = self.key("");
        let now = now_ms();
        let values: Vec<Option<String>> = self
            .redis
            .run("plan_list", |mut c| async move {
                // What expired more than a minute ago has no value any more.
                let _: () = c
                    .zrembyscore(&index, 0, now.saturating_sub(KEEP_AFTER_MS))
                    .await?;
                let ids: Vec<String> = c.zrange(&index, 0, -1).await?;
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                let keys: Vec<String> = ids.iter().map(|i| format!("{prefix}{i}")).collect();
                redis::cmd("MGET").arg(&keys).query_async(&mut c).await
            })
            .await?;
        let mut plans: Vec<PendingPlan> = values
            .into_iter()
            .flatten()
            .filter_map(|v| serde_json::from_str::<Stored>(&v).ok())
            .map(PendingPlan::from)
            .filter(|p| !matches!(p.state, PlanState::Done(_)) && p.expires_ms > now)
            .collect();
        plans.sort_by_key(|p| p.created_ms);
        Ok(plans)
    }
}

/// Without the `redis` feature no `SharedPlans` is ever made (`Redis` cannot be).
#[cfg(not(feature = "redis"))]
impl SharedPlans {
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }

    pub async fn current(&self, _: &str) -> Result<Imported, StoreDown> {
        self.redis.never()
    }

    pub async fn import(&self, _: &Plans, _: &str) -> Result<Imported, StoreDown> {
        self.redis.never()
    }

    pub async fn write_back(&self, _: &Plans, _: &str, _: Imported) -> Result<bool, StoreDown> {
        self.redis.never()
    }

    pub async fn pending(&self) -> Result<Vec<PendingPlan>, StoreDown> {
        self.redis.never()
    }
}

/// The shared plans of a replica whose `[cluster]` names Redis.
pub fn of(cluster: &Cluster) -> Option<SharedPlans> {
    cluster.redis.clone().map(SharedPlans::new)
}

/// Where the copy of a plan that every decision is checked against lives: Redis
/// ([`SharedPlans`]) or nowhere but this replica ([`ThisReplica`]). A decision runs on this
/// replica's `Plans` between an `import` and a `write_back`.
#[async_trait::async_trait]
pub trait PlanStore: Send + Sync + std::fmt::Debug {
    /// Brings plan `id` of `plans` in line with the store's copy; the base of the write-back.
    async fn import(&self, plans: &Plans, id: &str) -> Result<Imported, StoreDown>;
    /// Writes `plans`' state of `id` back; `false` when the copy changed since `imported`.
    async fn write_back(
        &self,
        plans: &Plans,
        id: &str,
        imported: Imported,
    ) -> Result<bool, StoreDown>;
    /// The store's copy of plan `id`, as a write-back base, without importing it.
    async fn current(&self, id: &str) -> Result<Imported, StoreDown>;
}

#[async_trait::async_trait]
impl PlanStore for SharedPlans {
    async fn import(&self, plans: &Plans, id: &str) -> Result<Imported, StoreDown> {
        SharedPlans::import(self, plans, id).await
    }
    async fn write_back(
        &self,
        plans: &Plans,
        id: &str,
        imported: Imported,
    ) -> Result<bool, StoreDown> {
        SharedPlans::write_back(self, plans, id, imported).await
    }
    async fn current(&self, id: &str) -> Result<Imported, StoreDown> {
        SharedPlans::current(self, id).await
    }
}

/// No copy but this replica's own plans: every write-back stands.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThisReplica;

#[async_trait::async_trait]
impl PlanStore for ThisReplica {
    async fn import(&self, _: &Plans, _: &str) -> Result<Imported, StoreDown> {
        Ok(Imported::absent())
    }
    async fn write_back(&self, _: &Plans, _: &str, _: Imported) -> Result<bool, StoreDown> {
        Ok(true)
    }
    async fn current(&self, _: &str) -> Result<Imported, StoreDown> {
        Ok(Imported::absent())
    }
}

/// The plan store of `cluster`.
pub fn store(cluster: &Cluster) -> crate::stores::Store<dyn PlanStore> {
    cluster.store(
        std::sync::Arc::new(ThisReplica),
        |r| std::sync::Arc::new(SharedPlans::new(r)),
        "approvals",
        "approval plans",
    )
}
