//! Guard: secrets in a call's arguments are found before the call goes further in, and secrets
//! in its answer before it goes back out, under the upstream's guardrails (its tier's, with its
//! own overrides). `block` refuses with a plan naming the detector and the field, `redact`
//! masks the secret and says so in `_meta` and in the text, `audit` only records. After
//! `arguments` (a call that cannot run is refused for that first) and before `approval` (no one
//! is asked to approve a call that carries a secret, and a held plan keeps the masked
//! arguments).

use std::sync::Arc;

use rmcp::model::{ContentBlock, ServerResult};
use serde_json::{Value, json};

use super::{
    Call, CallError, CallFuture, Exposed, Op,
    step::{CallService, Step, done},
};
use crate::{
    guard::{self, Blocked, Direction, Finding, SecretAction},
    telemetry::metrics::Metrics,
};

/// Key of the guardrails' report in a result's `_meta`.
pub const META_KEY: &str = "io.fedgate/guardrails";

#[derive(Debug, Clone)]
pub struct Guard {
    pub metrics: Arc<Metrics>,
}

impl Step for Guard {
    fn run<S: CallService>(&self, inner: &mut S, mut call: Call) -> CallFuture {
        let Some(target) = call.target.as_ref() else {
            return inner.call(call);
        };
        // The gateway's own tools carry no upstream's data (a flow's nodes are guarded one by
        // one as they call their upstreams).
        let Some(up) = target.upstream() else {
            return inner.call(call);
        };
        let policy = up.spec().guardrails;
        let name = match &target.exposed {
            Exposed::Tool(n) | Exposed::Prompt(n) | Exposed::Resource(n) => n.clone(),
        };
        let upstream = up.name().to_owned();
        let mut found = Vec::new();
        if let Op::CallTool(p) = &mut call.op
            && let Some(args) = p.arguments.as_mut()
        {
            found = guard::scan_arguments(args, policy.arguments);
        }
        count(&self.metrics, &found);
        if let Some(first) = found.iter().find(|f| f.action == SecretAction::Block) {
            return done(Err(CallError::Guarded(Box::new(Blocked {
                finding: first.clone(),
                tool: name,
                upstream,
            }))));
        }
        let metrics = self.metrics.clone();
        let fut = inner.call(call);
        Box::pin(async move {
            let mut result = fut.await?;
            let mut back = guard::scan_result(&mut result, policy.results);
            count(&metrics, &back);
            if let Some(first) = back.iter().find(|f| f.action == SecretAction::Block) {
                return Err(CallError::Guarded(Box::new(Blocked {
                    finding: first.clone(),
                    tool: name,
                    upstream,
                })));
            }
            found.append(&mut back);
            report(&mut result, &found);
            Ok(result)
        })
    }
}

/// What the guardrails found in a call (for its audit record): the report in a result's
/// `_meta`, or the finding that blocked it.
pub fn findings(result: &Result<ServerResult, CallError>) -> Option<Value> {
    let meta = match result {
        Err(CallError::Guarded(b)) => {
            return Some(json!([entry(&b.finding)]));
        }
        Err(_) => return None,
        Ok(ServerResult::CallToolResult(r)) => r.meta.as_ref(),
        Ok(ServerResult::ReadResourceResult(r)) => r.meta.as_ref(),
        Ok(ServerResult::GetPromptResult(r)) => r.meta.as_ref(),
        Ok(_) => None,
    };
    meta?.get(META_KEY)?.get("secrets").cloned()
}

fn entry(f: &Finding) -> Value {
    json!({"detector": f.detector, "field": f.field, "direction": f.direction, "action": f.action})
}

fn count(metrics: &Metrics, found: &[Finding]) {
    for f in found {
        metrics.guard_detection(f.detector, f.action.as_str(), f.direction.as_str());
    }
}

/// Says in the result's `_meta` what was found (every action), and in its text what was
/// masked, so a model reading only the text knows a value is missing.
fn report(result: &mut ServerResult, found: &[Finding]) {
    if found.is_empty() {
        return;
    }
    let entries: Vec<Value> = found.iter().map(entry).collect();
    let masked: Vec<&Finding> = found
        .iter()
        .filter(|f| f.action == SecretAction::Redact)
        .collect();
    let meta = match result {
        ServerResult::CallToolResult(r) => {
            if !masked.is_empty() {
                r.content.push(ContentBlock::text(masked_text(&masked)));
            }
            &mut r.meta
        }
        ServerResult::ReadResourceResult(r) => &mut r.meta,
        ServerResult::GetPromptResult(r) => &mut r.meta,
        _ => return,
    };
    meta.get_or_insert_with(Default::default)
        .insert(META_KEY.into(), json!({ "secrets": entries }));
}

fn masked_text(masked: &[&Finding]) -> String {
    let list = |d: Direction| {
        masked
            .iter()
            .filter(|f| f.direction == d)
            .map(|f| format!("{} at {}", f.detector, f.field))
            .collect::<Vec<_>>()
    };
    let mut parts = Vec::new();
    let sent = list(Direction::Arguments);
    if !sent.is_empty() {
        parts.push(format!(
            "masked in the arguments before they reached the upstream: {}",
            sent.join(", ")
        ));
    }
    let back = list(Direction::Result);
    if !back.is_empty() {
        parts.push(format!("masked in this answer: {}", back.join(", ")));
    }
    format!(
        "[fedgate guardrails] what looked like secrets was replaced by [REDACTED:<detector>]; {}",
        parts.join("; ")
    )
}
