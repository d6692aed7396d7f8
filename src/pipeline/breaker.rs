//! Breaker: the upstream's circuit breaker sees every attempt that reaches the transport;
//! while open, calls fail fast with the time until the next probe.

use rmcp::model::ServerResult;
use tokio::time::Instant;

use super::{
    Call, CallFuture,
    step::{CallService, Step, done},
};
use crate::{
    error::{Classify, Side},
    pipeline::CallError,
    policy::breaker::Outcome,
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
            let outcome = classify(&result, up.breaker.config().count_is_error);
            up.breaker.record(Instant::now(), outcome);
            result
        })
    }
}

/// Timeouts, connection errors and JSON-RPC errors from the upstream are failures; `isError`
/// results only if configured; a client's cancellation says nothing about the upstream.
fn classify(result: &Result<ServerResult, CallError>, count_is_error: bool) -> Outcome {
    match result {
        Ok(ServerResult::CallToolResult(r)) if count_is_error && r.is_error == Some(true) => {
            Outcome::Failure
        }
        Ok(_) => Outcome::Success,
        Err(CallError::Cancelled) => Outcome::Neutral,
        Err(e) if e.side() == Side::Upstream => Outcome::Failure,
        Err(_) => Outcome::Neutral,
    }
}
