//! All upstreams of a snapshot: parallel start, the merged catalog, readiness.

use std::{sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use rmcp::model::RequestStateCodec;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Phase, Upstream, supervisor};
use crate::{
    config::Snapshot,
    policy::{
        authz::Access, idempotency::IdempotencyStore, identity::Authenticator, pinning::Pins,
        rate_limit::RateLimits,
    },
    router::{catalog::Catalog, cursor::Cursors},
    server::sessions::{Changed, Hub},
    telemetry::metrics::Metrics,
};

/// How often rate-limit state of idle keys is dropped.
const RATE_LIMIT_EVICT_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub struct Pool {
    /// Replaced as a whole by a reload; each upstream keeps running unless it changed.
    pub(super) upstreams: ArcSwap<Vec<Arc<Upstream>>>,
    separator: String,
    catalog: ArcSwap<Catalog>,
    /// Rebuilding reads the upstream set and stores a catalog: one at a time, so a rebuild
    /// from a supervisor cannot store a catalog of a set a reload has just replaced.
    rebuilding: parking_lot::Mutex<()>,
    pub(super) auth: ArcSwap<Authenticator>,
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    pub(super) pins: Pins,
    pub(super) rate_limits: ArcSwap<RateLimits>,
    idempotency: Arc<IdempotencyStore>,
    shutdown: CancellationToken,
    /// Bumped on every phase change, so waiters need not poll.
    status_tx: watch::Sender<u64>,
    /// Signs cursors and MRTR request state (`[gateway] state_key`).
    seal: Arc<RequestStateCodec>,
    cursors: Cursors,
    input_wait: Duration,
    max_parked_calls: usize,
    /// Routed calls in flight, for draining on shutdown.
    calls_in_flight: watch::Sender<usize>,
}

/// Counts a call as in flight until dropped.
#[derive(Debug)]
pub struct InFlightCall(Arc<Pool>);

impl Drop for InFlightCall {
    fn drop(&mut self) {
        self.0
            .calls_in_flight
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Pool {
    pub fn new(snapshot: &Snapshot) -> Result<Arc<Self>, String> {
        let (status_tx, _) = watch::channel(0);
        let shutdown = CancellationToken::new();
        let seal = Arc::new(
            RequestStateCodec::try_new(match &snapshot.gateway.state_key {
                Some(k) => k.expose().as_bytes().to_vec(),
                None => rand::random::<[u8; 32]>().to_vec(),
            })
            .map_err(|e| format!("[gateway] state_key: {e}"))?,
        );
        Ok(Arc::new(Self {
            cursors: Cursors::new(seal.clone(), snapshot.gateway.cursor_ttl),
            input_wait: snapshot.gateway.input_wait,
            max_parked_calls: snapshot.gateway.max_parked_calls,
            seal,
            metrics: Arc::new(Metrics::new()?),
            upstreams: ArcSwap::from_pointee(
                snapshot
                    .upstreams
                    .iter()
                    .map(|s| Arc::new(Upstream::new(s.clone(), shutdown.child_token())))
                    .collect(),
            ),
            separator: snapshot.gateway.separator.clone(),
            catalog: ArcSwap::from_pointee(Catalog::default()),
            rebuilding: parking_lot::Mutex::new(()),
            auth: ArcSwap::new(snapshot.auth.clone()),
            hub: Arc::new(Hub::default()),
            rate_limits: ArcSwap::from_pointee(RateLimits::new(snapshot.rate_limits.clone())),
            idempotency: Arc::new(IdempotencyStore::new(snapshot.gateway.idempotency_ttl)),
            pins: {
                let pins = Pins::default();
                for up in &snapshot.upstreams {
                    for (tool, fp) in &up.pins {
                        pins.preset(&up.name, tool, fp);
                    }
                }
                pins
            },
            shutdown,
            status_tx,
            calls_in_flight: watch::channel(0).0,
        }))
    }

    /// Starts every upstream at once; none waits for another.
    pub fn start(self: &Arc<Self>) {
        for up in self.upstreams.load().iter() {
            tokio::spawn(supervisor::run(self.clone(), up.clone()));
        }
        let pool = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RATE_LIMIT_EVICT_EVERY);
            loop {
                tick.tick().await;
                match pool.upgrade() {
                    Some(p) if !p.shutdown.is_cancelled() => p.rate_limits.load().evict_idle(),
                    _ => return,
                }
            }
        });
    }

    /// Whether a caller with `access` may see the exposed tool `name` (its role globs, and the
    /// trust tier of the upstream behind it).
    pub fn visible_tool(&self, access: &Access, name: &str) -> bool {
        access.tool(name) && {
            let catalog = self.catalog();
            catalog
                .tool(name)
                .and_then(|r| catalog.upstream(r.upstream))
                .is_some_and(|u| access.tier(u.spec().tier.rank))
        }
    }

    /// How long a call parked for its caller's input waits (MRTR synthesis).
    pub fn input_wait(&self) -> Duration {
        self.input_wait
    }

    pub fn max_parked_calls(&self) -> usize {
        self.max_parked_calls
    }

    pub fn cursors(&self) -> &Cursors {
        &self.cursors
    }

    /// The key that seals state handed to clients (cursors, MRTR `requestState`).
    pub fn seal(&self) -> &Arc<RequestStateCodec> {
        &self.seal
    }

    pub fn idempotency(&self) -> &Arc<IdempotencyStore> {
        &self.idempotency
    }

    pub fn rate_limits(&self) -> Arc<RateLimits> {
        self.rate_limits.load_full()
    }

    /// How callers are authenticated, as of the last (re)load.
    pub fn auth(&self) -> Arc<Authenticator> {
        self.auth.load_full()
    }

    /// The configured upstreams, in config order.
    pub fn upstreams(&self) -> Arc<Vec<Arc<Upstream>>> {
        self.upstreams.load_full()
    }

    pub fn upstream_named(&self, name: &str) -> Option<Arc<Upstream>> {
        self.upstreams
            .load()
            .iter()
            .find(|u| u.name() == name)
            .cloned()
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.load_full()
    }

    /// Marks a call in flight until the returned guard is dropped.
    pub fn call_started(self: &Arc<Self>) -> InFlightCall {
        self.calls_in_flight.send_modify(|n| *n += 1);
        InFlightCall(self.clone())
    }

    /// Waits (bounded) until no call is in flight; returns whether it got there.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let mut rx = self.calls_in_flight.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|n| *n == 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Accepts a tool definition held back by pinning (admin API); the tool reappears.
    pub fn accept_pin(&self, upstream: &str, tool: &str, fingerprint: &str) {
        self.pins.preset(upstream, tool, fingerprint);
        self.rebuild(Changed {
            tools: true,
            ..Changed::default()
        });
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Brings the gauges that mirror state (upstream up, breakers, sessions) up to date.
    pub fn refresh_gauges(&self) {
        let now = tokio::time::Instant::now();
        for u in self.upstreams.load().iter() {
            let up = i64::from(u.connection().is_some());
            self.metrics
                .upstream_up
                .with_label_values(&[u.name()])
                .set(up);
            let state = match u.breaker.status(now).state {
                "open" => 2,
                "half_open" => 1,
                _ => 0,
            };
            self.metrics
                .breaker_state
                .with_label_values(&[u.name()])
                .set(state);
        }
        self.metrics.sessions_active.set(self.hub.len() as i64);
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// A stop token for a new upstream: cancelled with the pool, or on its own.
    pub(super) fn stop_child(&self) -> CancellationToken {
        self.shutdown.child_token()
    }

    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stops every upstream (children are killed with their process groups).
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Rebuilds the merged catalog and tells downstream sessions what changed.
    pub(super) fn rebuild(&self, changed: Changed) {
        {
            let _one = self.rebuilding.lock();
            self.catalog.store(Arc::new(Catalog::build(
                &self.upstreams.load(),
                &self.separator,
                &self.pins,
            )));
        }
        self.hub.notify_changed(changed);
    }

    pub(super) fn status_changed(&self) {
        self.status_tx.send_modify(|v| *v += 1);
    }

    /// Whether every upstream has left `starting` (ready, failed or retrying).
    pub fn settled(&self) -> bool {
        self.upstreams
            .load()
            .iter()
            .all(|u| u.phase() != Phase::Starting)
    }

    /// Waits until [`Self::settled`] or the timeout; returns whether it settled.
    pub async fn wait_settled(&self, timeout: Duration) -> bool {
        let mut rx = self.status_tx.subscribe();
        let wait = async {
            loop {
                if self.settled() {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    /// Ready when at least one upstream is ready, or none is configured.
    pub fn ready(&self) -> bool {
        let ups = self.upstreams.load();
        ups.is_empty() || ups.iter().any(|u| u.phase() == Phase::Ready)
    }
}

impl Pool {
    /// Waits (bounded) until every supervisor has stopped its upstream.
    pub async fn wait_stopped(&self, timeout: Duration) -> bool {
        let mut rx = self.status_tx.subscribe();
        let done = || {
            self.upstreams
                .load()
                .iter()
                .all(|u| matches!(u.phase(), Phase::Stopped | Phase::Failed))
        };
        let wait = async {
            while !done() {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }
}
