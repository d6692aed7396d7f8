//! Hop guard: a call that re-enters the inner stack (a flow node, an approved plan, later a
//! peer's request) is one level deeper than the call that made it; past the limit it is
//! refused before any policy or upstream sees it, so no chain of calls can recurse forever.

use super::{
    Call, CallError, CallFuture,
    step::{CallService, Step, done},
};

/// Deepest nesting of calls within one client call.
pub(super) const MAX_CALL_DEPTH: u8 = 8;

/// Hop guard: refuse calls nested deeper than [`MAX_CALL_DEPTH`].
#[derive(Debug, Clone)]
pub struct HopGuard;

impl Step for HopGuard {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        if call.depth > MAX_CALL_DEPTH {
            return done(Err(CallError::TooDeep {
                depth: call.depth,
                max: MAX_CALL_DEPTH,
            }));
        }
        inner.call(call)
    }
}
