//! Retry: repeats calls that are safe to repeat after transport-level failures, with backoff.
//! Outside the breaker, so every attempt counts there, and an open breaker stops the retries.

use super::{
    Call, CallFuture,
    step::{CallService, Step},
};
use crate::{error::Classify, pipeline::CallError, policy::retry::backoff};

/// Retry: repeat calls that are safe to repeat after transport failures.
#[derive(Debug, Clone)]
pub struct Retry;

impl Step for Retry {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        let policy = call
            .target
            .as_ref()
            .and_then(|t| t.upstream())
            .map(|u| u.spec().retry);
        let Some(policy) = policy.filter(|p| call.retry_safe && p.attempts > 1) else {
            return inner.call(call);
        };
        let mut inner = inner.clone();
        Box::pin(async move {
            let mut attempt = 1;
            loop {
                let result = inner.call(call.clone()).await;
                match result {
                    Err(e)
                        if e.retryable()
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
