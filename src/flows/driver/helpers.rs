//! What the scheduler derives from one attempt or event: backoff, metric labels, the node an
//! event is about, and an approval plan's fate as a node attempt.

use std::time::Duration;

use super::super::{
    events::{Event, NodeStatus},
    node::{self, Attempt},
};
use crate::config::flows::Retry;

/// `min(max, base·2ⁿ) + random(0, jitter)` after the n-th failed attempt (n from 1).
pub(super) fn backoff(r: Retry, attempts: u32) -> Duration {
    let ms = Duration::from_millis;
    crate::policy::retry::backoff(attempts, ms(r.base_ms), ms(r.max_ms), ms(r.jitter_ms))
}

/// A node status as a metric label.
pub fn status_label(s: NodeStatus) -> &'static str {
    match s {
        NodeStatus::Pending => "pending",
        NodeStatus::Ready => "ready",
        NodeStatus::Running => "running",
        NodeStatus::Retrying => "retrying",
        NodeStatus::Succeeded => "succeeded",
        NodeStatus::Failed => "failed",
        NodeStatus::Skipped => "skipped",
        NodeStatus::Cancelled => "cancelled",
        NodeStatus::AwaitingApproval => "awaiting_approval",
        NodeStatus::Blocked => "blocked",
    }
}

/// The node an event is about.
pub(super) fn node_of(e: &Event) -> Option<&str> {
    match e {
        Event::NodeReady { node }
        | Event::NodeRunning { node, .. }
        | Event::NodeSucceeded { node, .. }
        | Event::NodeFailed { node, .. }
        | Event::NodeRetrying { node, .. }
        | Event::NodeSkipped { node, .. }
        | Event::NodeCancelled { node }
        | Event::NodeAwaitingApproval { node, .. }
        | Event::NodeBlocked { node, .. }
        | Event::NodeReset { node } => Some(node),
        Event::CancelRequested | Event::RunFinished { .. } | Event::RunReopened => None,
    }
}

/// What became of an approval plan, as the node's attempt.
pub(super) fn approval_outcome(event: crate::approval::events::PlanEvent) -> Attempt {
    use crate::approval::events::PlanEvent;
    let failed = |error: String| Attempt::Failed {
        error,
        plan: None,
        retry: crate::error::Retry::NEVER,
    };
    match event {
        PlanEvent::Ran { result: Ok(v), .. } => {
            match serde_json::from_value::<rmcp::model::CallToolResult>(v) {
                Ok(r) => node::from_result(r),
                Err(e) => failed(format!("unreadable answer of the approved call: {e}")),
            }
        }
        PlanEvent::Ran { result: Err(e), .. } => Attempt::Failed {
            error: e.message,
            plan: e.plan,
            retry: e.retry,
        },
        // Not an outcome: the run runs the approved plan, and hears `Ran` after.
        PlanEvent::Approved { .. } => failed("approved, not yet run".into()),
        PlanEvent::Denied { by, .. } => failed(format!("the approval was denied by {by}")),
        PlanEvent::Expired { .. } => failed("the approval expired before anyone decided".into()),
    }
}
