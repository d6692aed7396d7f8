//! Stage-gated tool sets (`[stages.NAME]`): a workflow's state machine decides which of the
//! tools it gates a session sees and calls. A session works in one workspace (named by the
//! stage tools or the `Fedgate-Workspace` header); the workspace's stage is durable (SQLite,
//! or Redis with `[cluster]`), moved only by the transitions the workflow allows, each move
//! audited. Tools no state names are not gated.

#[cfg(feature = "redis")]
mod cluster_moves;
/// Without the `redis` feature there are no other replicas to tell.
#[cfg(not(feature = "redis"))]
mod cluster_moves {
    impl super::Stages {
        pub(super) fn publish(&self, _: &super::Bound) {}
        pub fn listen_to_replicas(
            self: &std::sync::Arc<Self>,
            _: tokio_util::sync::CancellationToken,
        ) {
        }
    }
}
mod gate;
pub use crate::stores::stages as store;
mod tools;

use crate::stores::StoreError;
use std::sync::Arc;

use arc_swap::ArcSwap;
use dashmap::DashMap;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::policy::workflow::{Machine, Standing, valid_workspace};
use crate::{
    config::snapshot::{Machines, StageSettings},
    names::{STAGE_STATUS, shown},
    pipeline::StageRefusal,
    stores::Cluster,
    telemetry::{audit::Audit, stage_metrics::StageMetrics},
    upstream::{inflight::Downstream, pool::Pool},
};
use store::{Instance, StageStore};

/// The header that names a request's workspace: `<workspace>`, or `<workflow>/<workspace>`
/// when several workflows are configured.
pub const WORKSPACE_HEADER: &str = "fedgate-workspace";

/// A workspace of a workflow.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Bound {
    pub workflow: String,
    pub workspace: String,
}

/// The workflows, their store, and which session works in which workspace.
#[derive(Debug)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub struct Stages {
    machines: ArcSwap<std::collections::BTreeMap<String, Arc<Machine>>>,
    store: Arc<dyn StageStore>,
    pool: Arc<Pool>,
    /// Session key → the workspace it works in (set by the stage tools; per replica, like
    /// the sessions themselves).
    bindings: DashMap<String, Bound>,
    /// Every move this replica made, for the sessions bound to the workspace.
    moved: broadcast::Sender<Bound>,
    metrics: StageMetrics,
    audit: parking_lot::Mutex<Option<Audit>>,
    /// Moves travel between replicas through it (`cluster_moves`).
    redis: Option<crate::stores::redis::Redis>,
    /// This replica, in the moves it publishes.
    origin: String,
}

impl Stages {
    /// The store is Redis with `[cluster] redis`, else the SQLite file; opened only when some
    /// workflow is configured (a reload that adds the first one needs a restart for it).
    pub fn open(
        settings: &StageSettings,
        cluster: &Cluster,
        pool: Arc<Pool>,
        metrics: StageMetrics,
    ) -> Result<Option<Arc<Self>>, StoreError> {
        if settings.machines.is_empty() {
            return Ok(None);
        }
        let store: Arc<dyn StageStore> = match &cluster.redis {
            #[cfg(feature = "redis")]
            Some(r) => Arc::new(store::redis::RedisStages(r.clone())),
            #[cfg(not(feature = "redis"))]
            Some(r) => r.never(),
            None => Arc::new(store::SqliteStages::open(&settings.db)?),
        };
        Ok(Some(Arc::new(Self {
            machines: ArcSwap::new(settings.machines.clone()),
            store,
            pool,
            bindings: DashMap::new(),
            moved: broadcast::channel(256).0,
            metrics,
            audit: Default::default(),
            redis: cluster.redis.clone(),
            origin: format!("{:016x}", rand::random::<u64>()),
        })))
    }

    /// A reload's workflows (bindings to workflows that are gone gate nothing any more).
    pub fn apply(&self, machines: &Machines) {
        self.machines.store(machines.clone());
    }

    pub fn set_audit(&self, audit: Option<Audit>) {
        *self.audit.lock() = audit;
    }

    /// The own tools `fedgate__stage_status` and `fedgate__stage_advance`.
    pub fn own_tools(self: &Arc<Self>) -> Vec<Arc<dyn crate::pipeline::OwnTool>> {
        tools::all(self)
    }

    /// Moves this replica makes, as they happen.
    pub fn moves(&self) -> broadcast::Receiver<Bound> {
        self.moved.subscribe()
    }

    /// The sessions working in `b`.
    pub fn sessions_in(&self, b: &Bound) -> Vec<String> {
        self.bindings
            .iter()
            .filter(|e| e.value() == b)
            .map(|e| e.key().clone())
            .collect()
    }

    /// Forgets the bindings of sessions that are gone.
    pub fn retain(&self, open: impl Fn(&str) -> bool) {
        self.bindings.retain(|k, _| open(k));
    }

    /// Every workspace that moved, with its history.
    pub async fn list(&self) -> Result<Vec<store::Listed>, StoreError> {
        self.store.list().await
    }

    /// The workflows as loaded.
    pub fn workflows(&self) -> Machines {
        self.machines.load_full()
    }

    /// How many sessions of this replica work in some workspace.
    pub fn bound_sessions(&self) -> usize {
        self.bindings.len()
    }

    fn machine(&self, workflow: &str) -> Option<Arc<Machine>> {
        self.machines.load().get(workflow).cloned()
    }

    /// A workspace named by a caller: `workflow` may be left out when one workflow exists.
    pub fn name(
        &self,
        workflow: Option<&str>,
        workspace: &str,
    ) -> Result<Bound, Box<StageRefusal>> {
        let machines = self.machines.load();
        let workflow = match workflow {
            Some(w) if machines.contains_key(w) => w.to_owned(),
            Some(w) => {
                return Err(refusal(
                    "stage_workspace",
                    format!(
                        "`{}` is no workflow (workflows: {})",
                        shown(w),
                        machines.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                    "name one of the workflows listed".into(),
                ));
            }
            None if machines.len() == 1 => machines.keys().next().cloned().unwrap_or_default(),
            None => {
                return Err(refusal(
                    "stage_workspace",
                    "several workflows are configured: name the workflow too".into(),
                    format!(
                        "give `workflow` (one of {}), or send `Fedgate-Workspace: <workflow>/<workspace>`",
                        machines.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        };
        if !valid_workspace(workspace) {
            return Err(refusal(
                "stage_workspace",
                format!(
                    "workspace `{}` is not a valid workspace id",
                    shown(workspace)
                ),
                "a workspace id is 1-128 letters, digits and . _ : -".into(),
            ));
        }
        Ok(Bound {
            workflow,
            workspace: workspace.to_owned(),
        })
    }

    /// The workspace a request works in: its header's, else its session's.
    pub fn bound(
        &self,
        session: Option<&str>,
        header: Option<&str>,
    ) -> Result<Option<Bound>, Box<StageRefusal>> {
        if let Some(h) = header {
            let b = match h.split_once('/') {
                Some((w, ws)) => self.name(Some(w), ws)?,
                None => self.name(None, h)?,
            };
            // The session works there now: a move tells it its list changed.
            if let Some(s) = session
                && self.bindings.get(s).is_none_or(|had| *had != b)
            {
                self.bindings.insert(s.to_owned(), b.clone());
            }
            return Ok(Some(b));
        }
        Ok(session.and_then(|s| self.bindings.get(s).map(|b| b.clone())))
    }

    /// The workspace a call works in.
    fn bound_call(&self, d: Option<&Downstream>) -> Result<Option<Bound>, Box<StageRefusal>> {
        match d {
            Some(d) => self.bound(d.session.as_deref(), d.workspace.as_deref()),
            None => Ok(None),
        }
    }

    /// Binds a session to a workspace; true when that changed what it works in.
    fn bind(&self, d: Option<&Downstream>, b: &Bound) -> bool {
        let Some(session) = d.and_then(|d| d.session.as_deref()) else {
            return false;
        };
        self.bindings.insert(session.to_owned(), b.clone()).as_ref() != Some(b)
    }

    /// The workspace's instance (its initial state before a first move).
    async fn instance(&self, b: &Bound, m: &Machine) -> Result<Instance, StoreError> {
        Ok(self
            .store
            .get(&b.workflow, &b.workspace)
            .await?
            .unwrap_or_else(|| Instance {
                state: m.initial.clone(),
                history: Vec::new(),
            }))
    }

    /// Where a request stands: the state of the workspace it works in (its header's, else
    /// its session's).
    pub async fn standing(
        &self,
        session: Option<&str>,
        header: Option<&str>,
    ) -> Result<Standing, Box<StageRefusal>> {
        let machines = self.machines.load_full();
        let bound = self.bound(session, header)?;
        let at = match bound
            .as_ref()
            .and_then(|b| Some((b, machines.get(&b.workflow)?)))
        {
            Some((b, m)) => Some((
                b.workflow.clone(),
                self.instance(b, m).await.map_err(store_down)?.state,
            )),
            None => None,
        };
        Ok(Standing::new(machines, at))
    }
}

/// The answer to a store that did not answer: nothing is allowed until it does.
fn store_down(e: StoreError) -> Box<StageRefusal> {
    tracing::warn!("{e}");
    refusal(
        "stage_store",
        "the stage store does not answer: fedgate cannot tell this workspace's stage".into(),
        "retry in a moment".into(),
    )
}

fn refusal(code: &'static str, message: String, hint: String) -> Box<StageRefusal> {
    Box::new(StageRefusal {
        code,
        message,
        hint,
        workflow: None,
        workspace: None,
        state: None,
        next: None,
    })
}

/// `fedgate__stage_status` of a workspace, as a next action.
fn status_action(b: &Bound, several: bool) -> (String, Map<String, Value>) {
    let mut args = Map::new();
    args.insert("workspace".into(), json!(b.workspace));
    if several {
        args.insert("workflow".into(), json!(b.workflow));
    }
    (STAGE_STATUS.to_owned(), args)
}
