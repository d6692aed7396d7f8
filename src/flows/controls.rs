//! What an operator does to a run: cancel it (wherever it is driven, or recorded here when
//! nothing drives it), and decide a node blocked by an interrupted write (run it again, or
//! skip it).

use super::{
    Engine, driver,
    events::{self, RunState},
};
use crate::flows::error::RunError;

impl Engine {
    /// Cancels a run this process drives; false when it drives no such run.
    pub fn cancel(&self, run_id: &str) -> bool {
        match self.live.get(run_id) {
            Some(live) => {
                live.ct.cancel();
                true
            }
            None => false,
        }
    }

    /// Cancels a run wherever it is: its scheduler stops it, or — a run nothing drives (its
    /// flow no longer loads, say) — its cancellation is recorded here. A finished run stays.
    pub async fn cancel_run(&self, run_id: &str) -> Result<(), RunError> {
        if self.cancel(run_id) {
            return Ok(());
        }
        let (_, events) = self.load(run_id).await?;
        let state = RunState::fold(&events);
        if state.finished.is_some() {
            return Ok(());
        }
        let mut batch = vec![events::Event::CancelRequested];
        for (node, n) in &state.nodes {
            if !n.status.is_final() {
                batch.push(events::Event::NodeCancelled { node: node.clone() });
            }
        }
        batch.push(events::Event::RunFinished {
            status: events::RunStatus::Cancelled,
            outputs: None,
            error: None,
        });
        self.append(run_id, batch).await
    }

    /// Decides a BLOCKED node of a run this process drives: run it again, or skip it.
    pub async fn decide(&self, run_id: &str, node: &str, rerun: bool) -> Result<(), RunError> {
        let (_, events) = self.load(run_id).await?;
        if RunState::fold(&events).node(node) != events::NodeStatus::Blocked {
            return Err(RunError::NotDeciding {
                run: run_id.to_owned(),
                node: crate::names::shown(node),
            });
        }
        let decision = if rerun {
            events::Event::NodeReady {
                node: node.to_owned(),
            }
        } else {
            events::Event::NodeSkipped {
                node: node.to_owned(),
                reason: "skipped by decision".into(),
            }
        };
        let live = self
            .live
            .get(run_id)
            .ok_or_else(|| RunError::NotDriven(run_id.to_owned()))?;
        live.mail
            .send(driver::Msg::Decided(vec![decision]))
            .map_err(|_| RunError::Ended(run_id.to_owned()))
    }
}
