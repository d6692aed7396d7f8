//! Trust: classify the call (read/write/long) by its upstream's tier, refuse what the tier does
//! not allow, and set the per-class timeout the forward step applies.

use crate::pipeline::Route;

use super::{
    Call, CallFuture, Exposed, Op, TargetKind,
    step::{CallService, Step, done},
};
use crate::{
    pipeline::CallError,
    pipeline::Classified,
    policy::trust::{self, CallClass},
    upstream::Upstream,
};

/// Trust: classify by the upstream's tier and refuse what it does not allow.
#[derive(Debug, Clone)]
pub struct Trust;

impl Step for Trust {
    fn run<S: CallService>(&self, inner: &mut S, mut call: Call) -> CallFuture {
        let decided = match call.target.as_ref() {
            // Resolve ran in `observe`; an unresolved call has nothing to classify.
            None => return inner.call(call),
            Some(t) => match &t.kind {
                TargetKind::Gateway(tool) => {
                    let class = tool.class();
                    Ok(Classified {
                        class,
                        timeout: None,
                        retry_safe: class == CallClass::Read,
                        approval: None,
                    })
                }
                TargetKind::Upstream(route) => decide(route, &t.exposed, &call.op),
            },
        };
        match decided {
            Ok(d) => {
                call.decided.classify(d);
                inner.call(call)
            }
            Err(e) => done(Err(e)),
        }
    }
}

/// The tier's decision on a call to `route` (also used when an approved plan re-enters).
pub(super) fn decide(route: &Route, exposed: &Exposed, op: &Op) -> Result<Classified, CallError> {
    let (up, spec) = (&route.upstream, &route.spec);
    let Op::CallTool(p) = op else {
        // Prompts, resources and completions read.
        return Ok(Classified {
            class: CallClass::Read,
            timeout: Some(trust::timeout(&spec.tier, CallClass::Read)),
            retry_safe: true,
            approval: None,
        });
    };
    let tool = route.lists.tool(&p.name);
    let class = trust::decide(&spec.tier, spec.declared(), tool, &p.name).map_err(|refusal| {
        CallError::TierRefused {
            tool: match exposed {
                Exposed::Tool(n) => n.clone(),
                _ => p.name.to_string(),
            },
            tier: spec.tier.name.clone(),
            refusal,
            upstream: up.name().to_owned(),
            upstream_tool: p.name.to_string(),
        }
    })?;
    let idempotent = tool
        .and_then(|t| t.annotations.as_ref())
        .and_then(|a| a.idempotent_hint)
        == Some(true);
    Ok(Classified {
        class,
        timeout: Some(trust::timeout(&spec.tier, class)),
        retry_safe: class == CallClass::Read || (spec.tier.trust_annotations && idempotent),
        approval: trust::approval_needed(&spec.tier, spec.tool_policy(&p.name).approval, class),
    })
}

/// Whether a call of the exposed tool `exposed` would be safe to repeat, and the upstream that
/// serves it: what a flow needs to know of a node before (re-)driving it. `None` when no ready
/// upstream serves the name or its tier refuses it.
pub fn classify(
    pool: &crate::upstream::pool::Pool,
    exposed: &str,
) -> Option<(bool, std::sync::Arc<Upstream>)> {
    let catalog = pool.catalog();
    let route = catalog.tool(exposed)?;
    let up = catalog.upstream(route.member()?)?.clone();
    let op = Op::CallTool(rmcp::model::CallToolRequestParams::new(route.name.clone()));
    let d = decide(
        &Route::of(up.clone()),
        &Exposed::Tool(exposed.to_owned()),
        &op,
    )
    .ok()?;
    Some((d.retry_safe, up))
}

/// What the tier does with a call of tool `exposed` (for `fedgate tools`): `read`, `long-running`, `write`,
/// `write, needs approval`, `write refused` — the tier's verdict, not the server's annotation.
/// `None` for names no upstream serves (the gateway's own tools).
pub fn verdict(pool: &crate::upstream::pool::Pool, exposed: &str) -> Option<&'static str> {
    let catalog = pool.catalog();
    let route = catalog.tool(exposed)?;
    let up = catalog.upstream(route.member()?)?.clone();
    let op = Op::CallTool(rmcp::model::CallToolRequestParams::new(route.name.clone()));
    Some(
        match decide(&Route::of(up), &Exposed::Tool(exposed.to_owned()), &op) {
            Err(_) => "write refused",
            Ok(d) if d.class == CallClass::Read => "read",
            Ok(d) if d.class == CallClass::Long => "long-running",
            Ok(d) if d.approval.is_some() => "write, needs approval",
            Ok(_) => "write",
        },
    )
}
