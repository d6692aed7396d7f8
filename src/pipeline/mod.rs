//! The per-call stack: every routed request (tools/call, prompts/get, resources/read,
//! resources/(un)subscribe, completion/complete) runs through these tower layers in order.
//!
//! Authentication happens before the stack, at the HTTP edge: an unauthenticated request never
//! becomes a `Call` (so it gets 401 whatever else is wrong with it).
//!
//! Order (outer to inner) and why:
//! 0. `observe` — outermost, so the audit log and the call metrics see every request with its
//!    typed outcome, refusals too.
//! 1. `resolve` — exposed name or URI → upstream route. It runs first because every later
//!    policy (authz on namespaced names, trust tier of the upstream, per-upstream rate limits and
//!    breakers) needs to know which upstream and tool a call targets.
//! 2. `authz` — the caller's roles must allow the exposed name; a refusal is the same error as
//!    an unknown name, so callers cannot probe for what exists.
//! 3. `trust` — the upstream's tier classifies the call (read/write/long) and refuses writes it
//!    does not allow; after authz, so a caller learns nothing about tools it may not use.
//! 4. `rate_limit` — keyed by identity/upstream/tool; after authz and trust, so only calls that
//!    would run use up a budget, and keys are authenticated identities.
//! 5. `idempotency` — a repeated idempotency key gets the recorded answer; before retry, so a
//!    recorded answer is never re-fetched.
//! 6. `retry` — only calls safe to repeat (reads, trusted idempotent hints), only after
//!    transport failures; outside the breaker, which sees every attempt and stops retries.
//! 7. `breaker` — the upstream's circuit breaker; innermost policy, so it sees exactly the
//!    attempts that reach the upstream (timeouts count as failures, refusals above never do).
//! 8. `forward` — the per-upstream terminal: deadline, progress relay, cancellation, transport.
//!
//! Later layers slot in between, in the order written in ../shared/STYLE.md: telemetry span,
//! envelope, audit/metrics, hop guard, resolve, authz, trust tier, schema check, rate limit,
//! idempotency; then per upstream retry → breaker → timeout → token injection → transport.

mod authz;
mod breaker;
mod error;
mod forward;
mod idempotency;
mod observe;
mod rate_limit;
mod resolve;
mod retry;
mod roundtrip;
mod step;
mod trust;

use std::{future::Future, pin::Pin, sync::Arc};

use rmcp::model::{
    CallToolRequestParams, CompleteRequestParams, GetPromptRequestParams, ProgressToken,
    ReadResourceRequestParams, RequestMetaObject, ServerResult, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use tokio_util::sync::CancellationToken;
use tower::{ServiceBuilder, util::BoxCloneSyncService};

use crate::{
    policy::{identity::Identity, trust::CallClass},
    telemetry::audit::Audit,
    upstream::inflight::Downstream,
    upstream::{Upstream, pool::Pool},
};

pub use authz::Authz;
pub use breaker::Breaker;
pub use error::CallError;
pub use forward::Forward;
pub use idempotency::Idempotency;
pub use observe::Observe;
pub use rate_limit::RateLimit;
pub use resolve::Resolve;
pub use retry::Retry;
pub use step::{CallService, Step, StepLayer};
pub use trust::Trust;

/// The routed MCP operation.
#[derive(Debug, Clone)]
pub enum Op {
    CallTool(CallToolRequestParams),
    GetPrompt(GetPromptRequestParams),
    ReadResource(ReadResourceRequestParams),
    Complete(CompleteRequestParams),
    Subscribe(SubscribeRequestParams),
    Unsubscribe(UnsubscribeRequestParams),
}

impl Op {
    pub fn method(&self) -> &'static str {
        match self {
            Op::CallTool(_) => "tools/call",
            Op::GetPrompt(_) => "prompts/get",
            Op::ReadResource(_) => "resources/read",
            Op::Complete(_) => "completion/complete",
            Op::Subscribe(_) => "resources/subscribe",
            Op::Unsubscribe(_) => "resources/unsubscribe",
        }
    }
}

/// Where `resolve` sent the call.
#[derive(Debug, Clone)]
pub struct Target {
    /// Held, not looked up again: a reload may replace the upstream set mid-call.
    pub upstream: Arc<Upstream>,
    pub upstream_name: String,
    /// What the caller named, before it was rewritten to the upstream's own name.
    pub exposed: Exposed,
}

/// A namespaced name or URI as the caller sees it; authorization decides on these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exposed {
    Tool(String),
    Prompt(String),
    Resource(String),
}

/// One downstream request on its way through the stack.
#[derive(Debug, Clone)]
pub struct Call {
    pub op: Op,
    /// The downstream request's `_meta` (protocol keys are dropped before forwarding).
    pub meta: RequestMetaObject,
    /// The downstream session and request, for progress and server-to-client requests.
    pub downstream: Option<Downstream>,
    pub progress_token: Option<ProgressToken>,
    pub ct: CancellationToken,
    /// Who is calling (set by the HTTP edge, or the local operator for stdio and the CLI).
    pub identity: Identity,
    /// Ties the call's audit record, logs and spans together: the trace id.
    pub correlation_id: String,
    /// The caller's trace context on the way in; `observe` replaces it with the call's span.
    pub trace: opentelemetry::Context,
    /// Set by `resolve`.
    pub target: Option<Target>,
    /// Set by `trust`: the call's class and the tier's deadline for it.
    pub class: Option<CallClass>,
    pub timeout: Option<std::time::Duration>,
    /// Set by `trust`: repeating the call cannot do harm (a read, or idempotent by annotation
    /// at a tier that trusts annotations).
    pub retry_safe: bool,
}

pub type CallFuture = Pin<Box<dyn Future<Output = Result<ServerResult, CallError>> + Send>>;

/// The assembled stack.
pub type CallStack = BoxCloneSyncService<Call, ServerResult, CallError>;

/// Builds the stack for a pool; see the module doc for the order.
pub fn build(pool: Arc<Pool>, audit: Option<Audit>) -> CallStack {
    let svc = ServiceBuilder::new()
        .layer(StepLayer::new(pool.clone(), Observe { audit }))
        .layer(StepLayer::new(pool.clone(), Resolve))
        .layer(StepLayer::new(pool.clone(), Authz))
        .layer(StepLayer::new(pool.clone(), Trust))
        .layer(StepLayer::new(pool.clone(), RateLimit))
        .layer(StepLayer::new(pool.clone(), Idempotency))
        .layer(StepLayer::new(pool.clone(), Retry))
        .layer(StepLayer::new(pool.clone(), Breaker))
        .service(Forward::new(pool));
    BoxCloneSyncService::new(svc)
}

/// A fresh correlation id (128 random bits, hex: the shape of a trace id).
pub fn correlation_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}
