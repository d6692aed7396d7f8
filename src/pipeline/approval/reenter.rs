//! An approved plan on its way back in: the upstream it was made for as configured now, the
//! policy version it binds, and the frozen call rebuilt one level deeper under its caller.

use crate::pipeline::Route;
use std::sync::Arc;

use rmcp::model::CallToolRequestParams;

use super::super::{Call, CallError, Exposed, Op, Target, TargetKind, authz, trust};
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

/// The approved call: the frozen tool and arguments (and idempotency key), to the upstream as
/// it is now, under the caller's identity, one level deeper; authorization and the tier decide
/// again.
pub(super) fn reenter(
    mut call: Call,
    plan: &PendingPlan,
    up: Arc<Upstream>,
    pool: &Pool,
) -> Result<Call, CallError> {
    let mut params = CallToolRequestParams::new(plan.upstream_tool.clone());
    params.arguments = Some(plan.arguments.clone());
    call.op = Op::CallTool(params);
    call.meta.remove(IDEMPOTENCY_KEY);
    if let Some(key) = &plan.idempotency_key {
        call.meta.insert(IDEMPOTENCY_KEY.into(), key.clone());
    }
    let exposed = Exposed::Tool(plan.tool.clone());
    let route = Route::of(up);
    call.target = Some(Target {
        owner: route.upstream.shared_name(),
        kind: TargetKind::Upstream(route.clone()),
        exposed: exposed.clone(),
    });
    authz::check(pool, &call)?;
    let d = trust::decide(&route, &exposed, &call.op)?;
    call.decided.classify(d);
    call.decided.approve(plan.id.clone());
    call.depth = call.depth.saturating_add(1);
    Ok(call)
}
