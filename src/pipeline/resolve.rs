//! Resolve: exposed name or URI → upstream, with the call rewritten to the upstream's own name.

use std::sync::Arc;

use rmcp::model::Reference;

use super::{
    Call, CallFuture, Exposed, Op, Target,
    step::{CallService, Step, done},
};
use crate::{pipeline::CallError, upstream::pool::Pool};

/// How many similar names an unknown-tool error suggests.
pub(super) const CLOSEST_NAMES: usize = 3;

/// Resolve: exposed name or URI → upstream, with the call rewritten to the upstream's own name.
#[derive(Debug, Clone)]
pub struct Resolve;

impl Step for Resolve {
    fn run<S: CallService>(&self, pool: &Arc<Pool>, inner: &mut S, mut call: Call) -> CallFuture {
        match resolve(pool, &mut call) {
            Ok(target) => {
                call.target = Some(target);
                inner.call(call)
            }
            Err(e) => done(Err(e)),
        }
    }
}

fn resolve(pool: &Pool, call: &mut Call) -> Result<Target, CallError> {
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
        upstream_name: upstream.name().to_owned(),
        upstream,
        exposed,
    })
}

fn resource(catalog: &crate::router::catalog::Catalog, uri: &str) -> Result<usize, CallError> {
    catalog
        .resource(uri)
        .ok_or_else(|| CallError::UnknownResource {
            uri: uri.to_owned(),
        })
}
