//! Rate limit: after authz and trust, so keys are authenticated identities and calls that would
//! be refused anyway do not use up anyone's budget. Where the cells are taken (this replica,
//! or Redis for all replicas with this replica as the fallback) is the store's business
//! (`stores::rate_limits`).

use std::sync::Arc;

use super::{
    Call, CallFuture, Exposed,
    step::{CallService, Step},
};
use arc_swap::ArcSwap;

use crate::{
    pipeline::CallError,
    policy::rate_limit::{Limited, RateLimits},
    stores::{
        Store,
        rate_limits::{Key, RateLimitStore},
    },
    telemetry::metrics::Metrics,
};

/// Rate limit: every applicable rule must have a cell for this call.
#[derive(Debug, Clone)]
pub struct RateLimit {
    /// Swapped by a reload that changes the rules.
    pub limits: Arc<ArcSwap<RateLimits>>,
    pub metrics: Arc<Metrics>,
    pub store: Store<dyn RateLimitStore>,
}

impl Step for RateLimit {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        let Some(target) = &call.target else {
            return inner.call(call);
        };
        let limits = self.limits.load_full();
        if limits.is_empty() {
            return inner.call(call);
        }
        let owner = target.owner.clone();
        let item = match &target.exposed {
            Exposed::Tool(n) | Exposed::Prompt(n) | Exposed::Resource(n) => n.clone(),
        };
        let (this, mut inner) = (self.clone(), inner.clone());
        Box::pin(async move {
            // Kind and name: an API key and a JWT that share a name have budgets of their own.
            let who = call.identity.key();
            let key = Key {
                identity: &who,
                owner: &owner,
                item: &item,
            };
            let decided = this
                .store
                .run(|s| s.take(&limits, key))
                .await
                .map_err(|u| CallError::StoreUnavailable { feature: u.0 })?;
            match decided {
                Ok(()) => inner.call(call).await,
                Err(limited) => Err(this.refuse(limited)),
            }
        })
    }
}

impl RateLimit {
    fn refuse(&self, limited: Limited) -> CallError {
        self.metrics.rate_limited_by(&limited.rule);
        CallError::RateLimited {
            rule: limited.rule,
            retry_after: limited.retry_after,
        }
    }
}
