//! Flows (F12): deterministic DAG runs over namespaced tools. The engine owns the run log and
//! the flows that loaded; each run is driven by its own scheduler (`driver`), whose node calls
//! re-enter the whole call stack as the run's caller. Every state change is an event in the
//! run log, so a run survives the gateway: on start, unfinished runs are resumed.

mod approval;
mod controls;
pub mod driver;
pub mod error;
pub mod events;
mod leases;
pub mod lint;
pub mod log;
pub mod node;
mod replay;
pub mod report;
mod task;
pub mod tool;
mod wait;

use crate::flows::error::RunError;
use std::{
    collections::BTreeMap,
    sync::{Arc, OnceLock},
};

use arc_swap::ArcSwap;
use dashmap::DashMap;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use self::{
    driver::{NodeDone, Run},
    events::RunState,
    log::{Caller, RunLog, RunRecord},
};
use crate::{
    config::{
        flows::{FlowDef, FlowSet},
        snapshot::FlowSettings,
    },
    pipeline::{Stacks, TypedStack},
    policy::identity::{Authenticator, Identity, IdentityKind},
    telemetry::flow_metrics::FlowMetrics,
    upstream::pool::Pool,
};

/// What the engine knows of a node's tool before calling it.
#[derive(Debug, Clone, Copy)]
pub struct ToolClass {
    /// Safe to call again (a read, or idempotent by annotation at a tier that trusts them).
    pub retry_safe: bool,
    /// The upstream honours idempotency keys (`idempotency_keys = true`).
    pub honours_keys: bool,
}

#[derive(Debug)]
pub struct Engine {
    pub(crate) log: Arc<dyn RunLog>,
    defs: ArcSwap<BTreeMap<String, Arc<FlowDef>>>,
    stack: OnceLock<Stacks>,
    pool: OnceLock<Arc<Pool>>,
    /// Per-user credentials: a node waiting for its caller to connect an account wakes when
    /// they have.
    credentials: OnceLock<Arc<crate::credentials::UserCredentials>>,
    auth: Arc<ArcSwap<Authenticator>>,
    permits: Arc<Semaphore>,
    /// Per upstream (by name), created on first use.
    upstream_permits: DashMap<String, Arc<Semaphore>>,
    upstream_parallelism: usize,
    artifact_bytes: usize,
    pub(crate) metrics: FlowMetrics,
    /// Runs driven by this process.
    live: DashMap<String, Live>,
    /// Plans of nodes parked for approval: plan id -> (run id, node).
    parked: DashMap<String, (String, String)>,
    /// The plans of every replica (`[cluster] redis`), where superseded plans are ended too.
    shared_plans: OnceLock<crate::approval::shared::SharedPlans>,
    /// Plans a run is running now, approved by someone else (each once).
    approving: dashmap::DashSet<String>,
    /// Plans that runs waited on and that are decided now: plan id -> run id (bounded), so a
    /// late `fedgate__approve` of one gets the run's answer.
    resolved: DashMap<String, String>,
    /// Approval plans (the node calls' own; a parked run waits on one).
    plans: Arc<crate::approval::Plans>,
    /// Cancelled at shutdown: schedulers stop without recording anything more, so their runs
    /// resume (nodes in flight re-driven) at the next start.
    pub(crate) stop: CancellationToken,
    /// Bumped whenever a run stops being driven here.
    ended: tokio::sync::watch::Sender<u64>,
    /// Seals runs' task handles.
    tasks: crate::tasks::TaskHandles,
    problems: parking_lot::Mutex<Vec<crate::config::Diagnostic>>,
}

/// Why a run did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("unknown flow `{0}`")]
    UnknownFlow(String),
    #[error("inputs do not match the flow's input schema: {0}")]
    BadInputs(String),
    #[error(transparent)]
    Log(RunError),
    /// Another process drives the run log.
    #[error("{0}")]
    Elsewhere(String),
}

/// A run this process drives: its cancellation, its scheduler's mailbox, and when it last
/// came to rest.
#[derive(Debug, Clone)]
struct Live {
    ct: CancellationToken,
    stop: CancellationToken,
    mail: mpsc::UnboundedSender<driver::Msg>,
    quiet: tokio::sync::watch::Receiver<driver::Quiet>,
}

/// How a run is driven.
#[derive(Default)]
pub(crate) struct Drive {
    pub depth: u8,
    pub progress: Option<mpsc::UnboundedSender<NodeDone>>,
    /// The events so far (a resumed run).
    pub events: Vec<events::Stamped>,
    /// Idempotency keys derive from this run id (default: the run's own).
    pub key_run: Option<String>,
    /// A replay: reads get fresh keys, writes keep the original run's.
    pub replay: Option<Arc<driver::Replay>>,
    /// The federation `_meta` of the call that started the run (hop path, caller claim): its
    /// node calls carry it on.
    pub hop: serde_json::Map<String, Value>,
}

/// Who a run runs as, to record.
fn caller_of(identity: &Identity, workspace: Option<String>) -> Caller {
    Caller {
        kind: identity.kind.as_str().to_owned(),
        name: identity.name.clone(),
        roles: identity.access.roles().to_vec(),
        unrestricted: identity.access.is_unrestricted(),
        workspace,
    }
}

/// A run that started: its id, and its end.
#[derive(Debug)]
pub struct Started {
    pub run_id: String,
    pub done: oneshot::Receiver<Result<RunState, RunError>>,
}

impl Engine {
    pub fn open(
        settings: &FlowSettings,
        log: Arc<dyn RunLog>,
        auth: Arc<ArcSwap<Authenticator>>,
        metrics: FlowMetrics,
        tasks: crate::tasks::TaskHandles,
        plans: Arc<crate::approval::Plans>,
    ) -> Result<Arc<Self>, RunError> {
        let engine = Arc::new(Self {
            log,
            defs: ArcSwap::default(),
            stack: OnceLock::new(),
            pool: OnceLock::new(),
            credentials: OnceLock::new(),
            auth,
            permits: Arc::new(Semaphore::new(settings.parallelism)),
            upstream_permits: DashMap::new(),
            upstream_parallelism: settings.upstream_parallelism,
            artifact_bytes: settings.artifact_bytes,
            metrics,
            live: DashMap::new(),
            parked: DashMap::new(),
            resolved: DashMap::new(),
            shared_plans: OnceLock::new(),
            approving: dashmap::DashSet::new(),
            plans,
            stop: CancellationToken::new(),
            ended: tokio::sync::watch::channel(0).0,
            tasks,
            problems: Default::default(),
        });
        engine.set_flows(&settings.set);
        Ok(engine)
    }

    /// The flows that loaded (a reload replaces them; running runs keep their definition).
    pub fn set_flows(&self, set: &FlowSet) {
        self.defs.store(Arc::new(
            set.flows
                .iter()
                .map(|f| (f.id.clone(), f.clone()))
                .collect(),
        ));
        *self.problems.lock() = set.problems.clone();
        for f in &set.flows {
            self.metrics.know_flow(&f.id);
        }
    }

    /// What the upstreams' tool lists say against the loaded flows (unknown tools, tiers that
    /// refuse a node, literal params the tool's schema refuses).
    pub fn catalog_problems(&self) -> Vec<crate::config::Diagnostic> {
        let Some(pool) = self.pool.get() else {
            return Vec::new();
        };
        self.flows()
            .iter()
            .flat_map(|f| lint::against_catalog(f, pool))
            .collect()
    }

    /// Logs [`Engine::catalog_problems`].
    pub fn report_catalog_problems(&self) {
        for d in self.catalog_problems() {
            tracing::warn!("flow problem: {d}");
        }
    }

    /// What kept flow files from loading, as of the last (re)load.
    pub fn problems(&self) -> Vec<crate::config::Diagnostic> {
        self.problems.lock().clone()
    }

    /// The newest runs with their states: at most `limit` (and never more than
    /// [`log::MAX_RUNS_LISTED`]: each run's events are read to fold its state).
    pub async fn runs(&self, limit: usize) -> Result<Vec<(RunRecord, RunState)>, RunError> {
        let mut out = Vec::new();
        for r in self.log.runs(limit).await? {
            let events = self.log.events(&r.run_id).await?;
            out.push((r, RunState::fold(&events)));
        }
        Ok(out)
    }

    pub fn flows(&self) -> Vec<Arc<FlowDef>> {
        self.defs.load().values().cloned().collect()
    }

    pub fn flow(&self, id: &str) -> Option<Arc<FlowDef>> {
        self.defs.load().get(id).cloned()
    }

    /// The stack node calls go through and the pool that classifies their tools (both hold
    /// the engine's tools, so they are bound after they are built).
    pub fn bind(self: &Arc<Self>, stacks: Stacks, pool: Arc<Pool>) {
        if self.stack.set(stacks).is_ok() {
            self.watch_plans();
        }
        let _ = self.pool.set(pool);
    }

    /// The per-user credentials nodes may wait for.
    pub fn bind_credentials(&self, credentials: Arc<crate::credentials::UserCredentials>) {
        let _ = self.credentials.set(credentials);
    }

    pub(crate) fn credentials(&self) -> Option<Arc<crate::credentials::UserCredentials>> {
        self.credentials.get().cloned()
    }

    pub(crate) fn shared_plans(&self) -> Option<&crate::approval::shared::SharedPlans> {
        self.shared_plans.get()
    }

    /// Shares the plans of every replica with the engine (`[cluster] redis`).
    pub fn share_plans(&self, shared: crate::approval::shared::SharedPlans) {
        let _ = self.shared_plans.set(shared);
    }

    /// Ends the plans a resumed run waited on (it asks again with new ones), here and in the
    /// shared store, so nobody approves a plan no run waits for.
    pub(crate) async fn supersede(&self, ids: Vec<String>) {
        for id in ids {
            match self.shared_plans.get() {
                Some(sh) => {
                    if let Ok(imported) = sh.import(&self.plans, &id).await
                        && self.plans.supersede(&id)
                    {
                        let _ = sh.write_back(&self.plans, &id, imported).await;
                    }
                }
                None => {
                    self.plans.supersede(&id);
                }
            }
        }
    }

    /// The plans the engine's node calls are held as.
    pub fn plans(&self) -> &Arc<crate::approval::Plans> {
        &self.plans
    }

    /// The typed stack node calls and a run's approvals go through.
    pub(crate) fn stack(&self) -> Option<TypedStack> {
        self.stack.get().map(|s| s.typed.clone())
    }

    /// The permits of the upstream serving `tool` (none for a name no upstream serves: its
    /// call is refused anyway).
    pub(crate) fn upstream_permits(&self, tool: &str) -> Option<Arc<Semaphore>> {
        let up = self.pool.get()?.namespace_owner(tool)?;
        Some(
            self.upstream_permits
                .entry(up.name().to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.upstream_parallelism)))
                .clone(),
        )
    }

    /// Whether a replay may call `tool` again: a read (or safe to repeat), or a write to an
    /// upstream that honours idempotency keys (it answers as before instead of writing twice).
    /// Any other write is not replayed unless the replay allows writes.
    pub fn replays(&self, tool: &str) -> bool {
        self.classify(tool)
            .is_some_and(|c| c.retry_safe || c.honours_keys)
    }

    pub fn classify(&self, tool: &str) -> Option<ToolClass> {
        let (retry_safe, up) = crate::pipeline::classify(self.pool.get()?, tool)?;
        Some(ToolClass {
            retry_safe,
            honours_keys: up.spec().idempotency_keys,
        })
    }

    /// Checks the inputs, records the run durably, and starts driving it.
    pub async fn start(
        self: &Arc<Self>,
        flow_id: &str,
        inputs: Value,
        (identity, workspace): (Identity, Option<String>),
        depth: u8,
        progress: Option<mpsc::UnboundedSender<NodeDone>>,
        hop: serde_json::Map<String, Value>,
    ) -> Result<Started, StartError> {
        let flow = self
            .flow(flow_id)
            .ok_or_else(|| StartError::UnknownFlow(crate::names::shown(flow_id)))?;
        if let Some(e) = self.log.driven_elsewhere() {
            return Err(StartError::Elsewhere(e.0));
        }
        let problems = flow.input_check.check(&inputs);
        if !problems.is_empty() {
            return Err(StartError::BadInputs(
                problems
                    .iter()
                    .map(|p| format!("{}: {}", p.pointer, p.message))
                    .collect::<Vec<_>>()
                    .join("; "),
            ));
        }
        let record = self
            .create(&flow, inputs, caller_of(&identity, workspace), None)
            .await
            .map_err(StartError::Log)?;
        let run_id = record.run_id.clone();
        let done = self.drive(
            flow,
            record,
            identity,
            Drive {
                depth,
                progress,
                hop,
                ..Drive::default()
            },
        );
        Ok(Started { run_id, done })
    }

    /// Records a new run, durably.
    pub(crate) async fn create(
        &self,
        flow: &FlowDef,
        inputs: Value,
        caller: Caller,
        replay_of: Option<String>,
    ) -> Result<RunRecord, RunError> {
        let record = RunRecord {
            run_id: format!("run-{:024x}", rand::random::<u128>() >> 32),
            flow: flow.id.clone(),
            digest: flow.digest.clone(),
            inputs,
            caller,
            created_ms: chrono::Utc::now().timestamp_millis(),
            replay_of,
        };
        self.log.create(&record).await?;
        Ok(record)
    }

    /// Drives a run in its own task; the receiver gets its final state.
    pub(crate) fn drive(
        self: &Arc<Self>,
        flow: Arc<FlowDef>,
        record: RunRecord,
        identity: Identity,
        opts: Drive,
    ) -> oneshot::Receiver<Result<RunState, RunError>> {
        let (tx, rx) = oneshot::channel();
        let ct = CancellationToken::new();
        let stop = self.stop.child_token();
        let (mail, mailbox) = mpsc::unbounded_channel();
        let (quiet_tx, quiet) = tokio::sync::watch::channel(driver::Quiet::default());
        self.live.insert(
            record.run_id.clone(),
            Live {
                ct: ct.clone(),
                stop: stop.clone(),
                mail: mail.clone(),
                quiet,
            },
        );
        let engine = self.clone();
        tokio::spawn(async move {
            let run_id = record.run_id.clone();
            let flow_id = flow.id.clone();
            engine.metrics.in_flight.inc();
            let key_run = opts.key_run.unwrap_or_else(|| record.run_id.clone());
            let result = driver::drive(
                Run {
                    engine: engine.clone(),
                    flow,
                    record,
                    identity,
                    depth: opts.depth,
                    ct,
                    stop,
                    progress: opts.progress,
                    key_run,
                    replay: opts.replay,
                    quiet: quiet_tx,
                    hop: opts.hop,
                },
                opts.events,
                mail,
                mailbox,
            )
            .await;
            engine.metrics.in_flight.dec();
            engine.live.remove(&run_id);
            engine.ended.send_modify(|n| *n += 1);
            match &result {
                Ok(state) => {
                    let status = state.finished.map_or("unknown", |s| s.as_str());
                    engine.metrics.run_finished(&flow_id, status);
                    tracing::info!(run = %run_id, flow = %flow_id, status, "flow run ended");
                }
                Err(e) => tracing::warn!(run = %run_id, flow = %flow_id, "flow run stopped: {e}"),
            }
            let _ = tx.send(result);
        });
        rx
    }

    /// Drives an unfinished (or reopened) run again from its events.
    pub async fn resume(
        self: &Arc<Self>,
        run_id: &str,
    ) -> Result<oneshot::Receiver<Result<RunState, RunError>>, RunError> {
        if self.live.contains_key(run_id) {
            return Err(RunError::Driven);
        }
        let (record, events) = self.load(run_id).await?;
        let flow = self
            .flow(&record.flow)
            .ok_or_else(|| RunError::FlowNotLoaded(record.flow.clone()))?;
        if flow.digest != record.digest {
            tracing::warn!(run = %run_id, flow = %flow.id, "the flow file changed since the run started; it resumes with the current definition");
        }
        let identity = self.caller_identity(&record.caller);
        tracing::info!(run = %run_id, flow = %flow.id, "resuming flow run");
        Ok(self.drive(
            flow,
            record,
            identity,
            Drive {
                events,
                ..Drive::default()
            },
        ))
    }

    /// A run's record and events.
    pub async fn load(&self, run_id: &str) -> Result<(RunRecord, Vec<events::Stamped>), RunError> {
        let record = self
            .log
            .run(run_id)
            .await?
            .ok_or_else(|| RunError::NoRun(crate::names::shown(run_id)))?;
        let events = self.log.events(run_id).await?;
        Ok((record, events))
    }

    /// Appends events to a run nothing drives (a cancellation, a rerun), stamped now.
    pub(crate) async fn append(
        &self,
        run_id: &str,
        batch: Vec<events::Event>,
    ) -> Result<(), RunError> {
        self.log
            .append(run_id, chrono::Utc::now().timestamp_millis(), &batch)
            .await?;
        Ok(())
    }

    /// A recorded output's value, an artifact read back (`None`: no output, or unreadable).
    pub(crate) async fn output_value(&self, o: Option<&events::Output>) -> Option<Value> {
        match o? {
            events::Output::Inline(v) => Some(v.clone()),
            events::Output::Artifact { id, .. } => {
                let body = self.log.artifact(id).await.ok()??;
                serde_json::from_slice(&body).ok()
            }
        }
    }

    /// The identity a stored caller has under the config of the moment.
    pub(crate) fn caller_identity(&self, c: &Caller) -> Identity {
        let kind = IdentityKind::from_str_or_local(&c.kind);
        if c.unrestricted {
            return Identity::unrestricted(&c.name, kind);
        }
        Identity {
            name: c.name.clone(),
            kind,
            access: Arc::new(self.auth.load().roles.access(&c.roles)),
        }
    }

    /// Stops driving runs (at shutdown); they stay unfinished in the log, to resume.
    pub async fn close(&self) {
        self.stop.cancel();
        self.permits.close();
        // With a shared log, another replica takes the runs over now, not when leases run out.
        if self.log.lease().is_some() {
            let held: Vec<String> = self.live.iter().map(|l| l.key().clone()).collect();
            for run in held {
                let _ = self.log.release(&run).await;
            }
        }
    }
}
