//! Rate limit: after authz and trust, so keys are authenticated identities and calls that would
//! be refused anyway do not use up anyone's budget.

use std::{
    sync::Arc,
    task::{Context, Poll},
};

use tower::{Layer, Service};

use super::{Call, CallFuture, Exposed};
use crate::{error::CallError, upstream::pool::Pool};

#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    pool: Arc<Pool>,
}

impl RateLimitLayer {
    pub fn new(pool: Arc<Pool>) -> Self {
        Self { pool }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            pool: self.pool.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RateLimit<S> {
    inner: S,
    pool: Arc<Pool>,
}

impl<S> Service<Call> for RateLimit<S>
where
    S: Service<Call, Response = rmcp::model::ServerResult, Error = CallError, Future = CallFuture>,
{
    type Response = rmcp::model::ServerResult;
    type Error = CallError;
    type Future = CallFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: Call) -> Self::Future {
        let limits = self.pool.rate_limits();
        if let Some(target) = &call.target
            && !limits.is_empty()
        {
            let item = match &target.exposed {
                Exposed::Tool(n) | Exposed::Prompt(n) | Exposed::Resource(n) => n.as_str(),
            };
            if let Err(limited) = limits.check(&call.identity.name, &target.upstream_name, item) {
                return Box::pin(std::future::ready(Err(CallError::RateLimited {
                    rule: limited.rule,
                    retry_after: limited.retry_after,
                })));
            }
        }
        self.inner.call(call)
    }
}
