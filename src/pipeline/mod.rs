//! The per-call stack: every routed request (tools/call, prompts/get, resources/read,
//! resources/(un)subscribe, completion/complete, and tasks/get|update|cancel of a task an
//! upstream runs) runs through these tower layers in order.
//!
//! Authentication happens before the stack, at the HTTP edge: an unauthenticated request never
//! becomes a `Call` (so it gets 401 whatever else is wrong with it).
//!
//! ```text
//!  outer   wire ─ observe(resolve, span, audit, metrics, envelope)
//!  inner   hop guard ─ authz ─ stage gate ─ trust ─ arguments ─ guard ─ approval ─ rate limit ─ idempotency
//!          ─ dispatch by target kind
//!  upstream terminal   connect ─ retry ─ breaker ─ forward (deadline, progress, cancellation, transport)
//! ```
//!
//! Order (outer to inner) and why:
//! - `wire` — outermost: the one place a typed [`CallError`] becomes a JSON-RPC error (with its
//!   plan in `error.data`); everything inside keeps the typed reason.
//! - `observe` — resolves the exposed name or URI to its route once (every later policy — authz
//!   on namespaced names, the upstream's tier, per-upstream limits and breakers — needs it),
//!   then records every request with its typed outcome, refusals too, in its span, the audit
//!   log and the call metrics; last, it adds the plan envelope (F11, `envelope.rs`) — after
//!   recording, so records keep the typed outcome, and with the route, whose envelope mode and
//!   output schema decide how the plan travels.
//! - `hop guard` — a call that re-enters the inner part (a flow node, an approved plan) carries
//!   its depth; too deep is refused before anything runs.
//! - `authz` — the caller's roles must allow the exposed name; a refusal is the same error as
//!   an unknown name, so callers cannot probe for what exists.
//! - `stage gate` — a session bound to a workspace calls only what the workspace's stage
//!   allows (`crate::stages`); after authz (a caller learns nothing of tools its roles hide),
//!   before approval (no one approves a call the stage forbids).
//! - `trust` — the upstream's tier classifies the call (read/write/long) and refuses writes it
//!   does not allow; after authz, so a caller learns nothing about tools it may not use.
//! - `arguments` — the tool's input schema (compiled when its list was stored) checks the
//!   arguments; after trust, so callers learn schemas only of tools they may call, and before
//!   approval, so no one is asked to approve a call that cannot run.
//! - `guard` — secrets in the arguments are blocked, masked or recorded under the upstream's
//!   guardrails, and so are secrets in the answer on its way back; after `arguments`, before
//!   `approval`, so no one approves a call that carries a secret and a held plan keeps the
//!   masked arguments.
//! - `approval` — a call that needs approval is held as a plan and not run; `fedgate__approve`
//!   decides or runs plans. An approved call re-enters the typed stack from `observe` under
//!   the caller's identity, marked with its plan, so every step above and below this one
//!   decides on it as things stand when it runs; this step lets it through.
//! - `rate limit` — keyed by identity/upstream/tool; after authz and trust, so only calls that
//!   would run use up a budget, and keys are authenticated identities.
//! - `idempotency` — a repeated idempotency key gets the recorded answer; before retry, so a
//!   recorded answer is never re-fetched.
//! - `dispatch` — the terminal of the call's target kind. For an upstream: `connect` (the
//!   caller's own token for a `per_user` credential, asked for when missing; before the
//!   breaker, since a person without a token is no upstream failure), `retry` (only calls
//!   safe to repeat, only after transport failures; outside the breaker, which sees every
//!   attempt and stops retries), `breaker` (innermost policy, so it sees exactly the attempts
//!   that reach the upstream) and `forward`.
//!

mod approval;
mod arguments;
mod authz;
mod breaker;
mod connect;
mod decisions;
mod disconnect;
mod dispatch;
mod envelope;
mod error;
mod forward;
mod gate;
mod guard;
mod hop;
mod idempotency;
mod observe;
pub mod own;
pub mod personal;
mod rate_limit;
mod reentry;
mod resolve;
mod retry;
mod roundtrip;
mod step;
#[cfg(test)]
mod tests;
mod trust;
mod wire;

use std::{future::Future, pin::Pin, sync::Arc, time::Duration};

use arc_swap::ArcSwap;

use rmcp::model::{
    CallToolRequestParams, CompleteRequestParams, GetPromptRequestParams, ProgressToken,
    ReadResourceRequestParams, RequestMetaObject, ServerResult, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use tokio_util::sync::CancellationToken;
use tower::{ServiceBuilder, util::BoxCloneSyncService};

use rmcp::{ErrorData as McpError, model::RequestStateCodec};

use crate::{
    approval::Plans,
    envelope::Mode,
    policy::{identity::Identity, rate_limit::RateLimits},
    stores::idempotency::IdempotencyStore,
    telemetry::{audit::Audit, metrics::Metrics},
    upstream::inflight::Downstream,
    upstream::{Upstream, pool::Pool},
};

pub use crate::telemetry::correlation_id;
pub use approval::{Approvals, ApproveTool, approves, plan_caller};
pub use arguments::Arguments;
pub use authz::{Authz, may_call_now, visible};
pub use breaker::Breaker;
pub use connect::Connect;
pub use decisions::{Classified, Decisions};
pub use disconnect::DisconnectTool;
pub use envelope::plan_for;
pub use error::{CallError, ConnectRefusal, Held, StageRefusal};
pub use forward::Forward;
pub use gate::{Gate, Place};
pub use hop::HopGuard;
pub use idempotency::Idempotency;
pub use observe::Observe;
pub use own::{OwnTool, OwnTools};
pub use rate_limit::RateLimit;
pub use retry::Retry;
pub use step::{CallService, Step, StepLayer, done};
pub use trust::{Trust, classify, verdict};
pub use wire::to_wire;

/// The routed MCP operation.
#[derive(Debug, Clone)]
pub enum Op {
    CallTool(CallToolRequestParams),
    GetPrompt(GetPromptRequestParams),
    ReadResource(ReadResourceRequestParams),
    Complete(CompleteRequestParams),
    Subscribe(SubscribeRequestParams),
    Unsubscribe(UnsubscribeRequestParams),
    /// `tasks/*` of an upstream's task, its handle already opened (the caller's handle is
    /// replaced by the upstream's own id); authorized against the tool the task came from.
    Task(TaskCall),
}

pub use crate::tasks::{TaskCall, TaskRequest};

impl Op {
    pub fn method(&self) -> &'static str {
        match self {
            Op::CallTool(_) => "tools/call",
            Op::GetPrompt(_) => "prompts/get",
            Op::ReadResource(_) => "resources/read",
            Op::Complete(_) => "completion/complete",
            Op::Subscribe(_) => "resources/subscribe",
            Op::Unsubscribe(_) => "resources/unsubscribe",
            Op::Task(t) => t.request.method(),
        }
    }
}

/// An upstream target resolved once per call: the upstream with its spec and tool lists as
/// they were when the call was resolved. Every step decides on this one snapshot, so a reload
/// between two steps cannot apply two specs to one call (trust with the old tier, retry with
/// the new policy); the next call sees the new one.
#[derive(Debug, Clone)]
pub struct Route {
    pub upstream: Arc<Upstream>,
    pub spec: Arc<crate::config::snapshot::UpstreamSpec>,
    pub lists: Arc<crate::router::catalog::Lists>,
}

impl Route {
    pub fn of(upstream: Arc<Upstream>) -> Self {
        Route {
            spec: upstream.spec(),
            lists: upstream.lists(),
            upstream,
        }
    }
}

/// What answers a resolved call.
#[derive(Debug, Clone)]
pub enum TargetKind {
    /// An upstream MCP server; held, not looked up again: a reload may replace the upstream
    /// set mid-call.
    Upstream(Route),
    /// One of the gateway's own tools.
    Gateway(Arc<dyn OwnTool>),
}

/// Where `resolve` sent the call.
#[derive(Debug, Clone)]
pub struct Target {
    pub kind: TargetKind,
    /// The upstream's name, or `fedgate` for the gateway's own tools: the owner in metric
    /// labels, rate-limit keys and audit records.
    pub owner: Arc<str>,
    /// What the caller named, before it was rewritten to the upstream's own name.
    pub exposed: Exposed,
}

impl Target {
    /// The upstream, for targets that are one.
    pub fn upstream(&self) -> Option<&Arc<Upstream>> {
        self.route().map(|r| &r.upstream)
    }

    /// The upstream with the spec and lists this call decides on.
    pub fn route(&self) -> Option<&Route> {
        match &self.kind {
            TargetKind::Upstream(r) => Some(r),
            TargetKind::Gateway(_) => None,
        }
    }
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
    /// How many calls this one is nested in (0 for a client's own call; a flow node or an
    /// approved plan re-entering the inner stack is one deeper).
    pub depth: u8,
    /// The workspace the call works in (`workflow/workspace`) when no session of its own says
    /// it: set by the gate step for a client's call, carried by a flow's nodes from the call
    /// that started the run, so the stage gate decides on them as the workspace stands then.
    pub workspace: Option<String>,
    /// Set by `resolve`.
    pub target: Option<Target>,
    /// What the steps decided (class, deadline, approval, the person it acts as): written
    /// only by the steps, each through its own method.
    pub decided: Decisions,
}

impl Call {
    /// A call made as `identity` at nesting `depth`, not resolved yet and with no decision
    /// made: the one place a call is built (a client's adds its session with `from_client`).
    pub fn new(op: Op, identity: Identity, depth: u8) -> Self {
        Call {
            op,
            meta: Default::default(),
            downstream: None,
            progress_token: None,
            ct: Default::default(),
            identity,
            correlation_id: correlation_id(),
            trace: opentelemetry::Context::new(),
            depth,
            workspace: None,
            target: None,
            decided: Decisions::default(),
        }
    }

    /// A call with no downstream session behind it (a flow node, an approval a run makes, the
    /// CLI's `fedgate call`).
    pub fn without_session(op: Op, identity: Identity, depth: u8) -> Self {
        Self::new(op, identity, depth)
    }

    /// The call as a client's request: its session, `_meta`, cancellation and trace context.
    pub fn from_client(
        mut self,
        downstream: Downstream,
        meta: RequestMetaObject,
        ct: CancellationToken,
        trace: opentelemetry::Context,
    ) -> Self {
        self.downstream = Some(downstream);
        self.meta = meta;
        self.ct = ct;
        self.trace = trace;
        self
    }
}

pub type CallFuture = Pin<Box<dyn Future<Output = Result<ServerResult, CallError>> + Send>>;

/// The assembled stack, answering in wire errors.
pub type CallStack = BoxCloneSyncService<Call, ServerResult, McpError>;

/// The same stack without the envelope and wire steps: calls made on a caller's behalf inside
/// the gateway (flow nodes, approvals a run makes) get the typed outcome — the refusal, its
/// class, a held call's plan — instead of JSON meant for a client.
pub type TypedStack = BoxCloneSyncService<Call, ServerResult, CallError>;

/// Both faces of one stack (one set of policy state behind them).
#[derive(Clone)]
pub struct Stacks {
    pub client: CallStack,
    pub typed: TypedStack,
}

impl std::fmt::Debug for Stacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stacks")
    }
}

/// The state the steps own, shared with whoever swaps it on reload.
#[derive(Debug, Clone)]
pub struct Parts {
    pub pool: Arc<Pool>,
    pub metrics: Arc<Metrics>,
    pub limits: Arc<ArcSwap<RateLimits>>,
    pub idempotency: Arc<IdempotencyStore>,
    /// Signs the `requestState` of parked calls.
    pub seal: Arc<RequestStateCodec>,
    /// How long a call parked for its caller's input waits, and how many may wait at once.
    pub input_wait: Duration,
    pub max_parked_calls: usize,
    pub audit: Option<Audit>,
    /// The shared stores (`[cluster]`).
    pub cluster: crate::stores::Cluster,
    /// The operator console's call feed.
    pub feed: Option<crate::telemetry::call_feed::CallFeed>,
    /// The gateway's own tools (their definitions are in the pool's catalog).
    pub own: OwnTools,
    /// Plans waiting for approval.
    pub plans: Arc<Plans>,
    /// The envelope mode of calls that resolve to no upstream (and of the gateway's own tools).
    pub envelope: Mode,
    /// This gateway's id in federated request paths, and how many gateways a request may pass.
    pub gateway_id: Arc<str>,
    pub max_hops: usize,
    /// The workflows' stages (`[stages.NAME]`), when any are configured.
    pub gate: Option<Arc<dyn Gate>>,
    /// Per-user upstream credentials, when a credential is `per_user`.
    pub credentials: Option<Arc<crate::credentials::UserCredentials>>,
    /// How callers are authorized as of the last (re)load: a call that waited runs as its
    /// caller may call when it runs.
    pub auth: Arc<ArcSwap<crate::policy::identity::Authenticator>>,
}

/// Builds the stack; see the module doc for the order.
pub fn build(parts: Parts) -> Stacks {
    let reentry = reentry::Reentry::new(parts.auth.clone());
    // The terminal of upstream targets; own tools answer in `Dispatch` itself.
    let upstream = ServiceBuilder::new()
        .layer(StepLayer::new(Connect {
            credentials: parts.credentials.clone(),
            wait: parts.input_wait,
            reentry: reentry.clone(),
        }))
        .layer(StepLayer::new(Retry))
        .layer(StepLayer::new(Breaker))
        .service(Forward::new(
            roundtrip::exchange::RoundTrip::new(
                parts.seal.clone(),
                parts.input_wait,
                parts.max_parked_calls,
                parts.metrics.clone(),
            ),
            parts.pool.clone(),
        ));
    let approvals = Approvals {
        plans: parts.plans.clone(),
        pool: parts.pool.clone(),
        metrics: parts.metrics.clone(),
        audit: parts.audit.clone(),
        seal: parts.seal.clone(),
        input_wait: parts.input_wait,
        store: crate::approval::shared::store(&parts.cluster),
        reentry: reentry.clone(),
    };
    crate::approval::record::start_sweeper(
        &approvals.plans,
        approvals.metrics.clone(),
        approvals.audit.clone(),
    );
    let inner = ServiceBuilder::new()
        .layer(StepLayer::new(HopGuard {
            id: parts.gateway_id.clone(),
            max_hops: parts.max_hops,
        }))
        .layer(StepLayer::new(Authz {
            pool: parts.pool.clone(),
        }))
        .layer(StepLayer::new(gate::GateStep(parts.gate.clone())))
        .layer(StepLayer::new(Trust))
        .layer(StepLayer::new(Arguments {
            own: parts.own.clone(),
        }))
        .layer(StepLayer::new(guard::Guard {
            metrics: parts.metrics.clone(),
        }))
        .layer(StepLayer::new(approvals))
        .layer(StepLayer::new(RateLimit {
            limits: parts.limits.clone(),
            metrics: parts.metrics.clone(),
            store: crate::stores::rate_limits::store(&parts.cluster),
        }))
        .layer(StepLayer::new(Idempotency {
            records: crate::stores::idempotency::store(&parts.cluster),
            store: parts.idempotency.clone(),
        }))
        .service(dispatch::Dispatch::new(upstream));
    let inner = BoxCloneSyncService::new(inner);
    let observe = Observe {
        pool: parts.pool.clone(),
        own: parts.own,
        audit: parts.audit,
        feed: parts.feed,
        metrics: parts.metrics,
        envelope: parts.envelope,
        wrap: true,
        gate: parts.gate.clone(),
        personal: parts.credentials.clone().map(|creds| {
            Arc::new((
                personal::Personal {
                    pool: parts.pool.clone(),
                    creds,
                    wait: parts.input_wait,
                },
                reentry.clone(),
            ))
        }),
    };
    let typed = ServiceBuilder::new()
        .layer(StepLayer::new(Observe {
            wrap: false,
            ..observe.clone()
        }))
        .service(inner.clone());
    let typed = BoxCloneSyncService::new(typed);
    reentry.set(typed.clone());
    let client = ServiceBuilder::new()
        .layer(wire::WireLayer)
        .layer(StepLayer::new(observe))
        .service(inner);
    Stacks {
        client: BoxCloneSyncService::new(client),
        typed,
    }
}
