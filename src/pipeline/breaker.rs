//! Breaker: the upstream's circuit breaker, and the called tool's, see every attempt that
//! reaches the transport; while either is open, calls fail fast with the time until the next
//! probe. A failure counts against the upstream when the transport failed or timed out, and
//! against the tool when the upstream answered with an error (see `policy::breaker::Scope`).

use rmcp::model::ServerResult;
use tokio::time::Instant;

use super::{
    Call, CallFuture, Op,
    step::{CallService, Step, done},
};
use crate::{
    pipeline::CallError,
    policy::breaker::{FailureClass, Outcome, Scope},
};

/// Breaker: fail fast while the upstream's (or the tool's) breaker is open; record every
/// outcome.
#[derive(Debug, Clone)]
pub struct Breaker;

impl Step for Breaker {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        let Some(up) = call.target.as_ref().and_then(|t| t.upstream()).cloned() else {
            return inner.call(call);
        };
        let now = Instant::now();
        if let Err(retry_in) = up.breaker.admit(now) {
            return done(Err(CallError::BreakerOpen {
                upstream: up.name().to_owned(),
                tool: None,
                retry_in,
            }));
        }
        let tool = match &call.op {
            Op::CallTool(p) => Some(p.name.to_string()),
            _ => None,
        };
        if let Some(t) = &tool
            && let Err(retry_in) = up.tool_breakers.admit(t, now)
        {
            // The upstream's probe slot (if it was half-open) is given back.
            up.breaker.record(now, Outcome::Neutral);
            return done(Err(CallError::BreakerOpen {
                upstream: up.name().to_owned(),
                tool: Some(t.clone()),
                retry_in,
            }));
        }
        let fut = inner.call(call);
        Box::pin(async move {
            let result = fut.await;
            let cfg = up.breaker.config();
            let now = Instant::now();
            up.breaker
                .record(now, classify(&result, &cfg.count, Scope::Upstream));
            if let Some(t) = &tool {
                let outcome = classify(&result, &cfg.count, Scope::Tool);
                up.tool_breakers.record(cfg, t, now, outcome);
            }
            result
        })
    }
}

/// The outcome for the breaker of `scope`: a failure when its class is one `count` names and
/// belongs to that scope; an answer shows the upstream (or the tool) working, which is a
/// success; what says nothing about this scope (a client's cancellation; for a tool, its
/// transport failing) is neutral.
fn classify(
    result: &Result<ServerResult, CallError>,
    count: &[FailureClass],
    scope: Scope,
) -> Outcome {
    let class = match result {
        Ok(ServerResult::CallToolResult(r)) if r.is_error == Some(true) => FailureClass::IsError,
        Ok(_) => return Outcome::Success,
        Err(CallError::Cancelled) => return Outcome::Neutral,
        Err(e) => match failure_class(e) {
            Some(c) => c,
            None => return Outcome::Neutral,
        },
    };
    match (class.scope(), scope) {
        (s, want) if s == want && count.contains(&class) => Outcome::Failure,
        // The transport failed: says nothing of the tool.
        (Scope::Upstream, Scope::Tool) => Outcome::Neutral,
        _ => Outcome::Success,
    }
}

/// The class of an error that came from (or on the way to) the upstream; `None` for the
/// gateway's own refusals.
fn failure_class(e: &CallError) -> Option<FailureClass> {
    match e {
        CallError::UpstreamTimeout { .. } => Some(FailureClass::Timeout),
        CallError::UpstreamClosed { .. }
        | CallError::UpstreamFailed { .. }
        | CallError::UpstreamUnavailable { .. } => Some(FailureClass::Transport),
        CallError::UpstreamRefused { error, .. } => {
            let code = error.code.0;
            Some(if code == -32603 || (-32099..=-32000).contains(&code) {
                FailureClass::ServerError
            } else {
                FailureClass::ClientError
            })
        }
        _ => None,
    }
}
