//! Resolve: exposed name or URI → upstream, with the call rewritten to the upstream's own name.
//! It runs once per call, first (in `observe`, which records the route it found); every later
//! step reads the route from the call.

use rmcp::model::Reference;

use super::{Call, Exposed, Op, Target};
use crate::{pipeline::CallError, upstream::pool::Pool};

/// How many similar names an unknown-tool error suggests.
pub(super) const CLOSEST_NAMES: usize = 3;

/// The route of a call, with the call rewritten to the upstream's own name.
pub(super) fn resolve(pool: &Pool, call: &mut Call) -> Result<Target, CallError> {
    let catalog = pool.catalog();
    let access = &call.identity.access;
    let (idx, exposed) = match &mut call.op {
        Op::CallTool(p) => {
            let route = catalog
                .tool(&p.name)
                .ok_or_else(|| CallError::UnknownTool {
                    name: p.name.to_string(),
                    closest: catalog
                        .closest_tools(&p.name, CLOSEST_NAMES, |n| pool.visible_tool(access, n)),
                })?;
            let exposed = Exposed::Tool(
                std::mem::replace(&mut p.name, route.name.clone().into()).into_owned(),
            );
            (route.upstream, exposed)
        }
        Op::GetPrompt(p) => {
            let route = catalog
                .prompt(&p.name)
                .ok_or_else(|| CallError::UnknownPrompt {
                    name: p.name.clone(),
                })?;
            let exposed = Exposed::Prompt(std::mem::replace(&mut p.name, route.name.clone()));
            (route.upstream, exposed)
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
        Op::Complete(p) => match &mut p.r#ref {
            Reference::Prompt(r) => {
                let route = catalog
                    .prompt(&r.name)
                    .ok_or_else(|| CallError::UnknownPrompt {
                        name: r.name.clone(),
                    })?;
                let exposed = Exposed::Prompt(std::mem::replace(&mut r.name, route.name.clone()));
                (route.upstream, exposed)
            }
            Reference::Resource(r) => {
                let idx = catalog
                    .template(&r.uri)
                    .ok_or_else(|| CallError::UnknownResource { uri: r.uri.clone() })?;
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
        upstream_name: upstream.shared_name(),
        upstream,
        exposed,
    })
}

fn resource(catalog: &crate::upstream::Catalog, uri: &str) -> Result<usize, CallError> {
    catalog
        .resource(uri)
        .ok_or_else(|| CallError::UnknownResource {
            uri: uri.to_owned(),
        })
}
