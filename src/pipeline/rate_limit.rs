//! Rate limit: after authz and trust, so keys are authenticated identities and calls that would
//! be refused anyway do not use up anyone's budget. With `[cluster] redis`, the decision is
//! made in Redis for all replicas at once; while Redis does not answer, per replica
//! (`fail = "local"`) or not at all (`fail = "closed"`: refused).

use std::sync::Arc;

use super::{
    Call, CallFuture, Exposed,
    step::{CallService, Step, done},
};
use arc_swap::ArcSwap;

use crate::{
    cluster::{rate_limit as shared, redis::Redis},
    pipeline::CallError,
    policy::rate_limit::{Limited, RateLimits},
    telemetry::metrics::Metrics,
};

/// Rate limit: every applicable rule must have a cell for this call.
#[derive(Debug, Clone)]
pub struct RateLimit {
    /// Swapped by a reload that changes the rules.
    pub limits: Arc<ArcSwap<RateLimits>>,
    pub metrics: Arc<Metrics>,
    /// The shared limiter, when `[cluster] redis` is set.
    pub redis: Option<Redis>,
}

impl Step for RateLimit {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        // A guard, not a clone: the per-replica path needs no owned copy.
        let limits = self.limits.load();
        let Some(target) = &call.target else {
            return inner.call(call);
        };
        if limits.is_empty() {
            return inner.call(call);
        }
        let item = match &target.exposed {
            Exposed::Tool(n) | Exposed::Prompt(n) | Exposed::Resource(n) => n.as_str(),
        };
        let Some(redis) = self.redis.clone() else {
            return match limits.check(&call.identity.name, &target.owner, item) {
                Ok(()) => inner.call(call),
                Err(limited) => done(Err(self.refuse(limited))),
            };
        };
        let (owner, item) = (target.owner.clone(), item.to_owned());
        let limits = arc_swap::Guard::into_inner(limits);
        let mut inner = inner.clone();
        let this = self.clone();
        Box::pin(async move {
            let applied: Vec<shared::Applied<'_>> = limits
                .applicable(&call.identity.name, &owner, &item)
                .map(|(rule, key)| shared::Applied { rule, key })
                .collect();
            let decided = match shared::check(&redis, &applied).await {
                Ok(decided) => decided,
                Err(_) => {
                    redis
                        .fall_back("rate_limits", "rate limits")
                        .map_err(|feature| CallError::StoreUnavailable { feature })?;
                    limits.check(&call.identity.name, &owner, &item)
                }
            };
            drop(applied);
            match decided {
                Ok(()) => inner.call(call).await,
                Err(limited) => Err(this.refuse(limited)),
            }
        })
    }
}

impl RateLimit {
    fn refuse(&self, limited: Limited) -> CallError {
        self.metrics
            .rate_limited
            .with_label_values(&[limited.rule.as_str()])
            .inc();
        CallError::RateLimited {
            rule: limited.rule,
            retry_after: limited.retry_after,
        }
    }
}
