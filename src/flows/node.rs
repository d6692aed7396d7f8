//! One node attempt: the node's tool called through the whole call stack (resolve, authz,
//! tier, arguments, approval, rate limits, idempotency, retry, breaker, audit), as the run's
//! caller and one level deeper. Flows are never a way around policy.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject, ServerResult};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::{
    envelope::META_KEY as PLAN_KEY,
    names::APPROVE_TOOL,
    pipeline::{Call, CallStack, Op, correlation_id},
    policy::{idempotency::META_KEY as IDEMPOTENCY_KEY, identity::Identity},
};

/// What one attempt came to.
#[derive(Debug)]
pub enum Attempt {
    Succeeded(Value),
    /// The tool answered with an error, or the call was refused; `transient` failures may be
    /// retried (the upstream did not answer in time, or was unavailable).
    Failed {
        error: String,
        plan: Option<Value>,
        transient: bool,
    },
    /// Held for approval: the plan says who approves it.
    NeedsApproval(Value),
}

pub struct NodeCall {
    pub stack: CallStack,
    pub identity: Identity,
    pub tool: String,
    pub arguments: Value,
    pub key: Option<String>,
    pub depth: u8,
    pub timeout: Option<Duration>,
    pub ct: CancellationToken,
    /// Federation `_meta` of the run's call (hop path, caller claim).
    pub hop: serde_json::Map<String, Value>,
}

pub async fn attempt(n: NodeCall) -> Attempt {
    let mut params = CallToolRequestParams::new(n.tool);
    if let Value::Object(args) = n.arguments {
        params = params.with_arguments(args);
    }
    let mut meta = RequestMetaObject::default();
    for (k, v) in n.hop {
        meta.insert(k, v);
    }
    if let Some(key) = n.key {
        meta.0.insert(IDEMPOTENCY_KEY.into(), Value::String(key));
    }
    let correlation = crate::hops::correlation(&meta).unwrap_or_else(correlation_id);
    let call = Call {
        op: Op::CallTool(params),
        meta,
        downstream: None,
        progress_token: None,
        ct: n.ct.clone(),
        identity: n.identity,
        correlation_id: correlation,
        trace: opentelemetry::Context::new(),
        depth: n.depth.saturating_add(1),
        target: None,
        class: None,
        timeout: None,
        retry_safe: false,
        approval: None,
        approved: None,
    };
    let answer = n.stack.oneshot(call);
    let answer = match n.timeout {
        Some(t) => match tokio::time::timeout(t, answer).await {
            Ok(a) => a,
            Err(_) => {
                n.ct.cancel();
                return Attempt::Failed {
                    error: format!("node timed out after {} ms", t.as_millis()),
                    plan: None,
                    transient: true,
                };
            }
        },
        None => answer.await,
    };
    match answer {
        Ok(ServerResult::CallToolResult(r)) => from_result(r),
        Ok(other) => Attempt::Succeeded(serde_json::to_value(other).unwrap_or(Value::Null)),
        Err(e) => Attempt::Failed {
            error: e.message.into_owned(),
            plan: None,
            transient: false,
        },
    }
}

pub fn from_result(r: CallToolResult) -> Attempt {
    let plan = r.meta.as_ref().and_then(|m| m.0.get(PLAN_KEY)).cloned();
    // A call held for approval is not run: its answer is the plan (an `ok` one, not an error).
    if let Some(plan) = plan.as_ref().filter(|p| asks_approval(p)) {
        return Attempt::NeedsApproval(plan.clone());
    }
    if r.is_error == Some(true) {
        let transient = plan.as_ref().is_some_and(|p| {
            p["errors"].as_array().into_iter().flatten().any(|e| {
                matches!(
                    e["code"].as_str(),
                    Some(
                        "upstream_timeout"
                            | "upstream_unavailable"
                            | "breaker_open"
                            | "rate_limited"
                    )
                )
            })
        });
        let error = plan
            .as_ref()
            .and_then(|p| p["instruction"].as_str().map(str::to_owned))
            .unwrap_or_else(|| text_of(&r));
        return Attempt::Failed {
            error,
            plan,
            transient,
        };
    }
    Attempt::Succeeded(output_of(&r))
}

/// The id of the plan a held call's envelope asks to approve.
pub fn plan_id(plan: &Value) -> Option<String> {
    plan["next_actions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["tool"] == APPROVE_TOOL)
        .and_then(|a| a["args"]["plan_id"].as_str())
        .map(str::to_owned)
}

/// A refusal whose next action is `fedgate.approve`.
fn asks_approval(plan: &Value) -> bool {
    plan["next_actions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|a| a["tool"] == APPROVE_TOOL)
}

/// A node's output: the structured content, else the text (parsed when it is JSON).
pub fn output_of(r: &CallToolResult) -> Value {
    if let Some(s) = &r.structured_content {
        return s.clone();
    }
    let text = text_of(r);
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

fn text_of(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}
