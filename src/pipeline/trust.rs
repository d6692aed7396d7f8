//! Trust: classify the call (read/write/long) by its upstream's tier, refuse what the tier does
//! not allow, and set the per-class timeout the forward step applies.

use super::{
    Call, CallFuture, Exposed, Op,
    step::{CallService, Step, done},
};
use crate::{
    pipeline::CallError,
    policy::trust::{self, CallClass},
};

/// Trust: classify by the upstream's tier and refuse what it does not allow.
#[derive(Debug, Clone)]
pub struct Trust;

impl Step for Trust {
    fn run<S: CallService>(&self, inner: &mut S, mut call: Call) -> CallFuture {
        match classify(&call) {
            Ok(class) => {
                if let Some(t) = &call.target {
                    call.timeout = Some(trust::timeout(&t.upstream.spec().tier, class));
                }
                call.class = Some(class);
                call.retry_safe = retry_safe(&call, class);
                inner.call(call)
            }
            Err(e) => done(Err(e)),
        }
    }
}

fn retry_safe(call: &Call, class: CallClass) -> bool {
    if class == CallClass::Read {
        return true;
    }
    let (Some(target), Op::CallTool(p)) = (&call.target, &call.op) else {
        return false;
    };
    let up = &target.upstream;
    let lists = up.lists();
    up.spec().tier.trust_annotations
        && lists
            .tools
            .iter()
            .find(|t| t.name == p.name)
            .and_then(|t| t.annotations.as_ref())
            .and_then(|a| a.idempotent_hint)
            == Some(true)
}

fn classify(call: &Call) -> Result<CallClass, CallError> {
    let (Some(target), Op::CallTool(p)) = (&call.target, &call.op) else {
        // Prompts, resources and completions read.
        return Ok(CallClass::Read);
    };
    let up = &target.upstream;
    let spec = up.spec();
    let lists = up.lists();
    let tool = lists.tools.iter().find(|t| t.name == p.name);
    trust::decide(&spec.tier, spec.declared(), tool, &p.name).map_err(|refusal| {
        CallError::TierRefused {
            tool: match &target.exposed {
                Exposed::Tool(n) => n.clone(),
                _ => p.name.to_string(),
            },
            tier: spec.tier.name.clone(),
            refusal,
        }
    })
}
