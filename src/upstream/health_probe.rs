//! Whether a handshake-era remote upstream (http, sse, peer) still answers. Its server may die
//! without closing anything fedgate holds — no process exit to see, a session that looks open —
//! so it is pinged every `health_interval_ms`; two pings in a row without an answer (a refused
//! connection, a timeout) report the connection broken, and the supervisor marks the upstream
//! down (its tools leave the lists, calls are refused as unavailable) and reconnects with
//! backoff. Stateless-era upstreams are watched by their `subscriptions/listen` stream instead;
//! stdio children by their process.

use std::{sync::Arc, time::Duration};

use rmcp::{
    RoleClient,
    model::{ClientRequest, PingRequest},
    service::Peer,
};

use super::{Connection, Upstream};

/// Unanswered pings in a row that mean the upstream is gone (one may be a blip).
const MISSES: u32 = 2;

/// Pings `peer` every `every` while `conn` lives; reports it broken when it stops answering.
pub(super) async fn watch(
    up: Arc<Upstream>,
    conn: Arc<Connection>,
    peer: Peer<RoleClient>,
    every: Duration,
) {
    let mut missed = 0;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        // An answer of any kind, a JSON-RPC error included, shows it is there.
        let limit = every.min(up.spec().call_timeout);
        let why = match tokio::time::timeout(
            limit,
            peer.send_request(ClientRequest::PingRequest(PingRequest::default())),
        )
        .await
        {
            Ok(Ok(_)) | Ok(Err(rmcp::ServiceError::McpError(_))) => {
                missed = 0;
                continue;
            }
            Ok(Err(rmcp::ServiceError::Cancelled { .. })) => return,
            Ok(Err(e)) => crate::error::plain(&e),
            Err(_) => format!("no answer to a ping within {limit:?}"),
        };
        missed += 1;
        if missed >= MISSES {
            conn.broken
                .report(format!("the upstream stopped answering ({why})"));
            return;
        }
    }
}
