//! An approved plan on its way back in: the upstream it was made for as configured now, the
//! policy version it binds, and the frozen call rebuilt one level deeper under its caller —
//! sent through the whole stack from the top (`Reentry`), so every check in it (authz, views,
//! stage gate, tier, arguments, guardrails both ways and their hooks, limits, idempotency,
//! breakers, audit and metrics) decides on it as it stands when it runs.

use crate::pipeline::Route;
use std::sync::Arc;

use rmcp::model::CallToolRequestParams;

use super::super::{Call, Exposed, Op, Target, TargetKind};
use crate::{
    approval::PendingPlan,
    policy::pinning::fingerprint,
    stores::idempotency::META_KEY as IDEMPOTENCY_KEY,
    upstream::{Upstream, pool::Pool},
};

/// What a plan binds beside caller, tool and arguments: the upstream's policy for the tool
/// and the tool's definition (its schema and annotations decide class and safety).
pub(super) fn version(route: &Route, tool: &str) -> String {
    let def = route.lists.tool(tool).map(fingerprint).unwrap_or_default();
    format!(
        "{}:{}",
        route.spec.policy_version(tool),
        def.get(..24).unwrap_or(&def)
    )
}

/// The plan's upstream as configured now.
pub(super) fn current(pool: &Pool, plan: &PendingPlan) -> Option<Arc<Upstream>> {
    pool.upstreams()
        .iter()
        .find(|u| u.name() == plan.upstream)
        .cloned()
}

/// The approved call as the caller would have sent it: the exposed tool with the frozen
/// arguments (and idempotency key), under the caller's identity and session, one level
/// deeper, marked as running under `plan`. Not resolved: `observe` resolves it again, and
/// the approval step lets it through only if it still routes to the plan's upstream tool.
pub(super) fn reenter(mut call: Call, plan: &PendingPlan) -> Call {
    let mut params = CallToolRequestParams::new(plan.tool.clone());
    params.arguments = Some(plan.arguments.clone());
    call.op = Op::CallTool(params);
    call.meta.remove(IDEMPOTENCY_KEY);
    if let Some(key) = &plan.idempotency_key {
        call.meta.insert(IDEMPOTENCY_KEY.into(), key.clone());
    }
    call.target = None;
    call.decided = Default::default();
    call.decided.approve(plan.id.clone());
    call.depth = call.depth.saturating_add(1);
    call
}

/// Where the plan's call goes now, as `observe` would resolve it (for the envelope its answer
/// gets): its upstream as configured now, under the upstream's own tool name.
pub(super) fn routed(call: &Call, plan: &PendingPlan, up: Arc<Upstream>) -> (Call, Target) {
    let mut resolved = call.clone();
    resolved.op = Op::CallTool(CallToolRequestParams::new(plan.upstream_tool.clone()));
    let route = Route::of(up);
    let target = Target {
        owner: route.upstream.shared_name(),
        kind: TargetKind::Upstream(route),
        exposed: Exposed::Tool(plan.tool.clone()),
    };
    (resolved, target)
}

/// Whether a call re-entered under `plan` still routes to what the plan was made for.
pub(super) fn same_route(call: &Call, plan: &PendingPlan) -> bool {
    let Some(target) = &call.target else {
        return false;
    };
    let upstream = target.route().map(|r| r.upstream.name());
    let tool = match &call.op {
        Op::CallTool(p) => Some(p.name.as_ref()),
        _ => None,
    };
    upstream == Some(plan.upstream.as_str())
        && tool == Some(plan.upstream_tool.as_str())
        && target.exposed == Exposed::Tool(plan.tool.clone())
}
