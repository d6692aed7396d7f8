//! Resolve: exposed name or URI → upstream, with the call rewritten to the upstream's own name.
//! It runs once per call, first (in `observe`, which records the route it found); every later
//! step reads the route from the call.

use rmcp::model::Reference;

use super::{Call, Exposed, Op, OwnTools, Target, TargetKind};
use crate::{
    names::{CALL_TOOL, FIND_TOOLS, OWN_NAMESPACE, shown},
    pipeline::CallError,
    router::catalog::Owner,
    upstream::pool::Pool,
};

/// How many similar names an unknown-tool error suggests.
pub(super) const CLOSEST_NAMES: usize = 3;

/// The route of a call, with the call rewritten to the upstream's own name.
/// A tool no catalog of the caller names may be theirs once they connect to the upstream whose
/// namespace it falls in (`personal`, see [`super::personal`]).
pub(super) fn resolve(
    pool: &Pool,
    own: &OwnTools,
    personal: Option<&(super::personal::Personal, super::reentry::Reentry)>,
    call: &mut Call,
) -> Result<Target, CallError> {
    let catalog = pool.catalog_for(&call.identity);
    unwrap_call_tool(own, &mut call.op);
    let access = &call.identity.access;
    let (idx, exposed) = match &mut call.op {
        Op::CallTool(p) => {
            let Some(route) = catalog.tool(&p.name) else {
                if let Some((personal, reentry)) = personal
                    && let Some(first) = personal.connect_first(reentry, &call.identity, &p.name)
                {
                    return Ok(first);
                }
                return Err(unknown_tool(pool, access, &p.name, p.arguments.as_ref()));
            };
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
        kind: TargetKind::Upstream(super::Route {
            spec: upstream.spec(),
            lists: pool.lists_for(&upstream, &call.identity),
            upstream,
        }),
        exposed,
    })
}

/// `fedgate__call_tool {name, arguments}` becomes the call it names, so the named tool meets
/// every policy with its own schema; a malformed one stays, for its own schema to refuse.
fn unwrap_call_tool(own: &OwnTools, op: &mut Op) {
    let Op::CallTool(p) = op else { return };
    if p.name != CALL_TOOL || own.get(CALL_TOOL).is_none() {
        return;
    }
    let Some(args) = &p.arguments else { return };
    let Some(serde_json::Value::String(name)) = args.get("name") else {
        return;
    };
    let inner = match args.get("arguments") {
        None => None,
        Some(serde_json::Value::Object(a)) => Some(a.clone()),
        Some(_) => return,
    };
    if args.len() > 1 + usize::from(args.contains_key("arguments")) || name == CALL_TOOL {
        return;
    }
    p.name = name.clone().into();
    p.arguments = inner;
}

/// Why a tool name has no route. A name in the namespace of an upstream that is down belongs to
/// that upstream, and the error says so, with its state — to callers whose roles allow the name
/// and reach the upstream's tier; anyone else learns nothing about what exists.
fn unknown_tool(
    pool: &Pool,
    access: &crate::policy::authz::Access,
    name: &str,
    args: Option<&rmcp::model::JsonObject>,
) -> CallError {
    if let Some(up) = pool.namespace_owner(name)
        && !up.listed()
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
    suggest(pool, access, name, args)
}

/// The unknown-tool refusal for `name`, with what the caller may have meant: the closest names
/// it may call (a tool of the same name in another namespace first), the reads among them as
/// recovery actions (with the caller's arguments when they fit and carry nothing that looks like
/// a secret: a suggestion is not scanned again), and an unknown upstream part
/// named as such. Authorization answers names the caller may not use with the same refusal.
pub(super) fn suggest(
    pool: &Pool,
    access: &crate::policy::authz::Access,
    name: &str,
    args: Option<&rmcp::model::JsonObject>,
) -> CallError {
    let catalog = pool.catalog();
    let sep = pool.separator();
    let closest = catalog.closest_tools(name, sep, CLOSEST_NAMES, |n| {
        super::visible(pool, access, n)
    });
    let args = args.filter(|a| {
        crate::guard::scan_arguments(
            &mut (*a).clone(),
            crate::guard::SecretAction::Audit,
            crate::guard::Rules::standard(),
        )
        .is_empty()
    });
    let mut recover: Vec<_> = closest
        .iter()
        .filter(|n| is_read(pool, n) || mistyped(name, n, sep))
        .map(|n| super::error::Recovery {
            tool: n.clone(),
            args: args
                .filter(|a| fits(catalog.tool_def(n), a))
                .cloned()
                .unwrap_or_default(),
        })
        .collect();
    // With tool search on, the tool may exist outside this session's list: search for it.
    if catalog.tool(FIND_TOOLS).is_some() && super::visible(pool, access, FIND_TOOLS) {
        let query = shown(name)
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if !query.is_empty() {
            let mut args = serde_json::Map::new();
            args.insert("query".into(), query.into());
            recover.push(super::error::Recovery {
                tool: FIND_TOOLS.into(),
                args,
            });
        }
    }
    let note = name.split_once(sep).and_then(|(head, _)| {
        if pool.upstream_named(head).is_some() || head == OWN_NAMESPACE {
            return None;
        }
        let mut known: Vec<String> = pool
            .upstreams()
            .iter()
            .map(|u| u.name().to_owned())
            .filter(|u| access.tool(&format!("{u}{sep}*")) || access.sees_all())
            .collect();
        known.sort();
        Some(format!(
            ": no upstream is named `{}` (upstreams: {})",
            shown(head),
            known.join(", ")
        ))
    });
    CallError::UnknownTool {
        name: shown(name),
        closest,
        recover,
        note,
    }
}

/// `candidate` is `name` mistyped: the same namespace and a few characters apart. The caller
/// was calling that tool anyway (a write still meets its approval), unlike a write elsewhere
/// that merely shares a word.
fn mistyped(name: &str, candidate: &str, sep: &str) -> bool {
    let (Some((a_ns, a)), Some((b_ns, b))) = (name.split_once(sep), candidate.split_once(sep))
    else {
        return false;
    };
    a_ns == b_ns && crate::names::edit_distance(a, b) <= a.chars().count().div_ceil(3)
}

/// The tool reads, at its upstream's tier: safe to suggest as a recovery action.
fn is_read(pool: &Pool, exposed: &str) -> bool {
    let catalog = pool.catalog();
    let Some(route) = catalog.tool(exposed) else {
        return false;
    };
    let Some(up) = route.member().and_then(|m| catalog.upstream(m)) else {
        return false;
    };
    let op = Op::CallTool(rmcp::model::CallToolRequestParams::new(route.name.clone()));
    super::trust::decide(
        &super::Route::of(up.clone()),
        &Exposed::Tool(exposed.to_owned()),
        &op,
    )
    .is_ok_and(|d| d.class == crate::policy::trust::CallClass::Read)
}

/// Whether `args` would do for `tool`: every key is a property of its schema and every
/// required property is given.
fn fits(tool: Option<&rmcp::model::Tool>, args: &rmcp::model::JsonObject) -> bool {
    let Some(schema) = tool.map(|t| &t.input_schema) else {
        return false;
    };
    let props = schema.get("properties").and_then(|p| p.as_object());
    let known = args
        .keys()
        .all(|k| props.is_some_and(|p| p.contains_key(k)));
    let required = schema
        .get("required")
        .and_then(|r| r.as_array())
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str())
        .all(|r| args.contains_key(r));
    known && required
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
