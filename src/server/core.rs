//! One running gateway put together from a snapshot: the upstream pool, the session hub, and
//! the state each part owns — identities, rate limits, idempotency records, the sealing key,
//! the count of calls in flight. Each part gets only its piece; a reload swaps the pieces
//! that may change.

use std::{sync::Arc, time::Duration};

use super::{
    parts::{AdminParts, EdgeParts, Gauges, InFlight, McpParts},
    sessions::Hub,
};
use crate::{
    approval::Plans,
    config::Snapshot,
    pipeline::{self, ApproveTool, CallStack, OwnTools},
    policy::view::Views,
    policy::{identity::Authenticator, rate_limit::RateLimits},
    router::cursor::Cursors,
    stages::Stages,
    stores::idempotency::IdempotencyStore,
    tasks::TaskHandles,
    telemetry::{audit::Audit, call_feed::CallFeed, metrics::Metrics},
    tool_search::ToolSearch,
    upstream::{pool::Pool, reload::Applied},
};
use arc_swap::ArcSwap;
use rmcp::model::RequestStateCodec;

/// How often rate-limit state of idle keys is dropped.
const RATE_LIMIT_EVICT_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub struct Core {
    /// What the call stack is built from (the audit sink comes at [`Core::stack`]): the
    /// pool, metrics, rate limits, idempotency records, sealing key, own tools, plans, the
    /// shared stores, per-user credentials and the `[gateway]` settings bound at start.
    pipeline: pipeline::Parts,
    hub: Arc<Hub>,
    /// How callers are authenticated, as of the last (re)load.
    auth: Arc<ArcSwap<Authenticator>>,
    cursors: Cursors,
    /// Task handles of upstreams' tasks (sealed with the state key).
    tasks: TaskHandles,
    /// Flows and their run log (when `[flows] dir` is set).
    flows: Option<Arc<crate::flows::Engine>>,
    /// The own tools that are neither flows nor search tools (a reload recomputes those).
    fixed_tools: Vec<Arc<dyn crate::pipeline::OwnTool>>,
    /// `[views]` and the listing settings, as of the last (re)load.
    views: Arc<ArcSwap<Views>>,
    /// Tool search and every session's working set.
    search: Arc<ToolSearch>,
    /// The workflows' stages and which session works in which workspace (`[stages]`; bound
    /// at start: a reload changes the workflows, not whether there are any).
    stages: Option<Arc<Stages>>,
    gauges: Gauges,
    /// Requests in flight, for draining on shutdown.
    in_flight: InFlight,
}

/// How often closed sessions' leftovers are swept.
const SESSION_SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

impl Core {
    pub async fn new(snapshot: &Snapshot) -> Result<Arc<Self>, super::error::StartError> {
        Self::with_own_tools(snapshot, OwnTools::default()).await
    }

    /// A gateway that also answers `own` tools itself.
    pub async fn with_own_tools(
        snapshot: &Snapshot,
        own: OwnTools,
    ) -> Result<Arc<Self>, super::error::StartError> {
        let seal = Arc::new(
            RequestStateCodec::try_new(match &snapshot.gateway.state_key {
                Some(k) => k.expose().as_bytes().to_vec(),
                None => rand::random::<[u8; 32]>().to_vec(),
            })
            .map_err(|e| super::error::StartError::StateKey(e.to_string()))?,
        );
        let metrics = Arc::new(Metrics::new()?);
        let cluster = crate::stores::Cluster::open(&snapshot.cluster, &metrics.cluster)?;
        let hub = Arc::new(Hub::default());
        let auth = Arc::new(ArcSwap::new(snapshot.auth.clone()));
        let plans = Arc::new(Plans::new(
            snapshot.gateway.plan_ttl.as_millis() as u64,
            snapshot.gateway.max_pending_plans,
        ));
        let flows = match snapshot.flows.dir {
            Some(_) => Some(crate::flows::Engine::open(
                &snapshot.flows,
                crate::flows::log::open(snapshot, &snapshot.gateway.id, &metrics.cluster, true)
                    .await?,
                auth.clone(),
                metrics.flows.clone(),
                TaskHandles::new(seal.clone()),
                plans.clone(),
            )?),
            None => None,
        };
        if let (Some(engine), Some(shared)) = (&flows, crate::approval::shared::of(&cluster)) {
            engine.share_plans(shared);
        }
        let pool = Pool::new(snapshot, metrics.clone(), hub.clone(), Vec::new());
        let stages = Stages::open(
            &snapshot.stages,
            &cluster,
            pool.clone(),
            metrics.stages.clone(),
        )?;
        let credentials = match &snapshot.user_credentials {
            Some(u) => Some(Arc::new(crate::credentials::UserCredentials::open(
                crate::credentials::Sealer::new(&u.key, &u.retired)?,
                &u.db,
                cluster.redis.clone(),
                u.public_url.clone(),
                metrics.credentials.clone(),
            )?)),
            None => None,
        };
        let mut fixed: Vec<Arc<dyn crate::pipeline::OwnTool>> = vec![Arc::new(ApproveTool)];
        if let Some(s) = &stages {
            fixed.extend(s.own_tools());
        }
        if let Some(c) = &credentials {
            fixed.push(Arc::new(crate::pipeline::DisconnectTool(c.clone())));
            fixed.push(Arc::new(crate::pipeline::personal::ConnectTool(
                crate::pipeline::personal::Personal {
                    pool: pool.clone(),
                    creds: c.clone(),
                    wait: snapshot.gateway.input_wait,
                },
            )));
            let upstreams = pool.clone();
            c.set_targets(Arc::new(move |name| upstreams.per_user_oauth(name)));
        }
        let own = own.with(fixed);
        let fixed_tools = own.tools();
        let views = Arc::new(ArcSwap::new(snapshot.views.clone()));
        let search = ToolSearch::new(
            pool.clone(),
            views.clone(),
            metrics.search.clone(),
            stages.clone().map(|s| s as Arc<dyn crate::pipeline::Gate>),
        );
        own.replace(own_tools(&fixed_tools, &search, flows.as_ref(), snapshot));
        pool.set_own_tools(own.definitions());
        let feed = snapshot
            .admin
            .as_ref()
            .is_some_and(|a| a.console)
            .then(CallFeed::default);
        let gauges = Gauges {
            pool: pool.clone(),
            metrics: metrics.clone(),
            plans: plans.clone(),
            hub: hub.clone(),
            sessions: Default::default(),
        };
        Ok(Arc::new(Self {
            pipeline: pipeline::Parts {
                pool: pool.clone(),
                metrics,
                limits: Arc::new(ArcSwap::from_pointee(RateLimits::new(
                    snapshot.rate_limits.clone(),
                ))),
                idempotency: Arc::new(IdempotencyStore::new(
                    snapshot.gateway.idempotency_ttl,
                    snapshot.gateway.idempotency_max_bytes,
                )),
                seal: seal.clone(),
                input_wait: snapshot.gateway.input_wait,
                max_parked_calls: snapshot.gateway.max_parked_calls,
                audit: None,
                cluster,
                feed,
                own,
                plans,
                envelope: snapshot.gateway.envelope,
                gateway_id: snapshot.gateway.id.as_str().into(),
                max_hops: snapshot.gateway.max_hops,
                gate: stages.clone().map(|s| s as Arc<dyn crate::pipeline::Gate>),
                credentials,
                auth: auth.clone(),
            },
            views,
            search,
            stages,
            flows,
            fixed_tools,
            hub,
            auth,
            cursors: Cursors::new(seal.clone(), snapshot.gateway.cursor_ttl),
            tasks: TaskHandles::new(seal),
            gauges,
            in_flight: InFlight::default(),
        }))
    }

    /// Starts every upstream, and the housekeeping of per-key rate-limit state.
    pub fn start(self: &Arc<Self>) {
        let pool = &self.pipeline.pool;
        pool.start();
        let limits = Arc::downgrade(&self.pipeline.limits);
        let stop = pool.shutdown_token();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RATE_LIMIT_EVICT_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.cancelled() => return,
                }
                match limits.upgrade() {
                    Some(l) => l.load().evict_idle(),
                    None => return,
                }
            }
        });
        // Sessions that closed without unsubscribing: their state goes, and so do upstream
        // subscriptions nobody holds any more.
        let (hub, pool) = (Arc::downgrade(&self.hub), Arc::downgrade(pool));
        let search = Arc::downgrade(&self.search);
        let stages = self.stages.as_ref().map(Arc::downgrade);
        let stop = self.pipeline.pool.shutdown_token();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SESSION_SWEEP_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.cancelled() => return,
                }
                let (Some(hub), Some(pool)) = (hub.upgrade(), pool.upgrade()) else {
                    return;
                };
                for uri in hub.take_released() {
                    pool.release_subscription(&uri);
                }
                if let Some(search) = search.upgrade() {
                    search.retain(|s| hub.is_open(s));
                }
                if let Some(stages) = stages.as_ref().and_then(|s| s.upgrade()) {
                    stages.retain(|s| hub.is_open(s));
                }
            }
        });
        if let Some(stages) = &self.stages {
            tell_moves(stages, &self.hub, self.pipeline.pool.shutdown_token());
            stages.listen_to_replicas(self.pipeline.pool.shutdown_token());
        }
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pipeline.pool
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.pipeline.metrics
    }

    pub fn flows(&self) -> Option<&Arc<crate::flows::Engine>> {
        self.flows.as_ref()
    }

    /// What the MCP handler answers with.
    pub fn mcp_parts(&self) -> McpParts {
        McpParts {
            pool: self.pipeline.pool.clone(),
            hub: self.hub.clone(),
            auth: self.auth.clone(),
            search: self.search.clone(),
            stages: self.stages.clone(),
            cursors: self.cursors.clone(),
            tasks: self.tasks.clone(),
            flows: self.flows.clone(),
            credentials: self.pipeline.credentials.clone(),
        }
    }

    /// What the HTTP edge answers with.
    pub fn edge_parts(&self) -> EdgeParts {
        EdgeParts {
            auth: self.auth.clone(),
            views: self.views.clone(),
            pool: self.pipeline.pool.clone(),
            seal: self.pipeline.seal.clone(),
            credentials: self.pipeline.credentials.clone(),
            metrics: self.pipeline.metrics.clone(),
            gauges: self.gauges.clone(),
            in_flight: self.in_flight.clone(),
        }
    }

    /// What the admin API answers with; `stack` is the one [`Core::stack`] built.
    pub fn admin_parts(&self, stack: CallStack) -> AdminParts {
        let p = &self.pipeline;
        AdminParts {
            pool: p.pool.clone(),
            metrics: p.metrics.clone(),
            gauges: self.gauges.clone(),
            auth: self.auth.clone(),
            views: self.views.clone(),
            search: self.search.clone(),
            plans: p.plans.clone(),
            cluster: p.cluster.clone(),
            feed: p.feed.clone(),
            stages: self.stages.clone(),
            flows: self.flows.clone(),
            credentials: p.credentials.clone(),
            stack,
        }
    }

    /// Credentials stored by a version that keyed them by name alone go to their person's
    /// identity key, or are dropped when whose they were cannot be told (README: upgrading).
    pub async fn adopt_credential_kinds(&self, snapshot: &Snapshot) {
        let Some(creds) = &self.pipeline.credentials else {
            return;
        };
        let auth = snapshot.auth.clone();
        match creds.adopt_kinds(|name| auth.sole_kind(name)).await {
            Ok((0, 0)) => {}
            Ok((migrated, dropped)) => tracing::warn!(
                migrated,
                dropped,
                "per-user credentials stored by name alone: those of an identity only one kind \
                 can have were kept under its kind; the others were dropped and their people \
                 connect again"
            ),
            Err(e) => tracing::warn!("per-user credentials: cannot migrate the store: {e}"),
        }
    }

    /// The call stack over this gateway's parts. Build it once per gateway: a stack owns
    /// the plan sweeper and the lot of parked calls, and flows are bound to it.
    pub fn stack(&self, audit: Option<Audit>) -> CallStack {
        let stack = pipeline::build(pipeline::Parts {
            audit: audit.clone(),
            ..self.pipeline.clone()
        });
        if let Some(c) = &self.pipeline.credentials {
            c.set_audit(audit.clone());
        }
        if let Some(stages) = &self.stages {
            stages.set_audit(audit);
        }
        if let Some(flows) = &self.flows {
            flows.bind(stack.clone(), self.pipeline.pool.clone());
            if let Some(c) = &self.pipeline.credentials {
                flows.bind_credentials(c.clone());
            }
        }
        stack.client
    }

    /// Applies a validated snapshot: the upstream set, the callers' identities and roles and
    /// the rate limits. Other `[gateway]`, `[admin]` and `[audit]` settings are bound at start.
    pub fn apply(&self, snapshot: &Snapshot) -> Applied {
        self.auth.store(snapshot.auth.clone());
        self.views.store(snapshot.views.clone());
        match &self.stages {
            Some(stages) => stages.apply(&snapshot.stages.machines),
            None if !snapshot.stages.machines.is_empty() => {
                tracing::warn!("config: [stages] added by a reload take effect after a restart")
            }
            None => {}
        }
        if let Some(engine) = &self.flows {
            report_flow_problems(snapshot);
            engine.set_flows(&snapshot.flows.set);
        }
        let (own, pool) = (&self.pipeline.own, &self.pipeline.pool);
        own.replace(own_tools(
            &self.fixed_tools,
            &self.search,
            self.flows.as_ref(),
            snapshot,
        ));
        pool.set_own_tools(own.definitions());
        if let Some(engine) = &self.flows {
            engine.report_catalog_problems();
        }
        let limits = &self.pipeline.limits;
        if !limits.load().configured_as(&snapshot.rate_limits) {
            limits.store(Arc::new(RateLimits::new(snapshot.rate_limits.clone())));
        }
        pool.apply(snapshot)
    }

    /// Waits (bounded) until no request is in flight; returns whether it got there.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        self.in_flight.wait_idle(timeout).await
    }
}

/// Tells the sessions working in a workspace that its stage moved: their tool lists changed.
fn tell_moves(stages: &Arc<Stages>, hub: &Arc<Hub>, stop: tokio_util::sync::CancellationToken) {
    let mut moves = stages.moves();
    let (stages, hub) = (Arc::downgrade(stages), Arc::downgrade(hub));
    tokio::spawn(async move {
        loop {
            let moved = tokio::select! {
                m = moves.recv() => m,
                _ = stop.cancelled() => return,
            };
            let (Some(stages), Some(hub)) = (stages.upgrade(), hub.upgrade()) else {
                return;
            };
            match moved {
                Ok(b) => hub.notify_tools_changed(&stages.sessions_in(&b)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    hub.notify_changed(crate::upstream::Changed {
                        tools: true,
                        ..Default::default()
                    })
                }
                Err(_) => return,
            }
        }
    });
}

/// Every own tool of a snapshot: the fixed ones, the search tools while some listing is
/// `search`, and the flows'.
fn own_tools(
    fixed: &[Arc<dyn crate::pipeline::OwnTool>],
    search: &Arc<ToolSearch>,
    flows: Option<&Arc<crate::flows::Engine>>,
    snapshot: &Snapshot,
) -> Vec<Arc<dyn crate::pipeline::OwnTool>> {
    let mut tools = fixed.to_vec();
    if snapshot.views.searching() {
        tools.extend(search.own_tools());
    }
    if let Some(engine) = flows {
        tools.extend(crate::flows::tool::tools(
            engine,
            &snapshot.gateway.naming(),
        ));
    }
    tools
}

/// Flow files that did not load: the rest of the config runs, each problem is logged.
pub fn report_flow_problems(snapshot: &Snapshot) {
    for d in &snapshot.warnings {
        tracing::warn!("config: {d}");
    }
    for d in &snapshot.flows.set.problems {
        tracing::warn!("flow not loaded: {d}");
    }
}
