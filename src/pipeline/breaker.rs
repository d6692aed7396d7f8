//! Breaker: the upstream's circuit breaker sees every attempt that reaches the transport;
//! while open, calls fail fast with the time until the next probe.

use std::{
    sync::Arc,
    task::{Context, Poll},
};

use rmcp::model::ServerResult;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::{Call, CallFuture};
use crate::{error::CallError, policy::breaker::Outcome, upstream::pool::Pool};

#[derive(Debug, Clone)]
pub struct BreakerLayer {
    pool: Arc<Pool>,
}

impl BreakerLayer {
    pub fn new(pool: Arc<Pool>) -> Self {
        Self { pool }
    }
}

impl<S> Layer<S> for BreakerLayer {
    type Service = BreakerService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        BreakerService {
            inner,
            pool: self.pool.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct BreakerService<S> {
    inner: S,
    pool: Arc<Pool>,
}

impl<S> Service<Call> for BreakerService<S>
where
    S: Service<Call, Response = ServerResult, Error = CallError, Future = CallFuture>,
{
    type Response = ServerResult;
    type Error = CallError;
    type Future = CallFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: Call) -> Self::Future {
        let Some(up) = call
            .target
            .as_ref()
            .and_then(|t| self.pool.upstream(t.upstream))
        else {
            return self.inner.call(call);
        };
        if let Err(retry_in) = up.breaker.admit(Instant::now()) {
            return Box::pin(std::future::ready(Err(CallError::BreakerOpen {
                upstream: up.name().to_owned(),
                retry_in,
            })));
        }
        let fut = self.inner.call(call);
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
        Err(e) if e.side() == crate::error::Side::Upstream => Outcome::Failure,
        Err(_) => Outcome::Neutral,
    }
}
