//! A run's events, and the state derived from them: the run log holds only events, and the
//! scheduler, `fedgate flows show` and the admin API all fold them the same way.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Node states. PENDING and READY nodes wait; RUNNING and RETRYING are in progress; the rest
/// are final (a rerun makes a final node PENDING again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NodeStatus {
    Pending,
    Ready,
    Running,
    Retrying,
    Succeeded,
    Failed,
    Skipped,
    Cancelled,
    AwaitingApproval,
    /// A write whose outcome a crash left unknown, at an upstream that cannot tell (someone
    /// decides to re-run or skip it), or a node waiting for its caller to connect an account.
    Blocked,
}

impl NodeStatus {
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Skipped | Self::Cancelled
        )
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Succeeded,
    /// Some nodes failed, others succeeded.
    Partial,
    Failed,
    Cancelled,
    /// A replay whose nodes all ran, but whose outputs could not be made from what they
    /// answered this time (the cause is in the run's error).
    Diverged,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Partial => "partial",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Diverged => "diverged",
        }
    }
}

/// A node's output as recorded: inline, or a reference to an artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Output {
    Inline(Value),
    Artifact { id: String, bytes: usize },
}

/// One state change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    NodeReady {
        node: String,
    },
    NodeRunning {
        node: String,
        attempt: u32,
    },
    NodeSucceeded {
        node: String,
        output: Output,
    },
    NodeFailed {
        node: String,
        error: String,
        /// The refusal's plan envelope, when policy refused the call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plan: Option<Value>,
    },
    NodeRetrying {
        node: String,
        error: String,
        delay_ms: u64,
    },
    NodeSkipped {
        node: String,
        reason: String,
    },
    NodeCancelled {
        node: String,
    },
    NodeAwaitingApproval {
        node: String,
        plan: Value,
    },
    NodeBlocked {
        node: String,
        reason: String,
    },
    /// Makes the node PENDING again (a rerun, or a decision to re-run a blocked node).
    NodeReset {
        node: String,
    },
    CancelRequested,
    RunFinished {
        status: RunStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outputs: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A finished run is running again (after a rerun).
    RunReopened,
}

/// An event as stored: its place in the run and when it happened.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stamped {
    pub seq: u64,
    pub at_ms: i64,
    #[serde(flatten)]
    pub event: Event,
}

/// One node's derived state.
#[derive(Debug, Clone, Serialize)]
pub struct NodeState {
    pub status: NodeStatus,
    pub attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Output>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<i64>,
    /// How often the node was reset (rerun): a new generation gets new idempotency keys.
    pub generation: u32,
}

impl Default for NodeState {
    fn default() -> Self {
        Self {
            status: NodeStatus::Pending,
            attempts: 0,
            output: None,
            error: None,
            plan: None,
            started_ms: None,
            finished_ms: None,
            generation: 0,
        }
    }
}

/// A run's derived state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunState {
    pub nodes: BTreeMap<String, NodeState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished: Option<RunStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub cancel_requested: bool,
    /// Events folded so far.
    pub seq: u64,
}

impl RunState {
    pub fn fold<'a>(events: impl IntoIterator<Item = &'a Stamped>) -> Self {
        let mut state = Self::default();
        for e in events {
            state.apply(e.at_ms, &e.event);
            state.seq = e.seq;
        }
        state
    }

    pub fn node(&self, id: &str) -> NodeStatus {
        self.nodes.get(id).map_or(NodeStatus::Pending, |n| n.status)
    }

    /// Applies one event (the scheduler applies what it appends, so it never re-reads).
    pub fn apply(&mut self, at_ms: i64, event: &Event) {
        match event {
            Event::NodeReady { node } => self.entry(node).status = NodeStatus::Ready,
            Event::NodeRunning { node, attempt } => {
                let n = self.entry(node);
                n.status = NodeStatus::Running;
                n.attempts = *attempt;
                n.started_ms.get_or_insert(at_ms);
            }
            Event::NodeSucceeded { node, output } => {
                let n = self.entry(node);
                n.status = NodeStatus::Succeeded;
                n.output = Some(output.clone());
                n.error = None;
                n.finished_ms = Some(at_ms);
            }
            Event::NodeFailed { node, error, plan } => {
                let n = self.entry(node);
                n.status = NodeStatus::Failed;
                n.error = Some(error.clone());
                n.plan = plan.clone();
                n.finished_ms = Some(at_ms);
            }
            Event::NodeRetrying { node, error, .. } => {
                let n = self.entry(node);
                n.status = NodeStatus::Retrying;
                n.error = Some(error.clone());
            }
            Event::NodeSkipped { node, reason } => {
                let n = self.entry(node);
                n.status = NodeStatus::Skipped;
                n.error = Some(reason.clone());
                n.finished_ms = Some(at_ms);
            }
            Event::NodeCancelled { node } => {
                let n = self.entry(node);
                n.status = NodeStatus::Cancelled;
                n.finished_ms = Some(at_ms);
            }
            Event::NodeAwaitingApproval { node, plan } => {
                let n = self.entry(node);
                n.status = NodeStatus::AwaitingApproval;
                n.plan = Some(plan.clone());
            }
            Event::NodeBlocked { node, reason } => {
                let n = self.entry(node);
                n.status = NodeStatus::Blocked;
                n.error = Some(reason.clone());
            }
            Event::NodeReset { node } => {
                let n = self.entry(node);
                *n = NodeState {
                    generation: n.generation + 1,
                    ..NodeState::default()
                };
            }
            Event::CancelRequested => self.cancel_requested = true,
            Event::RunFinished {
                status,
                outputs,
                error,
            } => {
                self.finished = Some(*status);
                self.outputs = outputs.clone();
                self.error = error.clone();
            }
            Event::RunReopened => {
                self.finished = None;
                self.outputs = None;
                self.error = None;
                self.cancel_requested = false;
            }
        }
    }

    fn entry(&mut self, id: &str) -> &mut NodeState {
        self.nodes.entry(id.to_owned()).or_default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stamp(events: Vec<Event>) -> Vec<Stamped> {
        events
            .into_iter()
            .enumerate()
            .map(|(i, event)| Stamped {
                seq: i as u64 + 1,
                at_ms: 1000 + i as i64,
                event,
            })
            .collect()
    }

    fn node(id: &str) -> String {
        id.to_owned()
    }

    #[test]
    fn a_retried_node_keeps_its_attempts_and_ends_with_its_output() {
        let events = stamp(vec![
            Event::NodeReady { node: node("a") },
            Event::NodeRunning {
                node: node("a"),
                attempt: 1,
            },
            Event::NodeRetrying {
                node: node("a"),
                error: "timeout".into(),
                delay_ms: 100,
            },
            Event::NodeReady { node: node("a") },
            Event::NodeRunning {
                node: node("a"),
                attempt: 2,
            },
            Event::NodeSucceeded {
                node: node("a"),
                output: Output::Inline(json!({"ok": true})),
            },
        ]);
        let state = RunState::fold(&events);
        let a = &state.nodes["a"];
        assert_eq!(a.status, NodeStatus::Succeeded);
        assert_eq!(a.attempts, 2);
        assert_eq!(a.error, None, "success clears the retry's error");
        assert_eq!(a.started_ms, Some(1001), "started at its first attempt");
        assert_eq!(a.finished_ms, Some(1005));
        assert_eq!(state.seq, 6);
        assert_eq!(state.node("never-seen"), NodeStatus::Pending);
    }

    #[test]
    fn waits_for_approval_or_a_connection_are_not_final_and_resume_as_ready() {
        let events = stamp(vec![
            Event::NodeAwaitingApproval {
                node: node("w"),
                plan: json!({"status": "ok"}),
            },
            Event::NodeBlocked {
                node: node("c"),
                reason: "waits for its caller to connect their `gh` account".into(),
            },
        ]);
        let mut state = RunState::fold(&events);
        for (id, status) in [
            ("w", NodeStatus::AwaitingApproval),
            ("c", NodeStatus::Blocked),
        ] {
            assert_eq!(state.node(id), status);
            assert!(!status.is_final(), "{id} waits, it has not ended");
        }
        assert_eq!(state.nodes["w"].plan, Some(json!({"status": "ok"})));
        state.apply(2000, &Event::NodeReady { node: node("c") });
        assert_eq!(state.node("c"), NodeStatus::Ready);
    }

    #[test]
    fn a_reset_starts_a_new_generation_and_a_reopened_run_is_unfinished() {
        let events = stamp(vec![
            Event::NodeRunning {
                node: node("a"),
                attempt: 1,
            },
            Event::NodeFailed {
                node: node("a"),
                error: "boom".into(),
                plan: None,
            },
            Event::CancelRequested,
            Event::RunFinished {
                status: RunStatus::Failed,
                outputs: None,
                error: Some("1 of 1 nodes failed".into()),
            },
            Event::RunReopened,
            Event::NodeReset { node: node("a") },
        ]);
        let state = RunState::fold(&events);
        let a = &state.nodes["a"];
        assert_eq!(a.status, NodeStatus::Pending);
        assert_eq!(a.generation, 1);
        assert_eq!((a.attempts, a.error.as_deref()), (0, None));
        assert_eq!(state.finished, None);
        assert!(!state.cancel_requested);
    }

    /// The run log stores events as JSON: their names are a format other replicas and older
    /// logs read.
    #[test]
    fn events_keep_their_stored_form() {
        let e = Stamped {
            seq: 3,
            at_ms: 7,
            event: Event::NodeBlocked {
                node: node("n"),
                reason: "r".into(),
            },
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            json!({"seq": 3, "at_ms": 7, "event": "node_blocked", "node": "n", "reason": "r"})
        );
        let back: Stamped = serde_json::from_value(v).unwrap();
        assert_eq!(back.event, e.event);
        assert_eq!(
            serde_json::to_value(NodeStatus::AwaitingApproval).unwrap(),
            json!("AWAITING_APPROVAL")
        );
    }
}
