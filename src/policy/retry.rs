//! Retries (F9): only calls that are safe to repeat (reads, tools annotated idempotent at tiers
//! that trust annotations), only after failures that say nothing about the call itself
//! (connection lost, upstream down, timeout), with `min(max, base·2ⁿ) + random(0, jitter)`.

use std::time::Duration;

use crate::error::CallError;

/// Per-upstream retry settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total (1 = no retry).
    pub attempts: u32,
    pub base: Duration,
    pub max: Duration,
    pub jitter: Duration,
}

/// `min(max, base * 2^(n-1)) + random(0, jitter)` for the n-th retry (n ≥ 1).
pub fn backoff(n: u32, base: Duration, max: Duration, jitter: Duration) -> Duration {
    let exp = base.saturating_mul(1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX));
    let jitter_ms = match u64::try_from(jitter.as_millis()) {
        Ok(j) if j > 0 => rand::random::<u64>() % j,
        _ => 0,
    };
    exp.min(max) + Duration::from_millis(jitter_ms)
}

/// Whether a failure is worth another attempt of a call that is safe to repeat.
pub fn retryable(e: &CallError) -> bool {
    matches!(
        e,
        CallError::UpstreamClosed { .. }
            | CallError::UpstreamUnavailable { .. }
            | CallError::UpstreamTimeout { .. }
            | CallError::UpstreamFailed { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_max_plus_jitter() {
        let base = Duration::from_millis(100);
        let max = Duration::from_millis(1000);
        for n in 1..12 {
            let d = backoff(n, base, max, base);
            let floor = (base * 2u32.pow(n - 1)).min(max);
            assert!(d >= floor && d < floor + base, "n={n} d={d:?}");
        }
        assert_eq!(
            backoff(3, base, max, Duration::ZERO),
            Duration::from_millis(400)
        );
    }

    #[test]
    fn only_transport_failures_are_retried() {
        let closed = CallError::UpstreamClosed {
            upstream: "u".into(),
            uncertain: false,
        };
        assert!(retryable(&closed));
        let refused = CallError::UpstreamRefused {
            upstream: "u".into(),
            error: rmcp::ErrorData::invalid_params("no", None),
        };
        assert!(!retryable(&refused));
        assert!(!retryable(&CallError::Cancelled));
    }
}
