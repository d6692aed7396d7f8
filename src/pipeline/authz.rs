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
    policy::authz::Access,
    router::catalog::Owner,
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
                || (target.upstream().is_none() && !visible(pool, access, name)) =>
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

/// Whether a caller with `access` may see the exposed tool `name` (its role globs, and the
/// trust tier of the upstream behind it): the one visibility decision `tools/list`, search,
/// stages, the admin API and this step share.
pub fn visible(pool: &Pool, access: &Access, name: &str) -> bool {
    access.tool(name) && {
        let catalog = pool.catalog();
        match catalog.tool(name).map(|r| r.owner) {
            // The gateway's own tools have no tier: role globs alone decide — and
            // `fedgate__approve` is there only for callers who have plans to approve.
            // A peer gateway sees the flows exported to it, nothing else of the gateway's.
            Some(Owner::Gateway) if access.is_peer() => catalog
                .tool_def(name)
                .is_some_and(crate::federation::export::is_exported),
            Some(Owner::Gateway) => name != APPROVE_TOOL || approves(pool, access),
            Some(Owner::Member(i)) => catalog
                .upstream(i)
                .is_some_and(|u| access.tier(u.spec().tier.rank)),
            // A tool of an upstream that acts as each person may be in its caller's own
            // catalog only: the roles and the upstream's tier decide as for any of its tools.
            None => pool
                .namespace_owner(name)
                .is_some_and(|u| u.per_user() && access.tier(u.spec().tier.rank)),
        }
    }
}

/// Whether a caller with `access`, standing where `standing` says in the workflows, may call
/// the exposed tool `name` now: visible to it, and allowed by its workspace's stage. What
/// lists, search, selection and suggestions offer.
pub fn may_call_now(
    pool: &Pool,
    access: &Access,
    standing: Option<&crate::policy::workflow::Standing>,
    name: &str,
) -> bool {
    visible(pool, access, name) && standing.is_none_or(|s| s.allows(name))
}

/// Whether `access` can use `fedgate__approve`: it reaches an upstream where some call needs
/// approval (a peer gateway may hold any call), or holds a role that approves some.
fn approves(pool: &Pool, access: &Access) -> bool {
    pool.upstreams().iter().any(|u| {
        let spec = u.spec();
        (access.tier(spec.tier.rank) && spec.may_hold_calls())
            || access.has_any_role(&spec.approver_roles())
    })
}
