//! Breaker: the upstream's circuit breaker sees every attempt that reaches the transport;
//! while open, calls fail fast with the time until the next probe.

use rmcp::model::ServerResult;
use tokio::time::Instant;

use super::{
    Call, CallFuture,
    step::{CallService, Step, done},
};
use crate::{
    pipeline::CallError,
    policy::breaker::{FailureClass, Outcome},
};

/// Breaker: fail fast while the upstream's breaker is open; record every outcome.
#[derive(Debug, Clone)]
pub struct Breaker;

impl Step for Breaker {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        let Some(up) = call.target.as_ref().and_then(|t| t.upstream()).cloned() else {
            return inner.call(call);
        };
        if let Err(retry_in) = up.breaker.admit(Instant::now()) {
            return done(Err(CallError::BreakerOpen {
                upstream: up.name().to_owned(),
                retry_in,
            }));
        }
        let fut = inner.call(call);
        Box::pin(async move {
            let result = fut.await;
            let outcome = classify(&result, &up.breaker.config().count);
            up.breaker.record(Instant::now(), outcome);
            result
        })
    }
}

/// A failure when its class is one the breaker counts (by default: transport failures,
/// timeouts and server errors — what says the upstream is unhealthy); any other answer shows the
/// upstream answering, which is a success; a client's cancellation says nothing either way.
fn classify(result: &Result<ServerResult, CallError>, count: &[FailureClass]) -> Outcome {
    let class = match result {
        Ok(ServerResult::CallToolResult(r)) if r.is_error == Some(true) => FailureClass::IsError,
        Ok(_) => return Outcome::Success,
        Err(CallError::Cancelled) => return Outcome::Neutral,
        Err(e) => match failure_class(e) {
            Some(c) => c,
            None => return Outcome::Neutral,
        },
    };
    if count.contains(&class) {
        Outcome::Failure
    } else {
        Outcome::Success
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
