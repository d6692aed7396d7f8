//! Which replica drives which run, when several share the run log: resuming the runs nobody
//! drives (at start, and on every lease tick), renewing this replica's leases, and stopping
//! the runs whose lease it lost. With a log of one process every run is this process'.

use std::sync::Arc;

use super::{Engine, log};

impl Engine {
    /// Resumes every unfinished run in the log that no other replica drives (at start, and
    /// with a shared log on every lease tick). A run whose flow no longer loads stays as it is,
    /// reported.
    pub async fn resume_all(self: &Arc<Self>) {
        let ids = match self.log.claimable().await {
            Ok(ids) => ids,
            Err(e) => return tracing::warn!("cannot read unfinished flow runs: {e}"),
        };
        for id in ids {
            if self.live.contains_key(&id) {
                continue;
            }
            match self.log.claim(&id).await {
                Ok(log::Claimed::Yes { from }) => {
                    if let Some(from) = from {
                        self.metrics.lease_takeovers.inc();
                        tracing::warn!(run = %id, from = %from, "taking over flow run: the lease of the replica that drove it ran out");
                    }
                    if let Err(e) = self.resume(&id).await {
                        tracing::warn!(run = %id, "flow run not resumed: {e}");
                        let _ = self.log.release(&id).await;
                    }
                }
                Ok(log::Claimed::No) => {}
                Err(e) => tracing::warn!(run = %id, "cannot claim flow run: {e}"),
            }
        }
    }

    /// With a log several replicas share: renews this replica's leases a few times per lease,
    /// stops driving runs whose lease it lost, and takes over runs whose lease ran out.
    pub fn start_leases(self: &Arc<Self>) {
        let Some(lease) = self.log.lease() else {
            return;
        };
        let (weak, stop) = (Arc::downgrade(self), self.stop.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(lease / 3);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.cancelled() => return,
                }
                let Some(engine) = weak.upgrade() else {
                    return;
                };
                engine.renew_leases().await;
                engine.resume_all().await;
            }
        });
    }

    async fn renew_leases(&self) {
        let held: Vec<String> = self.live.iter().map(|e| e.key().clone()).collect();
        match self.log.renew(&held).await {
            Ok(lost) => {
                for id in lost {
                    tracing::warn!(run = %id, "lost the lease on a flow run (another replica drives it now): stopping here");
                    if let Some(live) = self.live.get(&id) {
                        live.stop.cancel();
                    }
                }
            }
            Err(e) => tracing::warn!("cannot renew flow run leases: {e}"),
        }
    }
}
