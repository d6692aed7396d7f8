//! Rate limit: after authz and trust, so keys are authenticated identities and calls that would
//! be refused anyway do not use up anyone's budget.

use std::sync::Arc;

use super::{
    Call, CallFuture, Exposed,
    step::{CallService, Step, done},
};
use arc_swap::ArcSwap;

use crate::{pipeline::CallError, policy::rate_limit::RateLimits, telemetry::metrics::Metrics};

/// Rate limit: every applicable rule must have a cell for this call.
#[derive(Debug, Clone)]
pub struct RateLimit {
    /// Swapped by a reload that changes the rules.
    pub limits: Arc<ArcSwap<RateLimits>>,
    pub metrics: Arc<Metrics>,
}

impl Step for RateLimit {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        let limits = self.limits.load();
        if let Some(target) = &call.target
            && !limits.is_empty()
        {
            let item = match &target.exposed {
                Exposed::Tool(n) | Exposed::Prompt(n) | Exposed::Resource(n) => n.as_str(),
            };
            if let Err(limited) = limits.check(&call.identity.name, &target.owner, item) {
                self.metrics
                    .rate_limited
                    .with_label_values(&[limited.rule.as_str()])
                    .inc();
                return done(Err(CallError::RateLimited {
                    rule: limited.rule,
                    retry_after: limited.retry_after,
                }));
            }
        }
        inner.call(call)
    }
}
