//! Where rate-limit cells are taken: this replica's governor limiters ([`PerReplica`]), or
//! Redis for every replica at once ([`redis::InRedis`]); the pipeline's rate-limit step holds
//! one [`RateLimitStore`] behind `stores::Store` and never branches on which.

#[cfg(feature = "redis")]
pub mod redis;

use crate::policy::rate_limit::{Limited, RateLimits};

use super::redis::StoreDown;

/// What a call is limited by: who calls which upstream's item.
#[derive(Debug, Clone, Copy)]
pub struct Key<'a> {
    pub identity: &'a str,
    pub owner: &'a str,
    pub item: &'a str,
}

#[async_trait::async_trait]
pub trait RateLimitStore: Send + Sync + std::fmt::Debug {
    /// Takes a cell from every rule of `limits` that applies to `key`, or none when one has
    /// none left: `Ok(Err(limited))` names that rule.
    async fn take(
        &self,
        limits: &RateLimits,
        key: Key<'_>,
    ) -> Result<Result<(), Limited>, StoreDown>;
}

#[cfg(feature = "redis")]
fn shared(r: super::redis::Redis) -> std::sync::Arc<dyn RateLimitStore> {
    std::sync::Arc::new(redis::InRedis(r))
}

#[cfg(not(feature = "redis"))]
fn shared(r: super::redis::Redis) -> std::sync::Arc<dyn RateLimitStore> {
    r.never()
}

/// The rate-limit store of `cluster`.
pub fn store(cluster: &super::Cluster) -> super::Store<dyn RateLimitStore> {
    cluster.store(
        std::sync::Arc::new(PerReplica),
        shared,
        "rate_limits",
        "rate limits",
    )
}

/// This replica's limiters (their state lives in `RateLimits`, swapped by a reload).
#[derive(Debug, Clone, Copy, Default)]
pub struct PerReplica;

#[async_trait::async_trait]
impl RateLimitStore for PerReplica {
    async fn take(
        &self,
        limits: &RateLimits,
        key: Key<'_>,
    ) -> Result<Result<(), Limited>, StoreDown> {
        Ok(limits.check(key.identity, key.owner, key.item))
    }
}
