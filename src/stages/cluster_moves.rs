//! Moves across replicas (`[cluster] redis`): each replica publishes the moves it makes on
//! the `stage-moves` channel and listens to the others', so every session working in a moved
//! workspace hears `list_changed`, whichever replica it is connected to.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::{Bound, Stages};

const CHANNEL: &str = "stage-moves";
/// Waits between attempts to listen again after the connection dropped.
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

#[derive(Debug, Serialize, Deserialize)]
struct Moved {
    /// The replica that made the move (it told its own sessions already).
    origin: String,
    workflow: String,
    workspace: String,
}

impl Stages {
    /// Tells the other replicas of a move (in the background: the move is made already).
    pub(super) fn publish(&self, b: &Bound) {
        let Some(redis) = self.redis.clone() else {
            return;
        };
        let m = Moved {
            origin: self.origin.clone(),
            workflow: b.workflow.clone(),
            workspace: b.workspace.clone(),
        };
        let Ok(payload) = serde_json::to_string(&m) else {
            return;
        };
        tokio::spawn(async move {
            // An outage is logged once by `run`; those replicas' sessions see the new stage
            // on their next list.
            let _ = redis.publish(CHANNEL, payload).await;
        });
    }

    /// Listens to the other replicas' moves until `stop`, reconnecting with backoff.
    pub fn listen_to_replicas(self: &Arc<Self>, stop: CancellationToken) {
        let Some(redis) = self.redis.clone() else {
            return;
        };
        let stages = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut wait = RETRY_MIN;
            let mut failing = false;
            loop {
                match redis.subscribe(CHANNEL).await {
                    Ok(mut messages) => {
                        tracing::info!(
                            "listening to other replicas' stage moves{}",
                            if failing { " again" } else { "" }
                        );
                        failing = false;
                        wait = RETRY_MIN;
                        loop {
                            let msg = tokio::select! {
                                m = messages.next() => m,
                                _ = stop.cancelled() => return,
                            };
                            let Some(msg) = msg else { break };
                            let Some(stages) = stages.upgrade() else {
                                return;
                            };
                            let Ok(m) = msg.get_payload::<String>() else {
                                continue;
                            };
                            if let Ok(m) = serde_json::from_str::<Moved>(&m)
                                && m.origin != stages.origin
                            {
                                let _ = stages.moved.send(Bound {
                                    workflow: m.workflow,
                                    workspace: m.workspace,
                                });
                            }
                        }
                    }
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(
                            "cannot listen to other replicas' stage moves ({e}); retrying"
                        );
                    }
                    Err(_) => {}
                }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.cancelled() => return,
                }
                wait = (wait * 2).min(RETRY_MAX);
            }
        });
    }
}
