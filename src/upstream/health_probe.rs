//! Whether a remote upstream (http, sse, peer) still answers. Its server may die or hang
//! without closing anything fedgate holds — no process exit to see, a session or a listen
//! stream that looks open — so it is asked every `health_interval_ms` (`ping` in the handshake
//! era, `server/discover` in the stateless era, which has no `ping`); two questions in a row
//! without an answer (a refused connection, a timeout) report the connection broken, and the
//! supervisor marks the upstream down (its tools leave the lists, calls are refused as
//! unavailable) and reconnects with backoff. Stdio children are watched by their process.

use std::{sync::Arc, time::Duration};

use rmcp::{
    RoleClient,
    model::{ClientRequest, DiscoverRequest, PingRequest},
    service::Peer,
};

use super::{Connection, DetectedEra, Upstream};

/// Unanswered pings in a row that mean the upstream is gone (one may be a blip).
const MISSES: u32 = 2;

/// Asks `peer` every `every` while `conn` lives; reports it broken when it stops answering.
pub(super) async fn watch(
    up: Arc<Upstream>,
    conn: Arc<Connection>,
    peer: Peer<RoleClient>,
    era: DetectedEra,
    every: Duration,
) {
    let question = || match era {
        DetectedEra::Handshake => ClientRequest::PingRequest(PingRequest::default()),
        DetectedEra::Stateless => ClientRequest::DiscoverRequest(DiscoverRequest::default()),
    };
    let mut missed = 0;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        // An answer of any kind, a JSON-RPC error included, shows it is there.
        let limit = every.min(up.spec().call_timeout);
        let why = match tokio::time::timeout(limit, peer.send_request(question())).await {
            Ok(Ok(_)) | Ok(Err(rmcp::ServiceError::McpError(_))) => {
                missed = 0;
                continue;
            }
            Ok(Err(rmcp::ServiceError::Cancelled { .. })) => return,
            Ok(Err(e)) => crate::error::plain(&e),
            Err(_) => format!("no answer to a health check within {limit:?}"),
        };
        missed += 1;
        if missed >= MISSES {
            conn.broken
                .report(format!("the upstream stopped answering ({why})"));
            return;
        }
    }
}
