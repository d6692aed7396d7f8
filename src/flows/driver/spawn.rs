//! Starting one node's call: through the stack as the run's caller, with its idempotency key
//! and timeout, within the engine's and its upstream's concurrency bounds — or, in a replay
//! that may not repeat the node's write, with its recorded outcome instead.

use std::time::Duration;

use serde_json::Value;

use super::{Driver, Msg};
use crate::{
    config::flows::Idempotency,
    flows::{
        events::NodeStatus,
        node::{self, Attempt, NodeCall},
    },
};

impl Driver {
    /// Starts the call of node `i` (already counted as running).
    pub(super) fn spawn(&mut self, i: usize, arguments: Value) {
        let flow = self.run.flow.clone();
        let Some(n) = flow.nodes.get(i) else { return };
        let engine = self.run.engine.clone();
        let Some(stack) = engine.stack() else {
            let _ = self.tx.send(Msg::Done {
                node: n.id.clone(),
                attempt: Attempt::Failed {
                    error: "the flow engine has no call stack".into(),
                    plan: None,
                    retry: crate::error::Retry::NEVER,
                },
            });
            return;
        };
        // A replay does not repeat a write the upstream may not deduplicate: the node takes
        // its recorded outcome (the report lists it as not replayed).
        if let Some(replay) = &self.run.replay
            && !replay.allow_writes
            && !engine.replays(&n.tool)
        {
            let recorded = replay.recorded.nodes.get(&n.id).cloned();
            let (tx, node) = (self.tx.clone(), n.id.clone());
            tokio::spawn(async move {
                let attempt = match recorded {
                    Some(r) if r.status == NodeStatus::Succeeded => Attempt::Succeeded(
                        engine
                            .output_value(r.output.as_ref())
                            .await
                            .unwrap_or(Value::Null),
                    ),
                    r => Attempt::Failed {
                        error: r.and_then(|r| r.error).unwrap_or_else(|| {
                            "not replayed: a write the original run did not complete".into()
                        }),
                        plan: None,
                        retry: crate::error::Retry::NEVER,
                    },
                };
                let _ = tx.send(Msg::Done { node, attempt });
            });
            return;
        }
        let call = NodeCall {
            stack,
            identity: self.run.identity.clone(),
            tool: n.tool.clone(),
            arguments,
            key: (self.run.flow.idempotency == Idempotency::Enforce).then(|| {
                let fresh = self.run.replay.is_some()
                    && engine.classify(&n.tool).is_some_and(|c| c.retry_safe);
                let base = if fresh {
                    &self.run.record.run_id
                } else {
                    &self.run.key_run
                };
                match self.state.nodes.get(&n.id).map_or(0, |s| s.generation) {
                    0 => format!("{base}:{}", n.id),
                    g => format!("{base}:{}#{g}", n.id),
                }
            }),
            depth: self.run.depth,
            timeout: n.timeout_ms.map(Duration::from_millis),
            ct: self.run.ct.child_token(),
            hop: self.run.hop.clone(),
            workspace: self.run.record.caller.workspace.clone(),
        };
        let (tx, node) = (self.tx.clone(), n.id.clone());
        let upstream = engine.upstream_permits(&n.tool);
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            // The global bound, then the upstream's: no upstream gets more than its share.
            let global = engine.permits.clone().acquire_owned().await;
            let local = match &upstream {
                Some(s) => Some(s.clone().acquire_owned().await),
                None => None,
            };
            let attempt = match (global, local) {
                (Ok(g), l @ (None | Some(Ok(_)))) => {
                    let _held = (g, l);
                    node::attempt(call).await
                }
                _ => Attempt::Failed {
                    error: "the flow engine is shutting down".into(),
                    plan: None,
                    retry: crate::error::Retry::NEVER,
                },
            };
            engine.metrics.node_seconds(started.elapsed());
            let _ = tx.send(Msg::Done { node, attempt });
        });
    }
}
