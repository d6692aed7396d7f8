//! Typed failures of a call, described once (`describe`: code, side, retry, …), and their one
//! translation to the wire.

use std::time::Duration;

use rmcp::{ErrorData as McpError, model::ErrorCode};
use serde_json::json;

use crate::{
    approval::PlanRefusal,
    envelope::{Ask, Plan, Safety},
    policy::{arguments::Problem, trust::TierRefusal},
    router::cursor::BadCursor,
    upstream::Phase,
};

/// Everything that can stop a forwarded call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    #[error("unknown tool `{name}`{}", note.as_deref().unwrap_or(""))]
    UnknownTool {
        name: String,
        /// The closest names the caller may call (suffix matches first).
        closest: Vec<String>,
        /// Of those, the reads: safe to offer as recovery actions.
        recover: Vec<Recovery>,
        /// What else is wrong with the name (an unknown upstream part).
        note: Option<String>,
    },
    #[error("unknown prompt `{name}`")]
    UnknownPrompt { name: String },
    #[error("no upstream serves resource `{uri}`")]
    UnknownResource { uri: String },
    #[error("unknown task")]
    UnknownTask,
    #[error("invalid cursor")]
    BadCursor,
    #[error("requestState refused: {why}")]
    BadRequestState { why: String },
    #[error("too many {what}; retry later")]
    Busy { what: String },
    #[error("the client did not provide the input the upstream asked for: {detail}")]
    NoClientInput { detail: String },
    #[error("fedgate failed: {detail}")]
    Internal { detail: String },
    /// This process may not run flows in its run log: another process drives it.
    #[error("{detail}")]
    FlowsElsewhere { detail: String },
    #[error("upstream `{upstream}` is unavailable ({phase:?}){}", detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    UpstreamUnavailable {
        upstream: String,
        phase: Phase,
        detail: Option<String>,
    },
    #[error("upstream `{upstream}` did not answer within {after:?}")]
    UpstreamTimeout {
        upstream: String,
        after: Duration,
        /// A write whose outcome is unknown: it may have happened.
        uncertain: bool,
    },
    #[error("upstream `{upstream}` closed the connection during the call")]
    UpstreamClosed { upstream: String, uncertain: bool },
    /// The upstream's own JSON-RPC error, after the guardrails scanned it (`found`).
    #[error("upstream `{upstream}` refused the request: {}", crate::guard::masked(&error.message))]
    UpstreamRefused {
        upstream: String,
        error: Box<McpError>,
        found: Vec<crate::guard::Finding>,
    },
    #[error("upstream `{upstream}` failed: {detail}")]
    UpstreamFailed { upstream: String, detail: String },
    #[error("the call was cancelled")]
    Cancelled,
    #[error("calls nested {depth} deep, more than the {max} fedgate allows")]
    TooDeep { depth: u8, max: u8 },
    /// A federated request that already passed this gateway, or went too far.
    #[error("{0}")]
    Hop(crate::federation::hops::HopRefusal),
    #[error("idempotency key reused with different arguments; use a new key for a new call")]
    IdempotencyConflict,
    #[error(
        "upstream `{upstream}` answered with {size} bytes, more than its trust tier allows ({max}); ask for less (filters, pagination)"
    )]
    ResponseTooLarge {
        upstream: String,
        size: usize,
        max: usize,
    },
    /// The caller's roles do not grant the name; the caller sees `shown` (an unknown-name
    /// error), the audit log sees the real reason.
    #[error("{shown}")]
    NotAuthorized { shown: Box<CallError> },
    #[error("{}; next attempt in {} ms", match tool { Some(t) => format!("tool `{t}` of upstream `{upstream}` keeps failing and its circuit breaker is open (the upstream's other tools answer)"), None => format!("upstream `{upstream}` is failing and its circuit breaker is open") }, retry_in.as_millis())]
    BreakerOpen {
        upstream: String,
        /// The tool's own breaker, when it was that one.
        tool: Option<String>,
        retry_in: Duration,
    },
    #[error("rate limited by {rule}; retry in {} ms", retry_after.as_millis())]
    RateLimited { rule: String, retry_after: Duration },
    /// `[cluster] fail = "closed"` and the shared store did not answer.
    #[error("the shared store for {feature} does not answer; retry in a moment")]
    StoreUnavailable { feature: &'static str },
    #[error("tool `{tool}` writes, and trust tier `{tier}` refuses it: {}", refusal_text(*refusal))]
    TierRefused {
        tool: String,
        tier: String,
        refusal: TierRefusal,
        /// Where the fix goes: the upstream's name and its own name for the tool.
        upstream: String,
        upstream_tool: String,
    },
    #[error("`{tool}` was not called: its arguments do not match its input schema ({})", count(problems.len(), "problem"))]
    InvalidArguments {
        tool: String,
        problems: Vec<Problem>,
        ask: Box<Ask>,
    },
    /// Not run: the call waits for approval as plan `plan.id`. Not a failure, but the call did
    /// not happen, so it travels as a typed outcome like a refusal.
    #[error("`{}` needs approval before it runs; approve plan {} with fedgate__approve", plan.tool, plan.id)]
    ApprovalRequired { plan: Box<Held> },
    #[error("{0}")]
    Plan(PlanRefusal),
    /// A secret under a `block` guardrail, or a guardrail hook's deny or failure.
    #[error("{0}")]
    Guarded(Box<crate::guard::Refusal>),
    /// The workspace's stage does not allow the call, or the move was refused.
    #[error("{0}")]
    Staged(Box<StageRefusal>),
    /// The upstream needs the caller's own credential (`per_user`).
    #[error("{0}")]
    Connect(Box<ConnectRefusal>),
    /// A failure with the plan envelope made for it (set by `observe`, turned into the wire
    /// form by `wire`); everything else reads the cause.
    #[error("{cause}")]
    Planned {
        cause: Box<CallError>,
        plan: Box<Plan>,
    },
}

impl CallError {
    /// Whether the refusal suggests tools (closest names, recovery actions).
    pub fn suggests(&self) -> bool {
        match self {
            CallError::UnknownTool {
                closest, recover, ..
            } => !closest.is_empty() || !recover.is_empty(),
            CallError::NotAuthorized { shown } => shown.suggests(),
            _ => false,
        }
    }

    /// Keeps only the suggested tools `keep` allows.
    pub fn keep_suggested(&mut self, keep: impl Fn(&str) -> bool + Copy) {
        match self {
            CallError::UnknownTool {
                closest, recover, ..
            } => {
                closest.retain(|n| keep(n));
                recover.retain(|r| keep(&r.tool));
            }
            CallError::NotAuthorized { shown } => shown.keep_suggested(keep),
            _ => {}
        }
    }
}

/// A safe call that may be what the caller meant: a read, with the caller's own arguments when
/// they fit its input schema.
#[derive(Debug, Clone)]
pub struct Recovery {
    pub tool: String,
    pub args: serde_json::Map<String, serde_json::Value>,
}

/// What a held call's plan shows the agent.
#[derive(Debug, Clone)]
pub struct Held {
    pub id: String,
    pub tool: String,
    pub upstream: String,
    /// A short rendering of the arguments.
    pub summary: String,
    pub safety: Safety,
    pub approvers: Vec<String>,
    pub expires_ms: u64,
}

/// What a caller must know about a write that may or may not have happened.
const UNCERTAIN: &str = "the write may or may not have happened (outcome uncertain): check its \
                         effect before repeating it; fedgate did not retry it";

/// `1 problem`, `2 problems`.
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn refusal_text(r: TierRefusal) -> &'static str {
    match r {
        TierRefusal::WritesNever => "this tier allows no writes; use a read-only tool",
        TierRefusal::WriteNotDeclared => {
            "only writes declared in the upstream's `writable` list are allowed at this tier"
        }
    }
}

/// The config change that would let a tier-refused write run (for the operator the agent
/// reports to).
pub fn tier_fix(refusal: TierRefusal, upstream: &str, tool: &str, tier: &str) -> String {
    match refusal {
        TierRefusal::WritesNever => format!(
            "tell your user: tier `{tier}` of upstream `{upstream}` allows no writes. If `{tool}` only reads, an operator declares it under [upstreams.{upstream}]: read_only = [\"{tool}\"]; to let it write, the upstream needs a tier that allows writes (tier = \"medium\" or higher)"
        ),
        TierRefusal::WriteNotDeclared => format!(
            "tell your user: an operator allows it under [upstreams.{upstream}] with writable = [\"{tool}\"] (it writes) or read_only = [\"{tool}\"] (it only reads)"
        ),
    }
}

impl From<BadCursor> for CallError {
    fn from(_: BadCursor) -> Self {
        CallError::BadCursor
    }
}

impl CallError {
    /// What a client is told: the error's own text, except for failures whose text carries
    /// internals (transport and library errors, fedgate's own state). Those say what happened
    /// in plain words; their details go to the log (`observe` logs the full text with the
    /// call's correlation id).
    pub fn wire_message(&self) -> String {
        match self {
            CallError::Internal { .. } => {
                "fedgate could not handle the call; its log has the details (look up the call's correlation id)".to_owned()
            }
            CallError::UpstreamFailed { upstream, .. } => format!(
                "upstream `{upstream}` failed to answer the call; the gateway's log has the details"
            ),
            CallError::Planned { cause, .. } => cause.wire_message(),
            CallError::NotAuthorized { shown } => shown.wire_message(),
            other => other.to_string(),
        }
    }

    /// The JSON-RPC error a client sees. Messages say what happened and what to do next.
    pub(super) fn to_mcp(&self) -> McpError {
        let msg = self.wire_message();
        match self {
            CallError::UnknownTool {
                name,
                closest,
                recover,
                ..
            } => McpError::invalid_params(
                match closest.as_slice() {
                    _ if recover.iter().any(|r| r.tool == crate::names::FIND_TOOLS) => {
                        format!(
                            "{msg}; fedgate__find_tools searches every tool you may call{}",
                            closest
                                .first()
                                .map(|n| format!(" (closest here: `{n}`)"))
                                .unwrap_or_default()
                        )
                    }
                    [] => format!("{msg}; call tools/list to see the available tools"),
                    names => format!(
                        "{msg}; did you mean {}? (tools/list shows every tool)",
                        names
                            .iter()
                            .map(|n| format!("`{n}`"))
                            .collect::<Vec<_>>()
                            .join(" or ")
                    ),
                },
                Some(json!({ "tool": name, "closest": closest })),
            ),
            CallError::UnknownPrompt { name } => McpError::invalid_params(
                format!("{msg}; call prompts/list to see the available prompts"),
                Some(json!({ "prompt": name })),
            ),
            CallError::UnknownResource { uri } => McpError::new(
                ErrorCode::RESOURCE_NOT_FOUND,
                format!("{msg}; call resources/list or resources/templates/list"),
                Some(json!({ "uri": uri })),
            ),
            // Forged, edited, expired and other callers' handles alike: nothing more is said.
            CallError::UnknownTask => McpError::invalid_params(
                "unknown task; use the taskId fedgate returned to you for a tools/call",
                None,
            ),
            CallError::BadCursor => McpError::invalid_params(
                "invalid cursor; restart the listing without a cursor",
                None,
            ),
            CallError::BadRequestState { .. } => McpError::invalid_params(
                format!("{msg}; call again without requestState and inputResponses"),
                Some(json!({ "reason": "bad_request_state" })),
            ),
            CallError::Busy { .. } => {
                McpError::internal_error(msg, Some(json!({ "reason": "busy" })))
            }
            CallError::FlowsElsewhere { .. } => {
                McpError::invalid_request(msg, Some(json!({ "reason": "flows_elsewhere" })))
            }
            CallError::NoClientInput { .. } => {
                McpError::invalid_request(msg, Some(json!({ "reason": "no_client_input" })))
            }
            CallError::Internal { .. } => {
                McpError::internal_error(msg, Some(json!({ "reason": "internal" })))
            }
            CallError::UpstreamUnavailable {
                upstream, phase, ..
            } => McpError::internal_error(
                format!("{msg}; its tools are back once it reconnects, retry later"),
                Some(json!({ "upstream": upstream, "state": phase })),
            ),
            CallError::UpstreamTimeout {
                upstream,
                after,
                uncertain,
            } => McpError::internal_error(
                if *uncertain {
                    format!("{msg}; {UNCERTAIN}")
                } else {
                    format!("{msg}; the request was cancelled upstream")
                },
                Some(json!({
                    "upstream": upstream,
                    "timeout_ms": after.as_millis() as u64,
                    "outcome_uncertain": uncertain,
                })),
            ),
            CallError::UpstreamClosed {
                upstream,
                uncertain,
            } => McpError::internal_error(
                if *uncertain {
                    format!("{msg}; {UNCERTAIN}")
                } else {
                    format!("{msg}; it is being restarted — retry the call")
                },
                Some(json!({ "upstream": upstream, "outcome_uncertain": uncertain })),
            ),
            // The upstream's own JSON-RPC error is the answer; keep its code and data.
            CallError::UpstreamRefused { error, .. } => (**error).clone(),
            CallError::UpstreamFailed { upstream, .. } => McpError::internal_error(
                msg,
                Some(json!({ "upstream": upstream, "reason": "upstream_failed" })),
            ),
            CallError::Cancelled => McpError::internal_error(msg, None),
            CallError::TooDeep { .. } => {
                McpError::invalid_request(msg, Some(json!({ "reason": "too_deep" })))
            }
            CallError::Hop(h) => McpError::invalid_request(
                msg,
                Some(json!({ "reason": self.code(), "path": h.path() })),
            ),
            CallError::NotAuthorized { shown } => shown.to_mcp(),
            CallError::IdempotencyConflict => {
                McpError::invalid_params(msg, Some(json!({ "reason": "idempotency_conflict" })))
            }
            CallError::ResponseTooLarge {
                upstream,
                size,
                max,
            } => McpError::internal_error(
                msg,
                Some(json!({
                    "reason": "response_too_large",
                    "upstream": upstream,
                    "size": size,
                    "max": max,
                })),
            ),
            CallError::BreakerOpen {
                upstream,
                tool,
                retry_in,
            } => McpError::internal_error(
                msg,
                Some(json!({
                    "reason": "breaker_open",
                    "upstream": upstream,
                    "tool": tool,
                    "retry_after_ms": retry_in.as_millis() as u64,
                })),
            ),
            CallError::StoreUnavailable { .. } => McpError::internal_error(
                msg,
                Some(json!({"reason": "store_unavailable", "retry_after_ms": 1000})),
            ),
            CallError::RateLimited { rule, retry_after } => McpError::invalid_request(
                msg,
                Some(json!({
                    "reason": "rate_limited",
                    "rule": rule,
                    "retry_after_ms": retry_after.as_millis() as u64,
                })),
            ),
            CallError::TierRefused {
                tool,
                tier,
                refusal,
                ..
            } => McpError::invalid_request(
                msg,
                Some(json!({ "tool": tool, "tier": tier, "reason": refusal.code() })),
            ),
            CallError::InvalidArguments { tool, problems, .. } => McpError::invalid_params(
                format!(
                    "{msg}: {}",
                    problems
                        .iter()
                        .map(|p| format!("{} ({})", p.message, p.pointer))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                Some(json!({ "reason": "invalid_arguments", "tool": tool })),
            ),
            CallError::ApprovalRequired { plan } => McpError::invalid_request(
                msg,
                Some(json!({ "reason": "approval_required", "plan_id": plan.id })),
            ),
            CallError::Plan(r) => {
                McpError::invalid_params(msg, Some(json!({ "reason": r.code() })))
            }
            CallError::Guarded(r) => McpError::invalid_request(msg, Some(r.data())),
            CallError::Staged(r) => McpError::invalid_request(msg, Some(r.data())),
            CallError::Connect(r) => McpError::new(ErrorCode(r.wire_code()), msg, Some(r.data())),
            CallError::Planned { cause, plan } => {
                let mut wire = cause.to_mcp();
                // The plan joins whatever data the error has; data that is not an object (an
                // upstream's own) is kept as it is.
                match &mut wire.data {
                    Some(serde_json::Value::Object(m)) => {
                        m.insert(crate::envelope::META_KEY.into(), plan.to_value());
                    }
                    None => {
                        wire.data = Some(json!({ crate::envelope::META_KEY: plan.to_value() }));
                    }
                    Some(_) => {}
                }
                wire
            }
        }
    }

    /// Classifies an rmcp error from one upstream request.
    pub fn from_service(upstream: &str, e: rmcp::ServiceError) -> Self {
        let upstream = upstream.to_owned();
        match e {
            rmcp::ServiceError::McpError(error) => CallError::UpstreamRefused {
                upstream,
                error: Box::new(error),
                found: Vec::new(),
            },
            rmcp::ServiceError::TransportClosed => CallError::UpstreamClosed {
                upstream,
                uncertain: false,
            },
            rmcp::ServiceError::Timeout { timeout } => CallError::UpstreamTimeout {
                upstream,
                after: timeout,
                uncertain: false,
            },
            other => CallError::UpstreamFailed {
                upstream,
                detail: crate::error::plain(&other),
            },
        }
    }
}

mod connect;
mod describe;
mod stage;
#[cfg(test)]
mod tests;

pub use connect::ConnectRefusal;
pub use describe::Travels;
pub use stage::StageRefusal;
