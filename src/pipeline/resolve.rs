//! Resolve: exposed name or URI → upstream, with the call rewritten to the upstream's own name.
//! It runs once per call, first (in `observe`, which records the route it found); every later
//! step reads the route from the call.

use rmcp::model::Reference;

use super::{Call, Exposed, Op, OwnTools, Target, TargetKind};
use crate::{
    names::{OWN_NAMESPACE, shown},
    pipeline::CallError,
    router::catalog::Owner,
    upstream::pool::Pool,
};

/// How many similar names an unknown-tool error suggests.
pub(super) const CLOSEST_NAMES: usize = 3;

/// The route of a call, with the call rewritten to the upstream's own name.
pub(super) fn resolve(pool: &Pool, own: &OwnTools, call: &mut Call) -> Result<Target, CallError> {
    let catalog = pool.catalog();
    let access = &call.identity.access;
    let (idx, exposed) = match &mut call.op {
        Op::CallTool(p) => {
            let route = catalog
                .tool(&p.name)
                .ok_or_else(|| unknown_tool(pool, &catalog, access, &p.name))?;
            let exposed = Exposed::Tool(
                std::mem::replace(&mut p.name, route.name.clone().into()).into_owned(),
            );
            let idx = match route.owner {
                Owner::Member(idx) => idx,
                Owner::Gateway => {
                    let tool = own.get(&route.name).ok_or_else(|| CallError::Internal {
                        detail: format!("own tool `{}` has no handler", route.name),
                    })?;
                    return Ok(Target {
                        kind: TargetKind::Gateway(tool),
                        owner: OWN_NAMESPACE.into(),
                        exposed,
                    });
                }
            };
            (idx, exposed)
        }
        Op::GetPrompt(p) => {
            let route = catalog
                .prompt(&p.name)
                .ok_or_else(|| CallError::UnknownPrompt {
                    name: shown(&p.name),
                })?;
            let exposed = Exposed::Prompt(std::mem::replace(&mut p.name, route.name.clone()));
            (member(route)?, exposed)
        }
        Op::ReadResource(p) => (
            resource(&catalog, &p.uri)?,
            Exposed::Resource(p.uri.clone()),
        ),
        Op::Subscribe(p) => (
            resource(&catalog, &p.uri)?,
            Exposed::Resource(p.uri.clone()),
        ),
        Op::Unsubscribe(p) => (
            resource(&catalog, &p.uri)?,
            Exposed::Resource(p.uri.clone()),
        ),
        // A flow run's task: the flow's own tool answers it.
        Op::Task(t) if t.route.upstream == crate::config::flows::FLOWS_NAMESPACE => {
            let tool = own.get(&t.route.tool).ok_or(CallError::UnknownTask)?;
            return Ok(Target {
                kind: TargetKind::Gateway(tool),
                owner: OWN_NAMESPACE.into(),
                exposed: Exposed::Tool(t.route.tool.clone()),
            });
        }
        Op::Task(t) => {
            let Some(idx) = catalog.member_index(|u| u.name() == t.route.upstream) else {
                return Err(gone_upstream(pool, &t.route.upstream));
            };
            (idx, Exposed::Tool(t.route.tool.clone()))
        }
        Op::Complete(p) => match &mut p.r#ref {
            Reference::Prompt(r) => {
                let route = catalog
                    .prompt(&r.name)
                    .ok_or_else(|| CallError::UnknownPrompt {
                        name: shown(&r.name),
                    })?;
                let exposed = Exposed::Prompt(std::mem::replace(&mut r.name, route.name.clone()));
                (member(route)?, exposed)
            }
            Reference::Resource(r) => {
                let idx = catalog
                    .template(&r.uri)
                    .ok_or_else(|| CallError::UnknownResource { uri: shown(&r.uri) })?;
                (idx, Exposed::Resource(r.uri.clone()))
            }
            _ => {
                return Err(CallError::UnknownResource {
                    uri: "(unsupported completion reference)".into(),
                });
            }
        },
    };
    let upstream = catalog
        .upstream(idx)
        .cloned()
        .ok_or_else(|| CallError::UpstreamFailed {
            upstream: String::new(),
            detail: "route points at no upstream".into(),
        })?;
    Ok(Target {
        owner: upstream.shared_name(),
        kind: TargetKind::Upstream(upstream),
        exposed,
    })
}

/// Why a tool name has no route. A name in the namespace of an upstream that is down belongs to
/// that upstream, and the error says so, with its state — to callers whose roles allow the name
/// and reach the upstream's tier; anyone else learns nothing about what exists.
fn unknown_tool(
    pool: &Pool,
    catalog: &crate::upstream::Catalog,
    access: &crate::policy::authz::Access,
    name: &str,
) -> CallError {
    if let Some(up) = pool.namespace_owner(name)
        && up.connection().is_none()
        && access.tool(name)
        && access.tier(up.spec().tier.rank)
    {
        let s = up.status();
        return CallError::UpstreamUnavailable {
            upstream: up.name().to_owned(),
            phase: s.phase,
            detail: s.last_error,
        };
    }
    CallError::UnknownTool {
        name: shown(name),
        closest: catalog.closest_tools(name, CLOSEST_NAMES, |n| pool.visible_tool(access, n)),
    }
}

/// Why the upstream a task handle names has no route: it is down (with its state), or it is
/// no longer configured.
fn gone_upstream(pool: &Pool, name: &str) -> CallError {
    match pool.upstream_named(name) {
        Some(up) => {
            let s = up.status();
            CallError::UpstreamUnavailable {
                upstream: up.name().to_owned(),
                phase: s.phase,
                detail: s.last_error,
            }
        }
        None => CallError::UnknownTask,
    }
}

/// Prompts are only ever an upstream's.
fn member(route: &crate::router::catalog::Route) -> Result<usize, CallError> {
    route.member().ok_or_else(|| CallError::Internal {
        detail: format!("prompt `{}` routes to the gateway", route.name),
    })
}

fn resource(catalog: &crate::upstream::Catalog, uri: &str) -> Result<usize, CallError> {
    catalog
        .resource(uri)
        .ok_or_else(|| CallError::UnknownResource { uri: shown(uri) })
}
