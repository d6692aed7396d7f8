//! The one place a shared store's outage meets `[cluster] fail`: a [`Fallback`] holds the
//! shared implementation of a store and this replica's own, and when the shared one does not
//! answer it either hands out the local one (`fail = "local"`) or refuses (`"closed"`),
//! counting the fallback under the store's feature label. Redis' "down"/"back" log lines are
//! written once per outage by the connection itself (`stores::redis`).

use std::sync::Arc;

use futures::future::BoxFuture;

use super::redis::{Redis, StoreDown};
use crate::config::cluster::FailMode;

/// A shared store that did not answer while `fail = "closed"`: what refusals name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the shared {0} store does not answer")]
pub struct Unavailable(pub &'static str);

/// A store's shared implementation and its local one, behind the fail mode.
#[derive(Debug)]
pub struct Fallback<S: ?Sized> {
    shared: Arc<S>,
    local: Arc<S>,
    redis: Redis,
    /// The metric label of the store (`rate_limits`, `idempotency`, `approvals`).
    feature: &'static str,
    /// How a refusal names it ("rate limits").
    name: &'static str,
}

impl<S: ?Sized> Clone for Fallback<S> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            local: self.local.clone(),
            redis: self.redis.clone(),
            feature: self.feature,
            name: self.name,
        }
    }
}

impl<S: ?Sized> Fallback<S> {
    pub fn new(
        shared: Arc<S>,
        local: Arc<S>,
        redis: Redis,
        feature: &'static str,
        name: &'static str,
    ) -> Self {
        Self {
            shared,
            local,
            redis,
            feature,
            name,
        }
    }

    /// The implementation every replica shares.
    pub fn shared(&self) -> &S {
        &self.shared
    }

    /// The shared store did not answer (`_down`): this replica's own store to decide on, or
    /// the refusal `fail = "closed"` asks for. Every fallback is counted.
    pub fn after(&self, _down: StoreDown) -> Result<&S, Unavailable> {
        let mode = match self.redis.fail {
            FailMode::Local => "local",
            FailMode::Closed => "closed",
        };
        self.redis.count_fallback(self.feature, mode);
        match self.redis.fail {
            FailMode::Local => Ok(&self.local),
            FailMode::Closed => Err(Unavailable(self.name)),
        }
    }
}

/// One store as the pipeline sees it: this replica's own, or a shared one behind its
/// [`Fallback`]. Steps call [`Store::run`] and never branch on which.
#[derive(Debug)]
pub struct Store<S: ?Sized> {
    local: Arc<S>,
    shared: Option<Fallback<S>>,
}

impl<S: ?Sized> Clone for Store<S> {
    fn clone(&self) -> Self {
        Self {
            local: self.local.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: ?Sized> Store<S> {
    /// This replica's store alone (no `[cluster] redis`).
    pub fn local(local: Arc<S>) -> Self {
        Self {
            local,
            shared: None,
        }
    }

    /// A shared store, with this replica's as its fallback.
    pub fn shared(fallback: Fallback<S>) -> Self {
        Self {
            local: fallback.local.clone(),
            shared: Some(fallback),
        }
    }

    /// The shared implementation, when there is one.
    pub fn shared_store(&self) -> Option<&S> {
        self.shared.as_ref().map(Fallback::shared)
    }

    /// Runs `op` on the shared store, or on this replica's when there is none or (with
    /// `fail = "local"`) the shared one does not answer.
    pub async fn run<'a, T>(
        &'a self,
        op: impl Fn(&'a S) -> BoxFuture<'a, Result<T, StoreDown>>,
    ) -> Result<T, Unavailable> {
        self.run_noting(op).await.map(|(v, _)| v)
    }

    /// [`Store::run`], telling whether the answer came from this replica's store after an
    /// outage of the shared one (so a caller can stay local for the rest of one decision).
    pub async fn run_noting<'a, T>(
        &'a self,
        op: impl Fn(&'a S) -> BoxFuture<'a, Result<T, StoreDown>>,
    ) -> Result<(T, bool), Unavailable> {
        let Some(fallback) = &self.shared else {
            // This replica's stores live in its memory: they answer.
            return op(&self.local)
                .await
                .map(|v| (v, false))
                .map_err(|_| Unavailable("local"));
        };
        match op(fallback.shared()).await {
            Ok(v) => Ok((v, false)),
            Err(down) => op(fallback.after(down)?)
                .await
                .map(|v| (v, true))
                .map_err(|_| Unavailable(fallback.name)),
        }
    }

    /// This replica's own store (for the rest of a decision that fell back).
    pub fn local_store(&self) -> &S {
        &self.local
    }
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::*;
    use crate::{config::cluster::ClusterSettings, telemetry::cluster_metrics::ClusterMetrics};

    /// A client that never connects (nothing listens on port 1; `open` is lazy).
    fn redis(fail: FailMode) -> (Redis, ClusterMetrics) {
        let metrics = crate::telemetry::metrics::Metrics::new()
            .expect("metrics")
            .cluster;
        let settings = ClusterSettings {
            fail,
            ..Default::default()
        };
        let r = Redis::open("redis://127.0.0.1:1/", &settings, metrics.clone()).expect("lazy");
        (r, metrics)
    }

    fn counted(m: &ClusterMetrics, feature: &str, mode: &str) -> u64 {
        m.fallbacks_of(feature, mode)
    }

    #[tokio::test]
    async fn local_mode_hands_out_the_local_store_and_counts_each_fallback() {
        let (r, metrics) = redis(FailMode::Local);
        let f = Fallback::new(
            Arc::new("shared"),
            Arc::new("local"),
            r,
            "rate_limits",
            "rate limits",
        );
        assert_eq!(*f.shared(), "shared");
        assert_eq!(f.after(StoreDown).copied(), Ok("local"));
        assert_eq!(f.after(StoreDown).copied(), Ok("local"));
        assert_eq!(counted(&metrics, "rate_limits", "local"), 2);
    }

    #[tokio::test]
    async fn closed_mode_refuses_by_the_stores_name() {
        let (r, metrics) = redis(FailMode::Closed);
        let f = Fallback::new(Arc::new(1), Arc::new(2), r, "approvals", "approval plans");
        assert_eq!(f.after(StoreDown), Err(Unavailable("approval plans")));
        assert_eq!(counted(&metrics, "approvals", "closed"), 1);
        assert_eq!(counted(&metrics, "approvals", "local"), 0);
    }

    /// A store that answers its name, or does not answer at all.
    #[derive(Debug)]
    struct Probe {
        name: &'static str,
        up: bool,
    }

    fn ask(p: &Probe) -> BoxFuture<'_, Result<&'static str, StoreDown>> {
        Box::pin(async move { if p.up { Ok(p.name) } else { Err(StoreDown) } })
    }

    fn store(fail: FailMode, shared_up: bool) -> (Store<Probe>, ClusterMetrics) {
        let (r, metrics) = redis(fail);
        let shared = Arc::new(Probe {
            name: "shared",
            up: shared_up,
        });
        let local = Arc::new(Probe {
            name: "local",
            up: true,
        });
        let f = Fallback::new(shared, local, r, "idempotency", "idempotency records");
        (Store::shared(f), metrics)
    }

    #[tokio::test]
    async fn a_store_answers_from_the_shared_side_while_it_is_up() {
        let (s, metrics) = store(FailMode::Closed, true);
        assert_eq!(s.run_noting(ask).await, Ok(("shared", false)));
        assert_eq!(counted(&metrics, "idempotency", "closed"), 0);
        let alone = Store::local(Arc::new(Probe {
            name: "local",
            up: true,
        }));
        assert_eq!(alone.run_noting(ask).await, Ok(("local", false)));
        assert!(alone.shared_store().is_none());
    }

    #[tokio::test]
    async fn an_outage_falls_back_or_refuses_by_the_fail_mode() {
        let (s, metrics) = store(FailMode::Local, false);
        assert_eq!(s.run_noting(ask).await, Ok(("local", true)));
        assert_eq!(counted(&metrics, "idempotency", "local"), 1);
        let (s, metrics) = store(FailMode::Closed, false);
        assert_eq!(s.run(ask).await, Err(Unavailable("idempotency records")));
        assert_eq!(counted(&metrics, "idempotency", "closed"), 1);
    }

    #[tokio::test]
    async fn an_unreachable_store_is_store_down_within_the_deadline() {
        let (r, metrics) = redis(FailMode::Local);
        let got: Result<Option<String>, StoreDown> = r
            .run("get", |mut c| async move {
                redis::AsyncCommands::get(&mut c, "k").await
            })
            .await;
        assert_eq!(got, Err(StoreDown));
        assert_eq!(metrics.failures_of("redis", "get"), 1);
    }
}
