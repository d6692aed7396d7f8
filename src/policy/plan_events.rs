//! What happens to plans, for whoever waits on one (a flow run parked on a node's approval):
//! the approved call ran (with its answer), the plan was denied, or it expired. Plans live in
//! one process, and so do these events.

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
        result: Result<Value, String>,
    },
    Denied {
        id: String,
        by: String,
    },
    Expired {
        id: String,
    },
}

impl PlanEvent {
    pub fn id(&self) -> &str {
        match self {
            PlanEvent::Ran { id, .. }
            | PlanEvent::Denied { id, .. }
            | PlanEvent::Expired { id } => id,
        }
    }
}

/// What `fedgate.approve` answers after the approved call of a plan someone waits on: the
/// waiter's own answer (a flow's next result) instead of the call's.
pub trait FollowUp: Send + Sync + std::fmt::Debug {
    fn after(
        &self,
        plan_id: &str,
    ) -> Option<Pin<Box<dyn Future<Output = Option<CallToolResult>> + Send>>>;
}

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

    pub fn follow_up(
        &self,
        plan_id: &str,
    ) -> Option<Pin<Box<dyn Future<Output = Option<CallToolResult>> + Send>>> {
        self.follow_up.get()?.after(plan_id)
    }
}
