//! What happens to plans, for whoever waits on one (a flow run parked on a node's approval):
//! someone other than its caller approved it, the approved call ran (with its answer), the
//! plan was denied, or it expired. Events stay in the process that decided.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, OnceLock},
};

use rmcp::model::CallToolResult;
use serde_json::Value;
use tokio::sync::broadcast;

/// Events kept for slow receivers before the oldest are dropped.
const CAPACITY: usize = 1024;

#[derive(Debug, Clone)]
pub enum PlanEvent {
    /// The approved call ran: its tool result, or the error that ended it.
    Ran {
        id: String,
        result: Result<Value, RanError>,
    },
    /// Someone other than the caller approved it (a reviewer, the operator): whoever waits
    /// on it may run it now, as its caller.
    Approved {
        id: String,
        by: String,
    },
    Denied {
        id: String,
        by: String,
    },
    Expired {
        id: String,
    },
}

/// How an approved call failed, as a waiter needs it.
#[derive(Debug, Clone)]
pub struct RanError {
    /// What the caller is told.
    pub message: String,
    /// Whether another attempt may pass (`CallError::describe`).
    pub retry: crate::error::Retry,
    /// The plan envelope of the failure.
    pub plan: Option<Value>,
}

impl RanError {
    /// A failure without a plan of its own.
    pub fn plain(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retry: crate::error::Retry::NEVER,
            plan: None,
        }
    }
}

impl PlanEvent {
    pub fn id(&self) -> &str {
        match self {
            PlanEvent::Ran { id, .. }
            | PlanEvent::Approved { id, .. }
            | PlanEvent::Denied { id, .. }
            | PlanEvent::Expired { id } => id,
        }
    }
}

/// What `fedgate__approve` answers after the approved call of a plan someone waits on: the
/// waiter's own answer (a flow's next result) instead of the call's.
pub trait FollowUp: Send + Sync + std::fmt::Debug {
    fn after(&self, plan_id: &str) -> Option<AnswerFuture>;

    /// For a plan a waiter already ran (someone else approved it): the waiter's answer once
    /// it has moved past the plan.
    fn settled(&self, plan_id: &str) -> Option<AnswerFuture>;
}

/// A waiter's answer, when it has one.
pub type AnswerFuture = Pin<Box<dyn Future<Output = Option<CallToolResult>> + Send>>;

#[derive(Debug)]
pub struct PlanEvents {
    tx: broadcast::Sender<PlanEvent>,
    follow_up: OnceLock<Arc<dyn FollowUp>>,
}

impl Default for PlanEvents {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(CAPACITY).0,
            follow_up: OnceLock::new(),
        }
    }
}

impl PlanEvents {
    pub fn send(&self, event: PlanEvent) {
        // No receiver is no one waiting: nothing to do.
        let _ = self.tx.send(event);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<PlanEvent> {
        self.tx.subscribe()
    }

    /// Sets who follows up approved plans (once).
    pub fn set_follow_up(&self, f: Arc<dyn FollowUp>) {
        let _ = self.follow_up.set(f);
    }

    pub fn follow_up(&self, plan_id: &str) -> Option<AnswerFuture> {
        self.follow_up.get()?.after(plan_id)
    }

    pub fn settled(&self, plan_id: &str) -> Option<AnswerFuture> {
        self.follow_up.get()?.settled(plan_id)
    }
}
