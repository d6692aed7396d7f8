//! The end of a run: when every node is final, its status and outputs.

use serde_json::{Map, Value};

use super::Driver;
use crate::flows::events::{Event, NodeStatus, RunStatus};

impl Driver {
    /// The run's last event, once every node is final and nothing runs.
    pub(super) fn finish(&self) -> Option<Event> {
        if self.running > 0
            || !self.run.flow.nodes.iter().all(|n| {
                self.state.node(&n.id).is_final()
                    || self.state.cancel_requested && self.parked(&n.id)
            })
        {
            return None;
        }
        if self.state.cancel_requested {
            return Some(finished(RunStatus::Cancelled, None, None));
        }
        let count = |s: NodeStatus| {
            self.run
                .flow
                .nodes
                .iter()
                .filter(|n| self.state.node(&n.id) == s)
                .count()
        };
        let (failed, succeeded) = (count(NodeStatus::Failed), count(NodeStatus::Succeeded));
        let mut outputs = Map::new();
        for (name, t) in &self.run.flow.outputs {
            match t.render(&self.scope) {
                Ok(v) => {
                    outputs.insert(name.clone(), v);
                }
                Err(m) => {
                    let skipped = m
                        .reference
                        .split('.')
                        .next()
                        .is_some_and(|n| self.state.node(n) != NodeStatus::Succeeded);
                    if skipped {
                        outputs.insert(name.clone(), Value::Null);
                    } else if failed == 0 {
                        let why = format!(
                            "output `{name}`: {}",
                            missing_message("outputs", &m.reference)
                        );
                        // Every node ran: a replay that cannot make the outputs its
                        // original made diverged (one that fails as its original did, failed).
                        let original_made_them = self.run.replay.as_ref().is_some_and(|r| {
                            matches!(
                                r.recorded.finished,
                                Some(RunStatus::Succeeded | RunStatus::Partial)
                            )
                        });
                        return Some(match original_made_them {
                            true => finished(
                                RunStatus::Diverged,
                                None,
                                Some(format!(
                                    "the replay of run {} diverged: every node ran, but {why}",
                                    self.run.key_run
                                )),
                            ),
                            false => finished(RunStatus::Failed, None, Some(why)),
                        });
                    }
                }
            }
        }
        let status = match (failed, succeeded) {
            (0, _) => RunStatus::Succeeded,
            (_, 0) => RunStatus::Failed,
            _ => RunStatus::Partial,
        };
        let error =
            (failed > 0).then(|| format!("{failed} of {} nodes failed", self.run.flow.nodes.len()));
        Some(finished(status, Some(Value::Object(outputs)), error))
    }

    /// Nodes that wait for someone (approval, a decision): final enough for a cancelled run.
    pub(super) fn parked(&self, id: &str) -> bool {
        matches!(
            self.state.node(id),
            NodeStatus::AwaitingApproval | NodeStatus::Blocked
        )
    }
}

pub(super) fn finished(status: RunStatus, outputs: Option<Value>, error: Option<String>) -> Event {
    Event::RunFinished {
        status,
        outputs,
        error,
    }
}

pub(super) fn missing_message(node: &str, reference: &str) -> String {
    let source = reference.split('.').next().unwrap_or_default();
    format!(
        "node `{node}`: `{{{{{reference}}}}}` has no value (no such path in {})",
        if source == "inputs" {
            "the inputs".to_owned()
        } else {
            format!("the output of node `{source}`")
        }
    )
}
