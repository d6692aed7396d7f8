//! All upstreams of a snapshot: parallel start, supervision, the merged catalog, readiness.
//! What changes downstream sessions must hear of goes out through [`Downstreams`].

use std::{sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use rmcp::model::Tool;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Catalog, Changed, Downstreams, Phase, Upstream, supervisor};
use crate::{
    config::Snapshot, names as namespace, policy::pinning::Pins, router::catalog::Member,
    telemetry::metrics::Metrics,
};

/// The upstreams of the running config, and the catalog merged from their lists.
#[derive(Debug)]
pub struct Pool {
    /// Replaced as a whole by a reload; each upstream keeps running unless it changed.
    pub(super) upstreams: ArcSwap<Vec<Arc<Upstream>>>,
    naming: crate::names::Naming,
    /// `[gateway] resource_default`.
    resource_default: Option<String>,
    catalog: ArcSwap<Catalog>,
    /// Rebuilding reads the upstream set and stores a catalog: one at a time, so a rebuild
    /// from a supervisor cannot store a catalog of a set a reload has just replaced.
    rebuilding: parking_lot::Mutex<()>,
    metrics: Arc<Metrics>,
    /// The server's session hub (or nothing, for the CLI's one-shot commands).
    downstreams: Arc<dyn Downstreams>,
    /// Definitions of the gateway's own tools, listed with the upstreams' tools.
    own_tools: ArcSwap<Vec<Tool>>,
    pub(super) pins: Pins,
    /// `definitions` hooks' verdicts on tool definitions.
    verdicts: Arc<crate::guard::definition_hooks::Verdicts>,
    /// This pool, for the tasks it starts (asking hooks rebuilds the catalog when answered).
    me: std::sync::Weak<Pool>,
    shutdown: CancellationToken,
    /// Bumped on every phase change, so waiters need not poll.
    status_tx: watch::Sender<u64>,
    /// People connected to some upstream as themselves, over all upstreams: while none are,
    /// every caller gets the shared catalog without a lookup.
    person_sessions: std::sync::atomic::AtomicUsize,
    /// Each connected person's catalog: the shared one with their own connections' lists in
    /// place of the upstreams' anonymous ones; rebuilt when either changes.
    personal: parking_lot::Mutex<std::collections::HashMap<String, Personal>>,
}

/// A person's catalog and what it was built from.
#[derive(Debug)]
struct Personal {
    base: Arc<Catalog>,
    lists: Vec<Arc<crate::router::catalog::Lists>>,
    catalog: Arc<Catalog>,
}

impl Pool {
    pub fn new(
        snapshot: &Snapshot,
        metrics: Arc<Metrics>,
        downstreams: Arc<dyn Downstreams>,
        own_tools: Vec<Tool>,
    ) -> Arc<Self> {
        let (status_tx, _) = watch::channel(0);
        let shutdown = CancellationToken::new();
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            verdicts: Default::default(),
            metrics,
            downstreams,
            own_tools: ArcSwap::from_pointee(own_tools),
            upstreams: ArcSwap::from_pointee(
                snapshot
                    .upstreams
                    .iter()
                    .map(|s| Arc::new(Upstream::new(s.clone(), shutdown.child_token())))
                    .collect(),
            ),
            naming: snapshot.gateway.naming(),
            resource_default: snapshot.gateway.resource_default.clone(),
            catalog: ArcSwap::from_pointee(Catalog::default()),
            rebuilding: parking_lot::Mutex::new(()),
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
            person_sessions: Default::default(),
            personal: Default::default(),
        })
    }

    /// Starts every upstream at once; none waits for another. The catalog starts with the
    /// gateway's own tools.
    pub fn start(self: &Arc<Self>) {
        self.rebuild(Changed::default());
        for up in self.upstreams.load().iter() {
            tokio::spawn(supervisor::run(self.clone(), up.clone()));
        }
    }

    /// The configured upstreams, in config order.
    pub fn upstreams(&self) -> Arc<Vec<Arc<Upstream>>> {
        self.upstreams.load_full()
    }

    /// The per-user OAuth settings of upstream `name` and its URL, when its people sign in
    /// at an authorization server.
    pub fn per_user_oauth(
        &self,
        name: &str,
    ) -> Option<(Arc<crate::policy::token::PerUserOAuth>, String)> {
        let upstreams = self.upstreams.load();
        let spec = upstreams.iter().find(|u| u.name() == name)?.spec();
        let oauth = spec
            .credential
            .as_ref()?
            .credential
            .per_user_oauth()?
            .clone();
        Some((oauth, spec.transport.url().unwrap_or_default().to_owned()))
    }

    /// Replaces the gateway's own tools (flows reloaded, search turned on or off) and tells
    /// sessions the list changed — when it did.
    pub fn set_own_tools(&self, mut tools: Vec<Tool>) {
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        if **self.own_tools.load() == tools {
            return;
        }
        self.own_tools.store(Arc::new(tools));
        self.rebuild(Changed {
            tools: true,
            ..Changed::default()
        });
    }

    /// The namespace separator of exposed names.
    pub fn separator(&self) -> &str {
        &self.naming.separator
    }

    /// How exposed names are made.
    pub fn naming(&self) -> &crate::names::Naming {
        &self.naming
    }

    /// The upstream whose namespace an exposed name falls in (`github.x` -> `github`).
    pub fn namespace_owner(&self, exposed: &str) -> Option<Arc<Upstream>> {
        let (head, _) = exposed.split_once(self.naming.separator.as_str())?;
        self.upstream_named(head)
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

    /// Brings the gauges that mirror upstream state (up, breakers) up to date.
    pub fn refresh_gauges(&self) {
        let now = tokio::time::Instant::now();
        for u in self.upstreams.load().iter() {
            self.metrics
                .upstream_state(u.name(), u.listed(), u.breaker.status(now).state);
            for (tool, s) in u.tool_breakers.states(now) {
                self.metrics.tool_breaker(u.name(), &tool, s.state);
            }
        }
    }

    pub(super) fn downstreams(&self) -> &dyn Downstreams {
        &*self.downstreams
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
            let catalog = self.build(|u| u.lists());
            self.catalog.store(Arc::new(catalog));
        }
        self.downstreams.lists_changed(changed);
    }

    /// The merged catalog of the listed upstreams, each with the lists `lists` gives it.
    fn build(&self, lists: impl Fn(&Upstream) -> Arc<crate::router::catalog::Lists>) -> Catalog {
        let upstreams = self.upstreams.load();
        let configured: Vec<String> = upstreams.iter().map(|u| u.name().to_owned()).collect();
        let ready = upstreams
            .iter()
            .filter(|u| u.listed())
            .map(|u| Member {
                handle: u.clone(),
                spec: u.spec(),
                lists: lists(u),
            })
            .collect::<Vec<_>>();
        let fallback = self.resource_fallback(&ready);
        // `fedgate__approve` is listed only while some upstream's calls may be held.
        let approvals = upstreams.iter().any(|u| {
            let spec = u.spec();
            spec.may_hold_calls() || !spec.approver_roles().is_empty()
        });
        let own: Vec<Tool> = self
            .own_tools
            .load()
            .iter()
            .filter(|t| approvals || t.name != namespace::APPROVE_TOOL)
            .cloned()
            .collect();
        let mut catalog = Catalog::build(
            &own,
            ready,
            &configured,
            &self.naming,
            &self.pins,
            &self.verdicts,
        )
        .with_resource_fallback(fallback);
        self.screen_later(std::mem::take(&mut catalog.unscreened));
        catalog
    }

    /// The catalog `owner` sees: the shared one, or — once they are connected to an upstream
    /// as themselves — theirs, with their own connections' lists (screened, pinned and
    /// checked like everyone's).
    pub fn catalog_for(&self, who: &crate::policy::identity::Identity) -> Arc<Catalog> {
        let shared = self.catalog();
        if self
            .person_sessions
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
        {
            return shared;
        }
        let owner = &who.key();
        let upstreams = self.upstreams.load();
        let own: Vec<(usize, Arc<crate::router::catalog::Lists>)> = upstreams
            .iter()
            .enumerate()
            .filter_map(|(i, u)| u.persons.lists_of(owner).map(|l| (i, l)))
            .collect();
        if own.is_empty() {
            self.personal.lock().remove(owner);
            return shared;
        }
        let lists: Vec<_> = own.iter().map(|(_, l)| l.clone()).collect();
        if let Some(p) = self.personal.lock().get(owner)
            && Arc::ptr_eq(&p.base, &shared)
            && p.lists.len() == lists.len()
            && p.lists.iter().zip(&lists).all(|(a, b)| Arc::ptr_eq(a, b))
        {
            return p.catalog.clone();
        }
        let catalog = Arc::new(self.build(|u| {
            upstreams
                .iter()
                .position(|x| std::ptr::eq(&**x, u))
                .and_then(|i| own.iter().find(|(j, _)| *j == i))
                .map_or_else(|| u.lists(), |(_, l)| l.clone())
        }));
        self.personal.lock().insert(
            owner.to_owned(),
            Personal {
                base: shared,
                lists,
                catalog: catalog.clone(),
            },
        );
        catalog
    }

    /// The lists `owner` is served by `up`: their own connection's, else the shared ones.
    pub fn lists_for(
        &self,
        up: &Upstream,
        who: &crate::policy::identity::Identity,
    ) -> Arc<crate::router::catalog::Lists> {
        if self
            .person_sessions
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
        {
            return up.lists();
        }
        up.persons
            .lists_of(&who.key())
            .unwrap_or_else(|| up.lists())
    }

    /// `owner`'s own connection to `up`, opened with `token` when there is none.
    pub async fn person_connection(
        self: &Arc<Self>,
        up: &Arc<Upstream>,
        owner: &str,
        token: &crate::secret::Secret,
    ) -> Result<Arc<super::Connection>, super::error::UpstreamError> {
        let before = up.persons.lists_of(owner);
        let session = up.persons.connection(self, up, owner, token).await?;
        // A person's first connection may show them other tools than the shared list.
        if before.is_none() && session.lists().tools != up.lists().tools {
            self.downstreams.lists_changed(Changed {
                tools: true,
                ..Changed::default()
            });
        }
        Ok(session.conn.clone())
    }

    /// Whether `owner` has an open connection of their own to `up`.
    pub fn has_person_connection(&self, up: &Upstream, owner: &str) -> bool {
        up.persons.lists_of(owner).is_some()
    }

    pub(super) fn person_session_opened(&self) {
        self.person_sessions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A person's connection closed: their catalog goes with it (rebuilt if they come back).
    pub(super) fn person_session_closed(&self, owner: &str) {
        use std::sync::atomic::Ordering::Relaxed;
        let _ = self
            .person_sessions
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
        self.personal.lock().remove(owner);
    }

    /// Asks `definitions` hooks about the definitions they have not seen, then rebuilds the
    /// catalog with their verdicts.
    fn screen_later(&self, pending: Vec<crate::guard::definition_hooks::Pending>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if pending.is_empty() {
            return;
        }
        let (me, verdicts) = (self.me.clone(), self.verdicts.clone());
        runtime.spawn(async move {
            if verdicts.ask_all(pending).await
                && let Some(pool) = me.upgrade()
            {
                pool.rebuild(Changed {
                    tools: true,
                    ..Changed::default()
                });
            }
        });
    }

    /// Which ready member serves resource URIs that nothing lists or matches: the configured
    /// `resource_default` (while it is ready), else the only member declaring resources.
    fn resource_fallback(&self, ready: &[Member<Arc<Upstream>>]) -> Option<usize> {
        if let Some(name) = &self.resource_default {
            return ready.iter().position(|m| &m.spec.name == name);
        }
        let mut with_resources = ready.iter().enumerate().filter(|(_, m)| {
            m.handle.connection().is_some_and(|c| {
                c.peer
                    .peer_info()
                    .is_some_and(|i| i.capabilities.resources.is_some())
            })
        });
        match (with_resources.next(), with_resources.next()) {
            (Some((idx, _)), None) => Some(idx),
            _ => None,
        }
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

    /// Ends fedgate's own subscription to `uri` at its upstream: the last downstream
    /// subscriber went without unsubscribing (its session closed).
    #[allow(deprecated)] // handshake-era upstreams still take resources/unsubscribe
    pub fn release_subscription(&self, uri: &str) {
        let catalog = self.catalog();
        let Some(up) = catalog
            .resource(uri)
            .and_then(|i| catalog.upstream(i))
            .cloned()
        else {
            return;
        };
        let Some(conn) = up.connection() else {
            return;
        };
        tracing::debug!(upstream = %up.name(), "releasing a subscription nobody holds any more");
        match conn.era {
            // A stateless-era upstream watches the URIs in its listen filter.
            super::DetectedEra::Stateless => up.watched.send_modify(|set| {
                set.remove(uri);
            }),
            _ => {
                let params = rmcp::model::UnsubscribeRequestParams::new(uri.to_owned());
                tokio::spawn(async move {
                    let _ = conn.peer.unsubscribe(params).await;
                });
            }
        }
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
