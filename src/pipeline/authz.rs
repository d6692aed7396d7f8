//! Authz: the caller's roles must allow the exposed name. A refusal is indistinguishable from
//! an unknown name (same error, suggestions only among what the caller may use).

use std::sync::Arc;

use super::{
    Call, CallFuture, Exposed, Op,
    resolve::suggest as unknown,
    step::{CallService, Step, done},
};
use crate::{
    names::{APPROVE_TOOL, shown},
    pipeline::CallError,
    upstream::pool::Pool,
};

/// Authz: the caller's roles must allow the exposed name.
#[derive(Debug, Clone)]
pub struct Authz {
    /// For "did you mean" among the names the caller may see.
    pub pool: Arc<Pool>,
}

impl Step for Authz {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        match check(&self.pool, &call) {
            Ok(()) => inner.call(call),
            Err(e) => {
                tracing::info!(identity = %call.identity.name, "refused: {e} (not allowed by the caller's roles)");
                done(Err(e))
            }
        }
    }
}

pub(super) fn check(pool: &Pool, call: &Call) -> Result<(), CallError> {
    hidden(pool, call).map_err(|as_unknown| CallError::NotAuthorized {
        // A task of a tool the caller may no longer use is, to it, no task at all.
        shown: Box::new(match call.op {
            Op::Task(_) => CallError::UnknownTask,
            _ => as_unknown,
        }),
    })
}

fn arguments(op: &Op) -> Option<&rmcp::model::JsonObject> {
    match op {
        Op::CallTool(p) => p.arguments.as_ref(),
        _ => None,
    }
}

/// The answer a caller gets for something it may not use: what it would get if it did not exist.
fn hidden(pool: &Pool, call: &Call) -> Result<(), CallError> {
    let access = &call.identity.access;
    let Some(target) = &call.target else {
        return Ok(());
    };
    // The gateway's own tools have no tier; role globs alone decide.
    let reachable = target.route().is_none_or(|r| access.tier(r.spec.tier.rank));
    match &target.exposed {
        // A peer gateway decides the plans it holds for its callers (each bound to the caller
        // it claimed), whatever its roles list; it is never shown the tool.
        Exposed::Tool(name)
            if access.is_peer() && target.upstream().is_none() && name == APPROVE_TOOL =>
        {
            Ok(())
        }
        Exposed::Tool(name) if !reachable => Err(unknown(pool, access, name, arguments(&call.op))),
        Exposed::Prompt(name) if !reachable => Err(CallError::UnknownPrompt { name: shown(name) }),
        Exposed::Resource(uri) if !reachable => Err(CallError::UnknownResource { uri: shown(uri) }),
        Exposed::Tool(name)
            if !access.tool(name)
                || (target.upstream().is_none() && !pool.visible_tool(access, name)) =>
        {
            Err(unknown(pool, access, name, arguments(&call.op)))
        }
        Exposed::Prompt(name) if !access.prompt(name) => {
            Err(CallError::UnknownPrompt { name: shown(name) })
        }
        Exposed::Resource(uri) if !access.resource(uri) => {
            Err(CallError::UnknownResource { uri: shown(uri) })
        }
        _ => Ok(()),
    }
}
