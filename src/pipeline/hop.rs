//! Hop guard: a call that re-enters the inner stack (a flow node, an approved plan, later a
//! peer's request) is one level deeper than the call that made it; past the limit it is
//! refused before any policy or upstream sees it, so no chain of calls can recurse forever.
//! Across gateways the same holds by the path of gateway ids a federated request carries.

use super::{
    Call, CallError, CallFuture,
    step::{CallService, Step, done},
};

/// Deepest nesting of calls within one client call.
pub(super) const MAX_CALL_DEPTH: u8 = 8;

/// Hop guard: refuse calls nested deeper than `MAX_CALL_DEPTH`, and federated requests
/// that already passed this gateway or went as far as `max_hops` (see `crate::federation::hops`).
#[derive(Debug, Clone)]
pub struct HopGuard {
    /// This gateway's id in request paths.
    pub id: std::sync::Arc<str>,
    pub max_hops: usize,
}

impl Step for HopGuard {
    fn run<S: CallService>(&self, inner: &mut S, mut call: Call) -> CallFuture {
        if call.depth > MAX_CALL_DEPTH {
            return done(Err(CallError::TooDeep {
                depth: call.depth,
                max: MAX_CALL_DEPTH,
            }));
        }
        // A call from outside enters this gateway once; calls it makes itself (flow nodes,
        // approved plans) carry the path it already has. Only a peer gateway's path counts: a
        // client's own `io.fedgate/path` claims nothing (peers are mTLS identities marked
        // `peer = true`; no other upstream kind carries paths), so it cannot get its own calls
        // refused as loops, nor stretch the path of what this gateway forwards.
        if call.depth == 0 {
            if !call.identity.access.is_peer() {
                call.meta.remove(crate::federation::hops::PATH_KEY);
            }
            if let Err(refused) =
                crate::federation::hops::enter(&mut call.meta, &self.id, self.max_hops)
            {
                return done(Err(CallError::Hop(refused)));
            }
        }
        inner.call(call)
    }
}
