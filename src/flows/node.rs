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
    error::{Again, Reached, Retry},
    names::APPROVE_TOOL,
    pipeline::{Call, CallError, Op, TypedStack, correlation_id, plan_for},
    policy::identity::Identity,
    stores::idempotency::META_KEY as IDEMPOTENCY_KEY,
};

/// How long a node that hit its own timeout waits for its cancelled call to wind down (the
/// upstream is sent `notifications/cancelled` on the way).
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// What one attempt came to.
#[derive(Debug)]
pub enum Attempt {
    Succeeded(Value),
    /// The tool answered with an error, or the call was refused; `retry` says whether another
    /// attempt may pass, and whether it may for a write (the call never got there).
    Failed {
        error: String,
        plan: Option<Value>,
        retry: Retry,
    },
    /// Held for approval as plan `id` (`None`: a nested gateway's plan that names none); the
    /// plan says who approves it (the same `ok` plan a held direct call gets).
    NeedsApproval {
        id: Option<String>,
        plan: Value,
    },
    /// The run's caller has not connected their own account for `upstream` (a per-user
    /// credential): the node waits until they have, at `url`.
    NeedsConnect {
        upstream: String,
        url: String,
    },
}

/// How a node waiting for its caller to connect an account is described (its BLOCKED reason
/// starts so; a resumed run re-drives such nodes).
pub const CONNECT_WAIT: &str = "waits for its caller to connect";

impl Attempt {
    /// A refusal or failure of the call, typed: its plan, and whether a retry may pass.
    fn from_error(e: &CallError, correlation_id: &str) -> Self {
        let plan = plan_for(e, correlation_id).to_value();
        if let CallError::ApprovalRequired { plan: held } = e {
            return Attempt::NeedsApproval {
                id: Some(held.id.clone()),
                plan,
            };
        }
        if let CallError::Connect(r) = e
            && r.code == "credential_required"
            && let Some((url, _)) = &r.url
        {
            return Attempt::NeedsConnect {
                upstream: r.upstream.clone(),
                url: url.clone(),
            };
        }
        Attempt::Failed {
            error: e.wire_message(),
            plan: Some(plan),
            retry: e.describe().retry(),
        }
    }
}

pub struct NodeCall {
    pub stack: TypedStack,
    pub identity: Identity,
    pub tool: String,
    pub arguments: Value,
    pub key: Option<String>,
    pub depth: u8,
    pub timeout: Option<Duration>,
    pub ct: CancellationToken,
    /// Federation `_meta` of the run's call (hop path, caller claim).
    pub hop: serde_json::Map<String, Value>,
    /// The workspace the run was started from (its nodes are gated by its stage).
    pub workspace: Option<String>,
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
    let correlation = crate::federation::hops::correlation(&meta).unwrap_or_else(correlation_id);
    let plan_correlation = correlation.clone();
    let mut call =
        Call::without_session(Op::CallTool(params), n.identity, n.depth.saturating_add(1));
    call.meta = meta;
    call.workspace = n.workspace;
    call.ct = n.ct.clone();
    call.correlation_id = correlation;
    let answer = n.stack.oneshot(call);
    tokio::pin!(answer);
    let answer = match n.timeout {
        Some(t) => match tokio::time::timeout(t, &mut answer).await {
            Ok(a) => a,
            Err(_) => {
                // Cancelled, not dropped: the call in flight tells its upstream to stop.
                n.ct.cancel();
                let _ = tokio::time::timeout(CANCEL_GRACE, &mut answer).await;
                return Attempt::Failed {
                    error: format!("node timed out after {} ms", t.as_millis()),
                    plan: None,
                    retry: Retry {
                        again: Again::Now,
                        reached: Reached::Maybe,
                    },
                };
            }
        },
        None => answer.await,
    };
    match answer {
        Ok(ServerResult::CallToolResult(r)) => from_result(r),
        Ok(other) => Attempt::Succeeded(serde_json::to_value(other).unwrap_or(Value::Null)),
        Err(e) => Attempt::from_error(&e, &plan_correlation),
    }
}

/// A tool result as the node's outcome: the tool's own error, or its output — or, from a tool
/// that is itself a gateway's (a nested flow, a peer's), a plan that waits for approval.
pub fn from_result(r: CallToolResult) -> Attempt {
    let plan = r.meta.as_ref().and_then(|m| m.0.get(PLAN_KEY)).cloned();
    if let Some(plan) = plan.as_ref().filter(|p| asks_approval(p)) {
        return Attempt::NeedsApproval {
            id: plan_id(plan),
            plan: plan.clone(),
        };
    }
    if r.is_error == Some(true) {
        let error = plan
            .as_ref()
            .and_then(|p| p["instruction"].as_str().map(str::to_owned))
            .unwrap_or_else(|| text_of(&r));
        return Attempt::Failed {
            error,
            plan,
            retry: Retry::NEVER,
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

/// A plan whose next action is an approval.
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
