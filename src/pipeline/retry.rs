//! Retry: repeats calls that are safe to repeat after transport-level failures, with backoff.
//! Outside the breaker, so every attempt counts there, and an open breaker stops the retries.
//! All attempts together stay within the call's deadline (its tier's timeout).

use tokio::time::Instant;

use super::{
    Call, CallFuture,
    step::{CallService, Step},
};
use crate::{error::Again, pipeline::CallError, policy::retry::backoff};

/// Retry: repeat calls that are safe to repeat after transport failures.
#[derive(Debug, Clone)]
pub struct Retry;

impl Step for Retry {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        let policy = call
            .target
            .as_ref()
            .and_then(|t| t.route())
            .map(|r| r.spec.retry);
        let Some(policy) = policy.filter(|p| call.decided.retry_safe() && p.attempts > 1) else {
            return inner.call(call);
        };
        let mut inner = inner.clone();
        // Retries share the call's deadline: every attempt gets what is left of it, and no
        // retry starts that could not finish in time.
        let deadline = call.decided.timeout().map(|t| Instant::now() + t);
        Box::pin(async move {
            let mut attempt = 1;
            loop {
                let mut this_try = call.clone();
                if let Some(d) = deadline {
                    this_try
                        .decided
                        .remaining(d.saturating_duration_since(Instant::now()));
                }
                let result = inner.call(this_try).await.map_err(|mut e| {
                    // A timeout is the call's, not the attempt's remainder of it.
                    if let (CallError::UpstreamTimeout { after, .. }, Some(full)) =
                        (&mut e, call.decided.timeout())
                    {
                        *after = full;
                    }
                    e
                });
                match result {
                    Err(e)
                        // Only what may pass at once: a wait (`Again::Later`) would spend the
                        // call's deadline; the breaker and limits say so to the caller instead.
                        if e.describe().again == Again::Now
                            && attempt < policy.attempts
                            && !call.ct.is_cancelled() =>
                    {
                        let delay = backoff(attempt, policy.base, policy.max, policy.jitter);
                        if deadline.is_some_and(|d| Instant::now() + delay >= d) {
                            return Err(e);
                        }
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
