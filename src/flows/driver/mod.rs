//! The scheduler of one run. It alone changes node states, and only by appending events to the
//! run log (then applying them to its state): PENDING → READY (dependencies final, condition
//! true) → RUNNING → SUCCEEDED | FAILED, with RETRYING between attempts, SKIPPED (condition
//! false, or a dependency that did not succeed), CANCELLED, and BLOCKED for a write a crash
//! interrupted at an upstream that cannot tell whether it happened, or for the run's caller to
//! connect their own account of a per-user upstream. Node attempts run as tasks and report
//! back over a channel; the ready queue is bounded by the flow's parallelism and global permits.

use std::{collections::HashMap, sync::Arc};

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod ending;
mod helpers;
mod spawn;
#[cfg(test)]
mod tests;

use ending::missing_message;
pub use helpers::status_label;
use helpers::{approval_outcome, backoff, node_of};

use super::{
    Engine,
    events::{Event, NodeStatus, Output, RunState, Stamped},
    log::RunRecord,
    node::{self, Attempt},
};
use crate::{
    config::flows::{FlowDef, Idempotency, NodeDef},
    flows::error::RunError,
    policy::identity::Identity,
};

/// A node finished, for the progress the caller sees.
#[derive(Debug, Clone)]
pub struct NodeDone {
    pub node: String,
    pub status: NodeStatus,
    pub done: usize,
    pub total: usize,
}

/// What a run is driven with.
pub struct Run {
    pub engine: Arc<Engine>,
    pub flow: Arc<FlowDef>,
    pub record: RunRecord,
    pub identity: Identity,
    pub depth: u8,
    pub ct: CancellationToken,
    /// Stops the scheduler without recording anything (shutdown, or a lease lost to another
    /// replica): the run stays unfinished, to resume.
    pub stop: CancellationToken,
    pub progress: Option<mpsc::UnboundedSender<NodeDone>>,
    /// Idempotency keys are derived from this run id (a replay reuses the original's).
    pub key_run: String,
    /// A replay: nodes safe to repeat get keys of this run, so they really run again; writes
    /// keep the original run's keys, so an upstream that honours them does not repeat them.
    pub replay: Option<Arc<Replay>>,
    /// Published whenever the scheduler waits.
    pub quiet: tokio::sync::watch::Sender<Quiet>,
    /// Federation `_meta` its node calls carry (see `crate::federation::hops`).
    pub hop: Map<String, Value>,
}

/// What a replay compares with, and whether it may repeat writes.
#[derive(Debug)]
pub struct Replay {
    /// The original run, as recorded.
    pub recorded: RunState,
    /// Writes to upstreams that do not honour idempotency keys run again too.
    pub allow_writes: bool,
}

/// The run as the scheduler left it when it last waited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quiet {
    /// Events recorded so far.
    pub seq: u64,
    /// Nothing runs, and some node waits for someone (approval, a decision).
    pub parked: bool,
}

pub enum Msg {
    Done {
        node: String,
        attempt: Attempt,
    },
    RetryDue {
        node: String,
    },
    /// A decision from outside (re-run or skip a blocked node): events to append.
    Decided(Vec<Event>),
    /// Someone other than the run's caller approved the plan node `node` waits on: the run
    /// runs it as its caller.
    Approved {
        node: String,
        plan_id: String,
    },
    /// What became of the plan a node waits on.
    Approval {
        node: String,
        event: crate::approval::events::PlanEvent,
    },
    /// The run's caller connected the account a BLOCKED node waits for.
    Connected {
        node: String,
    },
}

/// Drives the run from `events` to its end; returns the final state. `tx` and `rx` are the
/// scheduler's mailbox (the engine keeps a sender for decisions).
pub async fn drive(
    run: Run,
    events: Vec<Stamped>,
    tx: mpsc::UnboundedSender<Msg>,
    mut rx: mpsc::UnboundedReceiver<Msg>,
) -> Result<RunState, RunError> {
    let mut d = Driver {
        state: RunState::fold(&events),
        outputs: HashMap::new(),
        running: 0,
        tx,
        run,
        staged: Vec::new(),
        scope: Value::Null,
    };
    d.load_outputs().await;
    d.rebuild_scope();
    // Before it asks again: the plans it waited on end, so none is approved for nothing.
    let superseded = d.recover();
    d.run.engine.supersede(superseded).await;
    loop {
        if d.run.ct.is_cancelled() && !d.state.cancel_requested {
            d.stage(Event::CancelRequested);
        }
        d.decide();
        let starts = d.launch();
        if let Some(end) = d.finish() {
            d.stage(end);
            d.flush().await?;
            return Ok(d.state);
        }
        // Durable before anything it records happens: a node is RUNNING in the log before
        // its call leaves.
        d.flush().await?;
        for (node, arguments) in starts {
            d.spawn(node, arguments);
        }
        let parked = d.running == 0 && d.run.flow.nodes.iter().any(|n| d.parked(&n.id));
        d.run.quiet.send_replace(Quiet {
            seq: d.state.seq,
            parked,
        });
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(m) => d.handle(m).await?,
                None => return Err(RunError::Stopped("scheduler channel closed".into())),
            },
            _ = d.run.ct.cancelled(), if !d.state.cancel_requested => {}
            _ = d.run.stop.cancelled() => {
                return Err(RunError::LeftHere);
            }
        }
    }
}

struct Driver {
    run: Run,
    state: RunState,
    /// Outputs of succeeded nodes (artifacts loaded), for templates and conditions.
    outputs: HashMap<String, Value>,
    running: usize,
    tx: mpsc::UnboundedSender<Msg>,
    /// Events applied but not yet in the log.
    staged: Vec<Event>,
    scope: Value,
}

impl Driver {
    /// Applies an event to the state at once (later decisions in this step see it); it is
    /// recorded with the others of the step by [`Driver::flush`].
    fn stage(&mut self, event: Event) {
        let now = chrono::Utc::now().timestamp_millis();
        self.state.apply(now, &event);
        if let Some(node) = node_of(&event) {
            let node = node.to_owned();
            if matches!(event, Event::NodeReset { .. }) {
                self.outputs.remove(&node);
            }
            self.scope_node(&node);
        }
        self.staged.push(event);
    }

    /// Appends the staged events in one transaction.
    async fn flush(&mut self) -> Result<(), RunError> {
        if self.staged.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.staged);
        let at_ms = chrono::Utc::now().timestamp_millis();
        let timer = self.run.engine.metrics.log_append.start_timer();
        let stamped = self
            .run
            .engine
            .log
            .append(&self.run.record.run_id, at_ms, &batch)
            .await?;
        drop(timer);
        for s in &stamped {
            self.state.seq = s.seq;
            self.observe(&s.event);
        }
        Ok(())
    }

    /// The scope templates and conditions read: `inputs`, and per node its status and output.
    fn rebuild_scope(&mut self) {
        let mut scope = Map::new();
        scope.insert("inputs".into(), self.run.record.inputs.clone());
        self.scope = Value::Object(scope);
        let ids: Vec<String> = self.state.nodes.keys().cloned().collect();
        for id in ids {
            self.scope_node(&id);
        }
    }

    fn scope_node(&mut self, id: &str) {
        let mut entry = Map::new();
        entry.insert("status".into(), json!(self.state.node(id)));
        if let Some(v) = self.outputs.get(id) {
            entry.insert("output".into(), v.clone());
        }
        if let Some(scope) = self.scope.as_object_mut() {
            scope.insert(id.to_owned(), Value::Object(entry));
        }
    }

    /// Metrics and progress for what just happened.
    fn observe(&self, event: &Event) {
        let (node, status) = match event {
            Event::NodeSucceeded { node, .. } => (node, NodeStatus::Succeeded),
            Event::NodeFailed { node, .. } => (node, NodeStatus::Failed),
            Event::NodeSkipped { node, .. } => (node, NodeStatus::Skipped),
            Event::NodeCancelled { node } => (node, NodeStatus::Cancelled),
            Event::NodeBlocked { node, .. } => (node, NodeStatus::Blocked),
            Event::NodeAwaitingApproval { node, .. } => (node, NodeStatus::AwaitingApproval),
            _ => return,
        };
        self.run
            .engine
            .metrics
            .node_finished(&self.run.flow.id, status_label(status));
        if let Some(p) = &self.run.progress {
            let done = self
                .state
                .nodes
                .values()
                .filter(|n| n.status.is_final())
                .count();
            let _ = p.send(NodeDone {
                node: node.clone(),
                status,
                done,
                total: self.run.flow.nodes.len(),
            });
        }
    }

    /// Outputs of nodes that succeeded before (a resumed run), artifacts read back.
    async fn load_outputs(&mut self) {
        for (id, n) in &self.state.nodes {
            if n.status == NodeStatus::Succeeded {
                let value = self.run.engine.output_value(n.output.as_ref()).await;
                self.outputs
                    .insert(id.clone(), value.unwrap_or(Value::Null));
            }
        }
    }

    /// A resumed run: nodes that were RUNNING or RETRYING when the gateway stopped are
    /// re-driven with the same idempotency key, unless they write and nothing can tell
    /// whether the write happened (then they are BLOCKED for a decision); nodes that waited
    /// for approval ask again with a new plan, and so do nodes that waited for their caller to
    /// connect an account. Returns the plans they waited on, to end.
    fn recover(&mut self) -> Vec<String> {
        let flow = self.run.flow.clone();
        let mut superseded = Vec::new();
        for n in &flow.nodes {
            match self.state.node(&n.id) {
                NodeStatus::Running | NodeStatus::Retrying => {
                    if self.redrivable(n) {
                        self.stage(Event::NodeReady { node: n.id.clone() });
                    } else {
                        self.stage(Event::NodeBlocked {
                            node: n.id.clone(),
                            reason: format!(
                                "`{}` writes and was running when the gateway stopped; its upstream does not honour idempotency keys, so whether it happened is unknown: re-run or skip it",
                                n.tool
                            ),
                        });
                    }
                }
                NodeStatus::AwaitingApproval => {
                    if let Some(id) = self
                        .state
                        .nodes
                        .get(&n.id)
                        .and_then(|s| s.plan.as_ref())
                        .and_then(node::plan_id)
                    {
                        superseded.push(id);
                    }
                    self.stage(Event::NodeReady { node: n.id.clone() })
                }
                // Waiting for its caller to connect an account: asked again (a new link, or
                // it runs if they connected meanwhile).
                NodeStatus::Blocked
                    if self
                        .state
                        .nodes
                        .get(&n.id)
                        .and_then(|s| s.error.as_deref())
                        .is_some_and(|e| e.starts_with(node::CONNECT_WAIT)) =>
                {
                    self.stage(Event::NodeReady { node: n.id.clone() })
                }
                _ => {}
            }
        }
        superseded
    }

    fn redrivable(&self, n: &NodeDef) -> bool {
        let keyed = self.run.flow.idempotency == Idempotency::Enforce;
        match self.run.engine.classify(&n.tool) {
            Some(c) => c.retry_safe || (keyed && c.honours_keys),
            None => false,
        }
    }

    /// Pending nodes whose dependencies are final become READY or SKIPPED; after a cancel,
    /// every node that has not started is CANCELLED.
    fn decide(&mut self) {
        let flow = self.run.flow.clone();
        if self.state.cancel_requested {
            for n in &flow.nodes {
                if matches!(
                    self.state.node(&n.id),
                    NodeStatus::Pending | NodeStatus::Ready | NodeStatus::Retrying
                ) {
                    self.stage(Event::NodeCancelled { node: n.id.clone() });
                }
            }
            return;
        }
        // Nodes are in order: a decision made here counts for the nodes after it.
        for n in &flow.nodes {
            if self.state.node(&n.id) != NodeStatus::Pending
                || !n.depends_on.iter().all(|d| self.state.node(d).is_final())
            {
                continue;
            }
            let unmet = n
                .depends_on
                .iter()
                .find(|d| self.state.node(d) != NodeStatus::Succeeded);
            let event = if let Some(d) = unmet {
                let why = match self.state.node(d) {
                    NodeStatus::Skipped => "was skipped",
                    NodeStatus::Cancelled => "was cancelled",
                    _ => "failed",
                };
                Event::NodeSkipped {
                    node: n.id.clone(),
                    reason: format!("dependency `{d}` {why}"),
                }
            } else {
                match n.when.as_ref().map(|c| (c, c.holds(&self.scope))) {
                    None | Some((_, Ok(true))) => Event::NodeReady { node: n.id.clone() },
                    Some((c, Ok(false))) => Event::NodeSkipped {
                        node: n.id.clone(),
                        reason: format!("condition `{}` is false", c.source),
                    },
                    Some((_, Err(e))) => Event::NodeFailed {
                        node: n.id.clone(),
                        error: format!("condition of node `{}`: {e}", n.id),
                        plan: None,
                    },
                }
            };
            self.stage(event);
        }
    }

    /// READY nodes become RUNNING while the flow's parallelism allows; returns the calls to
    /// start once that is recorded.
    fn launch(&mut self) -> Vec<(usize, Value)> {
        let mut starts = Vec::new();
        if self.state.cancel_requested {
            return starts;
        }
        let flow = self.run.flow.clone();
        for (i, n) in flow.nodes.iter().enumerate() {
            if self.running >= flow.parallelism {
                break;
            }
            if self.state.node(&n.id) != NodeStatus::Ready {
                continue;
            }
            match n.params.render(&self.scope) {
                Ok(arguments) => {
                    let attempt = self.state.nodes.get(&n.id).map_or(0, |s| s.attempts) + 1;
                    self.stage(Event::NodeRunning {
                        node: n.id.clone(),
                        attempt,
                    });
                    self.running += 1;
                    starts.push((i, arguments));
                }
                Err(m) => self.stage(Event::NodeFailed {
                    node: n.id.clone(),
                    error: missing_message(&n.id, &m.reference),
                    plan: None,
                }),
            }
        }
        starts
    }

    /// Stages what a message means; the next step records it.
    async fn handle(&mut self, msg: Msg) -> Result<(), RunError> {
        match msg {
            Msg::Decided(events) => {
                for e in events {
                    self.stage(e);
                }
            }
            Msg::Approved { node, plan_id } => {
                if self.state.node(&node) == NodeStatus::AwaitingApproval {
                    self.run.engine.run_approved(
                        &self.run.record.run_id,
                        node,
                        plan_id,
                        self.run.identity.clone(),
                        self.run.depth,
                        self.run.hop.clone(),
                    );
                }
            }
            Msg::Approval { node, event } => {
                if self.state.node(&node) != NodeStatus::AwaitingApproval {
                    return Ok(());
                }
                let attempt = approval_outcome(event);
                let event = self.outcome(&node, attempt).await?;
                self.stage(event);
            }
            Msg::Connected { node } => {
                if self.state.node(&node) == NodeStatus::Blocked {
                    self.stage(Event::NodeReady { node });
                }
            }
            Msg::RetryDue { node } => {
                if self.state.node(&node) == NodeStatus::Retrying {
                    self.stage(Event::NodeReady { node });
                }
            }
            Msg::Done { node, attempt } => {
                self.running = self.running.saturating_sub(1);
                let event = self.outcome(&node, attempt).await?;
                self.stage(event);
            }
        }
        Ok(())
    }

    async fn outcome(&mut self, node: &str, attempt: Attempt) -> Result<Event, RunError> {
        let Some(def) = self.run.flow.nodes.iter().find(|n| n.id == node) else {
            return Err(RunError::NoNode {
                flow: self.run.flow.id.clone(),
                node: node.to_owned(),
            });
        };
        Ok(match attempt {
            Attempt::Succeeded(value) => {
                let output = self.store(node, &value).await?;
                self.outputs.insert(node.to_owned(), value);
                Event::NodeSucceeded {
                    node: node.to_owned(),
                    output,
                }
            }
            Attempt::NeedsApproval { id, plan } => {
                if let Some(id) = id {
                    self.run.engine.park(id, &self.run.record.run_id, node);
                }
                Event::NodeAwaitingApproval {
                    node: node.to_owned(),
                    plan,
                }
            }
            Attempt::NeedsConnect { upstream, url } => {
                self.await_connection(node, &upstream);
                Event::NodeBlocked {
                    node: node.to_owned(),
                    reason: format!(
                        "{} their `{upstream}` account: open {url} (the link works once, for {} minutes); the node runs as soon as they have",
                        node::CONNECT_WAIT,
                        crate::credentials::STATE_TTL.as_secs() / 60
                    ),
                }
            }
            Attempt::Failed { .. } if self.run.ct.is_cancelled() => Event::NodeCancelled {
                node: node.to_owned(),
            },
            Attempt::Failed { error, plan, retry } => {
                let attempts = self.state.nodes.get(node).map_or(1, |n| n.attempts);
                let policy = def
                    .retry
                    .filter(|r| retry.for_reads() && attempts < r.max_attempts);
                match policy {
                    // A write is tried again only when it never got to the upstream.
                    Some(r)
                        if retry.for_writes()
                            || self
                                .run
                                .engine
                                .classify(&def.tool)
                                .is_some_and(|c| c.retry_safe) =>
                    {
                        let delay = backoff(r, attempts);
                        let (tx, n) = (self.tx.clone(), node.to_owned());
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let _ = tx.send(Msg::RetryDue { node: n });
                        });
                        Event::NodeRetrying {
                            node: node.to_owned(),
                            error,
                            delay_ms: delay.as_millis() as u64,
                        }
                    }
                    _ => Event::NodeFailed {
                        node: node.to_owned(),
                        error,
                        plan,
                    },
                }
            }
        })
    }

    /// Wakes the node once the run's caller has connected `upstream` (on any replica), while
    /// the link is valid; later, an operator decides (re-run or skip) or a resumed run asks
    /// again.
    fn await_connection(&self, node: &str, upstream: &str) {
        let Some(creds) = self.run.engine.credentials() else {
            return;
        };
        let (tx, node, upstream) = (self.tx.clone(), node.to_owned(), upstream.to_owned());
        let owner = self.run.identity.key();
        // Ends with the run, or when this process stops driving it (shutdown).
        let (cancelled, stopped) = (self.run.ct.clone(), self.run.engine.stop.clone());
        tokio::spawn(async move {
            let wait = crate::credentials::STATE_TTL;
            tokio::select! {
                got = creds.wait_connected(&owner, &upstream, wait) => {
                    if matches!(got, Ok(Some(_))) {
                        let _ = tx.send(Msg::Connected { node });
                    }
                }
                _ = cancelled.cancelled() => {}
                _ = stopped.cancelled() => {}
            }
        });
    }

    /// Inline, or as an artifact when larger than `[flows] artifact_bytes`.
    async fn store(&self, node: &str, value: &Value) -> Result<Output, RunError> {
        let bytes = crate::json_size::encoded_len(value);
        if bytes <= self.run.engine.artifact_bytes {
            return Ok(Output::Inline(value.clone()));
        }
        let id = format!("{}/{node}/{}", self.run.record.run_id, self.state.seq + 1);
        let body = serde_json::to_vec(value)?;
        self.run
            .engine
            .log
            .put_artifact(&self.run.record.run_id, &id, &body)
            .await?;
        self.run.engine.metrics.artifact(bytes);
        Ok(Output::Artifact { id, bytes })
    }
}
