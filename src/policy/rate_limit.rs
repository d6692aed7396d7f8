//! Rate limits (F7): GCRA limits (governor) keyed by any combination of identity, upstream and
//! tool, from `[[rate_limits]]` and the tiers. A limited call is refused at once with the time
//! after which it would pass. Keyed state of idle keys is evicted periodically.

use std::{num::NonZeroU32, time::Duration};

use governor::{
    Quota, RateLimiter,
    clock::{Clock, DefaultClock},
    middleware::NoOpMiddleware,
    state::keyed::DefaultKeyedStateStore,
};

/// Which parts of a call make up the key of a rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyBy {
    pub identity: bool,
    pub upstream: bool,
    pub tool: bool,
}

/// One configured limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    pub name: String,
    pub by: KeyBy,
    /// Only calls to this upstream (tier limits are per upstream).
    pub upstream: Option<String>,
    pub per_second: NonZeroU32,
    pub burst: NonZeroU32,
}

type Limiter<C> =
    RateLimiter<String, DefaultKeyedStateStore<String>, C, NoOpMiddleware<<C as Clock>::Instant>>;

struct Rule<C: Clock> {
    spec: RuleSpec,
    limiter: Limiter<C>,
}

/// The refusal: which rule, and when the call would pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    pub rule: String,
    pub retry_after: Duration,
}

/// All rules, checked in order; a call must pass every rule that applies to it.
pub struct RateLimits<C: Clock = DefaultClock> {
    rules: Vec<Rule<C>>,
    clock: C,
}

impl<C: Clock> std::fmt::Debug for RateLimits<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.rules.iter().map(|r| &r.spec))
            .finish()
    }
}

impl RateLimits<DefaultClock> {
    pub fn new(specs: Vec<RuleSpec>) -> Self {
        Self::with_clock(specs, DefaultClock::default())
    }
}

impl<C: Clock> RateLimits<C> {
    /// Whether these are the limits `specs` configure (a reload then keeps their state).
    pub fn configured_as(&self, specs: &[RuleSpec]) -> bool {
        self.rules.len() == specs.len() && self.rules.iter().zip(specs).all(|(r, s)| r.spec == *s)
    }
}

impl<C: Clock + Clone> RateLimits<C> {
    /// Rules with an injected clock (tests use governor's fake clock).
    pub fn with_clock(specs: Vec<RuleSpec>, clock: C) -> Self {
        let rules = specs
            .into_iter()
            .map(|spec| {
                let quota = Quota::per_second(spec.per_second).allow_burst(spec.burst);
                Rule {
                    limiter: RateLimiter::new(
                        quota,
                        DefaultKeyedStateStore::default(),
                        clock.clone(),
                    ),
                    spec,
                }
            })
            .collect();
        Self { rules, clock }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules that apply to a call, each with the call's key under it.
    pub fn applicable<'a>(
        &'a self,
        identity: &'a str,
        upstream: &'a str,
        tool: &'a str,
    ) -> impl Iterator<Item = (&'a RuleSpec, String)> + 'a {
        self.rules
            .iter()
            .filter(move |r| r.spec.upstream.as_deref().is_none_or(|u| u == upstream))
            .map(move |r| (&r.spec, key_of(r.spec.by, identity, upstream, tool)))
    }

    /// Takes one cell from every applicable rule, or says which rule refuses and for how long.
    pub fn check(&self, identity: &str, upstream: &str, tool: &str) -> Result<(), Limited> {
        for rule in &self.rules {
            if rule.spec.upstream.as_deref().is_some_and(|u| u != upstream) {
                continue;
            }
            let key = key_of(rule.spec.by, identity, upstream, tool);
            if let Err(not_until) = rule.limiter.check_key(&key) {
                return Err(Limited {
                    rule: rule.spec.name.clone(),
                    retry_after: not_until.wait_time_from(self.clock.now()),
                });
            }
        }
        Ok(())
    }

    /// Forgets keys whose state has fully recovered, so idle keys do not accumulate.
    pub fn evict_idle(&self) {
        for rule in &self.rules {
            rule.limiter.retain_recent();
            rule.limiter.shrink_to_fit();
        }
    }

    pub fn keys(&self) -> usize {
        self.rules.iter().map(|r| r.limiter.len()).sum()
    }
}

/// The parts of a call a rule keys on, joined by a separator no name contains.
fn key_of(by: KeyBy, identity: &str, upstream: &str, tool: &str) -> String {
    let mut key = String::new();
    for (on, part) in [
        (by.identity, identity),
        (by.upstream, upstream),
        (by.tool, tool),
    ] {
        if on {
            key.push_str(part);
            key.push('\u{1f}');
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    fn rule(by: KeyBy, per_second: u32, burst: u32) -> RuleSpec {
        RuleSpec {
            name: "r".into(),
            by,
            upstream: None,
            per_second: NonZeroU32::new(per_second).unwrap(),
            burst: NonZeroU32::new(burst).unwrap(),
        }
    }

    #[test]
    fn per_identity_limits_refill_with_the_clock() {
        let clock = FakeRelativeClock::default();
        let by = KeyBy {
            identity: true,
            ..Default::default()
        };
        let limits = RateLimits::with_clock(vec![rule(by, 2, 2)], clock.clone());
        assert!(limits.check("alice", "u", "t").is_ok());
        assert!(limits.check("alice", "u", "t").is_ok());
        let refused = limits.check("alice", "u", "t").unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_millis(500));
        assert!(
            limits.check("bob", "u", "t").is_ok(),
            "keys are independent"
        );
        clock.advance(Duration::from_millis(500));
        assert!(
            limits.check("alice", "u", "t").is_ok(),
            "one cell back after 1/rate"
        );
        assert!(limits.check("alice", "u", "t").is_err());
    }

    #[test]
    fn combined_keys_and_upstream_scope() {
        let clock = FakeRelativeClock::default();
        let by = KeyBy {
            upstream: true,
            tool: true,
            ..Default::default()
        };
        let mut scoped = rule(by, 1, 1);
        scoped.upstream = Some("slow".into());
        let limits = RateLimits::with_clock(vec![scoped], clock.clone());
        assert!(limits.check("a", "slow", "x").is_ok());
        assert!(
            limits.check("b", "slow", "x").is_err(),
            "same upstream+tool, any identity"
        );
        assert!(
            limits.check("a", "slow", "y").is_ok(),
            "another tool is another key"
        );
        assert!(
            limits.check("a", "fast", "x").is_ok() && limits.check("a", "fast", "x").is_ok(),
            "other upstreams are not limited"
        );
    }

    #[test]
    fn idle_keys_are_evicted() {
        let clock = FakeRelativeClock::default();
        let by = KeyBy {
            identity: true,
            ..Default::default()
        };
        let limits = RateLimits::with_clock(vec![rule(by, 10, 1)], clock.clone());
        for i in 0..100 {
            let _ = limits.check(&format!("client-{i}"), "u", "t");
        }
        assert_eq!(limits.keys(), 100);
        clock.advance(Duration::from_secs(1));
        limits.evict_idle();
        assert_eq!(limits.keys(), 0);
    }
}
