//! Replay (the determinism check) and rerun of one node.
//!
//! A replay runs the flow again as a new run (`replay_of` names the original) with the same
//! inputs and caller, against the live tools, and compares every node with the recording.
//! Nodes safe to repeat get fresh idempotency keys, so they really run again; writes keep the
//! original's keys, so an upstream that honours them answers as before instead of writing
//! twice (and the gateway's own idempotency records do the same while they last). A write to
//! an upstream that does not declare `idempotency_keys = true` is not repeated unless the
//! replay allows writes: the node takes its recorded outcome and the report says so. A replay
//! whose nodes all ran but whose outputs cannot be made ends `diverged`, not `failed`.
//!
//! A rerun appends events to a finished run: the node and everything downstream of it become
//! PENDING again, the run reopens, and the scheduler drives it to a new end.

use crate::flows::error::RunError;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;

use super::{
    Drive, Engine,
    driver::Replay,
    events::{Event, NodeStatus, RunState},
};
use crate::config::flows::check::downstream_of;

/// One node whose replay differs from the recording.
#[derive(Debug, Clone, Serialize)]
pub struct Divergence {
    pub node: String,
    pub recorded_status: NodeStatus,
    pub replayed_status: NodeStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed: Option<Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub run_id: String,
    pub replay_run_id: String,
    pub nodes: usize,
    pub divergences: Vec<Divergence>,
    /// Writes that were not repeated (their upstream may not deduplicate them): they kept their
    /// recorded outcome.
    pub not_replayed: Vec<String>,
}

impl Engine {
    /// Replays finished run `run_id`; `allow_writes` repeats writes to upstreams that do not
    /// honour idempotency keys too.
    pub async fn replay(
        self: &Arc<Self>,
        run_id: &str,
        allow_writes: bool,
    ) -> Result<ReplayReport, RunError> {
        let (record, events) = self.load(run_id).await?;
        let recorded = RunState::fold(&events);
        if recorded.finished.is_none() {
            return Err(RunError::Unfinished(
                run_id.to_owned(),
                "replay it when it has",
            ));
        }
        let flow = self
            .flow(&record.flow)
            .ok_or_else(|| RunError::FlowNotLoaded(record.flow.clone()))?;
        let identity = self.caller_identity(&record.caller);
        let replay = self
            .create(
                &flow,
                record.inputs.clone(),
                record.caller.clone(),
                Some(record.run_id.clone()),
            )
            .await?;
        let replay_run_id = replay.run_id.clone();
        let done = self.drive(
            flow.clone(),
            replay,
            identity,
            Drive {
                key_run: Some(record.run_id.clone()),
                replay: Some(Arc::new(Replay {
                    recorded: recorded.clone(),
                    allow_writes,
                })),
                ..Drive::default()
            },
        );
        let replayed = done.await??;
        let mut divergences = Vec::new();
        for n in &flow.nodes {
            let (a, b) = (recorded.node(&n.id), replayed.node(&n.id));
            let (ra, rb) = (
                self.output_value(recorded.nodes.get(&n.id).and_then(|s| s.output.as_ref()))
                    .await,
                self.output_value(replayed.nodes.get(&n.id).and_then(|s| s.output.as_ref()))
                    .await,
            );
            if a != b || ra != rb {
                divergences.push(Divergence {
                    node: n.id.clone(),
                    recorded_status: a,
                    replayed_status: b,
                    recorded: ra,
                    replayed: rb,
                });
            }
        }
        let not_replayed = flow
            .nodes
            .iter()
            .filter(|n| !allow_writes && !self.replays(&n.tool))
            .map(|n| n.id.clone())
            .collect();
        Ok(ReplayReport {
            run_id: record.run_id,
            replay_run_id,
            nodes: flow.nodes.len(),
            divergences,
            not_replayed,
        })
    }

    /// Re-runs `node` of a finished run and everything downstream of it.
    pub async fn rerun(
        self: &Arc<Self>,
        run_id: &str,
        node: &str,
    ) -> Result<oneshot::Receiver<Result<RunState, RunError>>, RunError> {
        let (record, events) = self.load(run_id).await?;
        let state = RunState::fold(&events);
        if state.finished.is_none() {
            return Err(RunError::Unfinished(
                run_id.to_owned(),
                "rerun a node once it has",
            ));
        }
        let flow = self
            .flow(&record.flow)
            .ok_or_else(|| RunError::FlowNotLoaded(record.flow.clone()))?;
        if !flow.nodes.iter().any(|n| n.id == node) {
            return Err(RunError::NoNode {
                flow: flow.id.clone(),
                node: crate::names::shown(node),
            });
        }
        let again = downstream_of(&flow, node);
        let mut batch = vec![Event::RunReopened];
        batch.extend(
            flow.nodes
                .iter()
                .filter(|n| again.contains(&n.id))
                .map(|n| Event::NodeReset { node: n.id.clone() }),
        );
        self.append(run_id, batch).await?;
        self.resume(run_id).await
    }
}
