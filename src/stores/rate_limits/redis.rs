//! Rate limits across replicas: the GCRA of governor (the per-process limiter), decided in
//! Redis by one Lua script per call, on Redis' own clock. The script checks every rule that
//! applies and takes a cell from each only when all have one, so there is no read-modify-write
//! race between replicas and no cell is spent on a refused call.
//!
//! Per rule: emission interval `T = 1 s / per_second`, tolerance `τ = T · (burst − 1)`. A key
//! stores its theoretical arrival time (TAT, µs); a call at `now` passes when
//! `now ≥ TAT − τ`, and moves TAT to `max(TAT, now) + T`. Keys expire when they hold no debt.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

use super::{Key, RateLimitStore};
use crate::{
    policy::rate_limit::{Limited, RateLimits, RuleSpec},
    stores::redis::{Redis, StoreDown},
};

static GCRA: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local next_tat = {}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[2 * i - 1])
  local tolerance = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', key) or now)
  if tat < now then tat = now end
  local allowed_at = tat - tolerance
  if now < allowed_at then
    return {i, allowed_at - now}
  end
  next_tat[i] = tat + interval
end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, next_tat[i], 'PX', math.ceil((next_tat[i] - now) / 1000) + 1)
end
return {0, 0}
",
    )
});

/// The limiter of every replica, in Redis.
#[derive(Debug, Clone)]
pub struct InRedis(pub Redis);

#[async_trait::async_trait]
impl RateLimitStore for InRedis {
    async fn take(
        &self,
        limits: &RateLimits,
        key: Key<'_>,
    ) -> Result<Result<(), Limited>, StoreDown> {
        let applied: Vec<Applied<'_>> = limits
            .applicable(key.identity, key.owner, key.item)
            .map(|(rule, key)| Applied { rule, key })
            .collect();
        check(&self.0, &applied).await
    }
}

/// One rule's key and timing for this call.
struct Applied<'a> {
    pub rule: &'a RuleSpec,
    pub key: String,
}

/// Takes a cell from every rule in `applied`, in Redis: `Ok(Err(limited))` names the first
/// rule without one.
async fn check(redis: &Redis, applied: &[Applied<'_>]) -> Result<Result<(), Limited>, StoreDown> {
    if applied.is_empty() {
        return Ok(Ok(()));
    }
    let mut invocation = GCRA.prepare_invoke();
    for a in applied {
        let interval = 1_000_000 / u64::from(a.rule.per_second.get());
        let tolerance = interval * u64::from(a.rule.burst.get() - 1);
        invocation
            .key(redis.key(&["rl", &a.rule.name, &a.key]))
            .arg(interval)
            .arg(tolerance);
    }
    let (index, wait_us): (usize, u64) = redis
        .run("rate_limit", |mut conn| async move {
            invocation.invoke_async(&mut conn).await
        })
        .await?;
    Ok(match index.checked_sub(1).and_then(|i| applied.get(i)) {
        None => Ok(()),
        Some(a) => Err(Limited {
            rule: a.rule.name.clone(),
            retry_after: Duration::from_micros(wait_us),
        }),
    })
}
