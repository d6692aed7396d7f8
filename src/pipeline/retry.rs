//! Retry: repeats calls that are safe to repeat after transport-level failures, with backoff.
//! Outside the breaker, so every attempt counts there, and an open breaker stops the retries.

use std::{
    sync::Arc,
    task::{Context, Poll},
};

use rmcp::model::ServerResult;
use tower::{Layer, Service};

use super::{Call, CallFuture};
use crate::{
    error::CallError,
    policy::retry::{backoff, retryable},
    upstream::pool::Pool,
};

#[derive(Debug, Clone)]
pub struct RetryLayer {
    pool: Arc<Pool>,
}

impl RetryLayer {
    pub fn new(pool: Arc<Pool>) -> Self {
        Self { pool }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Retry {
            inner,
            pool: self.pool.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Retry<S> {
    inner: S,
    pool: Arc<Pool>,
}

impl<S> Service<Call> for Retry<S>
where
    S: Service<Call, Response = ServerResult, Error = CallError, Future = CallFuture>
        + Clone
        + Send
        + 'static,
{
    type Response = ServerResult;
    type Error = CallError;
    type Future = CallFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: Call) -> Self::Future {
        let policy = call
            .target
            .as_ref()
            .and_then(|t| self.pool.upstream(t.upstream))
            .map(|u| u.spec.retry);
        let Some(policy) = policy.filter(|p| call.retry_safe && p.attempts > 1) else {
            return self.inner.call(call);
        };
        let mut inner = self.inner.clone();
        Box::pin(async move {
            let mut attempt = 1;
            loop {
                let result = inner.call(call.clone()).await;
                match result {
                    Err(e)
                        if retryable(&e)
                            && attempt < policy.attempts
                            && !call.ct.is_cancelled() =>
                    {
                        let delay = backoff(attempt, policy.base, policy.max, policy.jitter);
                        tracing::info!(
                            attempt,
                            ?delay,
                            "retrying a call that is safe to repeat: {e}"
                        );
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            _ = call.ct.cancelled() => return Err(CallError::Cancelled),
                        }
                        attempt += 1;
                    }
                    other => return other,
                }
            }
        })
    }
}
