//! Waiting on a run from outside it (the admin API, `fedgate flows run --wait`): until it
//! finished, or until it rests parked on someone's decision — here, or on the replica that
//! drives it (a shared log).

use super::{Engine, RunRecord, RunState, events};
use crate::flows::error::RunError;

impl Engine {
    /// Waits until the run has finished, or has come to rest parked with more than `after`
    /// events (here, or on the replica that drives it); its state then, and whether it waits
    /// for someone. Bounded by `timeout`.
    pub async fn wait_parked(
        &self,
        run_id: &str,
        after: u64,
        timeout: std::time::Duration,
    ) -> Result<(RunState, bool), RunError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut ended = self.ended.subscribe();
            ended.borrow_and_update();
            if self.live.contains_key(run_id) {
                match tokio::time::timeout_at(deadline, self.settle(run_id, after)).await {
                    Ok(Ok((state, parked))) if parked || state.finished.is_some() => {
                        return Ok((state, parked));
                    }
                    // It stopped being driven here: look at the log.
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(e),
                    Err(_) => {
                        let (_, events) = self.load(run_id).await?;
                        return Ok((RunState::fold(&events), false));
                    }
                }
            }
            let (_, events) = self.load(run_id).await?;
            let state = RunState::fold(&events);
            let waits = state.nodes.values().any(|n| {
                matches!(
                    n.status,
                    events::NodeStatus::AwaitingApproval | events::NodeStatus::Blocked
                )
            });
            let lease = self.log.lease();
            let now = tokio::time::Instant::now();
            // Nobody else drives it (a log of its own), it is over, or another replica has
            // parked it since `after`.
            if state.finished.is_some()
                || (lease.is_none() && !self.live.contains_key(run_id))
                || (waits && state.seq > after)
                || now >= deadline
            {
                let parked = waits && state.finished.is_none();
                return Ok((state, parked));
            }
            // Driven elsewhere, or about to be taken over: look again a few times per lease.
            let look_again = match lease {
                Some(lease) => deadline.min(now + lease / 3),
                None => deadline,
            };
            let _ = tokio::time::timeout_at(look_again, ended.changed()).await;
        }
    }

    /// The run's state once it has finished, or as it is when `timeout` passes first.
    pub async fn wait_finished(
        &self,
        run_id: &str,
        timeout: std::time::Duration,
    ) -> Result<(RunRecord, Vec<events::Stamped>, RunState), RunError> {
        let mut ended = self.ended.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            ended.borrow_and_update();
            // Whether it is driven here, before its events are read: a run that ends between
            // the two is then seen as driven, and its end wakes the wait below, instead of
            // its last-but-one state being answered as if nobody drove it.
            let driven = self.live.contains_key(run_id);
            let (record, events) = self.load(run_id).await?;
            let state = RunState::fold(&events);
            // With a shared log another replica may drive it (or take it over): look again
            // a few times per lease.
            let shared = self.log.lease();
            if state.finished.is_some() || (!driven && shared.is_none()) {
                return Ok((record, events, state));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok((record, events, state));
            }
            let look_again = match shared {
                Some(lease) if !driven => deadline.min(now + lease / 3),
                _ => deadline,
            };
            let _ = tokio::time::timeout_at(look_again, ended.changed()).await;
        }
    }
}
