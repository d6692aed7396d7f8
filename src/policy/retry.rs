//! Retries (F9): only calls that are safe to repeat (reads, tools annotated idempotent at tiers
//! that trust annotations), only after failures that say nothing about the call itself
//! (connection lost, upstream down, timeout), with `min(max, base·2ⁿ) + random(0, jitter)`.

use std::time::Duration;

/// Per-upstream retry settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RetryPolicy {
    /// Attempts in total (1 = no retry).
    pub attempts: u32,
    #[serde(rename = "base_ms", serialize_with = "crate::clock::serialize_millis")]
    pub base: Duration,
    #[serde(rename = "max_ms", serialize_with = "crate::clock::serialize_millis")]
    pub max: Duration,
    #[serde(
        rename = "jitter_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
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
}
