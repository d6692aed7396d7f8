//! Idempotency records (F9). Every replica first claims a key in its own memory ([`local`]:
//! concurrent duplicates on one replica run once); a call that leads there then claims the
//! key across replicas through a [`SharedRecords`] store — Redis with `[cluster] redis`
//! ([`redis::InRedis`]), else [`ThisReplica`], which has nothing to add. The pipeline's
//! idempotency step holds it behind `stores::Store` and never branches on which.

pub mod local;
#[cfg(feature = "redis")]
pub mod redis;
/// Without the `redis` feature there is no shared lead to finish.
#[cfg(not(feature = "redis"))]
pub mod redis {
    #[derive(Debug)]
    pub struct SharedLead(std::convert::Infallible);

    impl SharedLead {
        pub async fn finish(self, _: &rmcp::model::ServerResult) {
            match self.0 {}
        }
    }
}

use std::time::Duration;

use rmcp::model::ServerResult;

pub use local::{Claim, IdempotencyStore, Leader, META_KEY};

use super::redis::StoreDown;

/// What a call that leads its key on this replica does, decided across replicas.
#[derive(Debug)]
pub enum SharedClaim {
    /// Run it, then [`redis::SharedLead::finish`] (when there is a shared lead to finish).
    Lead(Option<redis::SharedLead>),
    Recorded(Box<ServerResult>),
    Conflict,
}

#[async_trait::async_trait]
pub trait SharedRecords: Send + Sync + std::fmt::Debug {
    /// Claims `scoped` for a call with arguments digest `args`; a recorded result lives
    /// `ttl`. Waits while another replica runs the same call.
    async fn claim(
        &self,
        scoped: &str,
        args: &str,
        ttl: Duration,
    ) -> Result<SharedClaim, StoreDown>;
}

/// No replica but this one: its own records (already claimed) decide alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThisReplica;

#[async_trait::async_trait]
impl SharedRecords for ThisReplica {
    async fn claim(&self, _: &str, _: &str, _: Duration) -> Result<SharedClaim, StoreDown> {
        Ok(SharedClaim::Lead(None))
    }
}

#[cfg(feature = "redis")]
fn shared(r: super::redis::Redis) -> std::sync::Arc<dyn SharedRecords> {
    std::sync::Arc::new(redis::InRedis(r))
}

#[cfg(not(feature = "redis"))]
fn shared(r: super::redis::Redis) -> std::sync::Arc<dyn SharedRecords> {
    r.never()
}

/// The records store of `cluster`.
pub fn store(cluster: &super::Cluster) -> super::Store<dyn SharedRecords> {
    cluster.store(
        std::sync::Arc::new(ThisReplica),
        shared,
        "idempotency",
        "idempotency records",
    )
}
