//! Trust: classify the call (read/write/long) by its upstream's tier, refuse what the tier does
//! not allow, and set the per-class timeout the forward step applies.

use std::{
    sync::Arc,
    task::{Context, Poll},
};

use tower::{Layer, Service};

use super::{Call, CallFuture, Exposed, Op};
use crate::{
    error::CallError,
    policy::trust::{self, CallClass},
    upstream::pool::Pool,
};

#[derive(Debug, Clone)]
pub struct TrustLayer {
    pool: Arc<Pool>,
}

impl TrustLayer {
    pub fn new(pool: Arc<Pool>) -> Self {
        Self { pool }
    }
}

impl<S> Layer<S> for TrustLayer {
    type Service = Trust<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Trust {
            inner,
            pool: self.pool.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Trust<S> {
    inner: S,
    pool: Arc<Pool>,
}

impl<S> Service<Call> for Trust<S>
where
    S: Service<Call, Response = rmcp::model::ServerResult, Error = CallError, Future = CallFuture>,
{
    type Response = rmcp::model::ServerResult;
    type Error = CallError;
    type Future = CallFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: Call) -> Self::Future {
        match classify(&self.pool, &call) {
            Ok(class) => {
                if let Some(up) = call
                    .target
                    .as_ref()
                    .and_then(|t| self.pool.upstream(t.upstream))
                {
                    call.timeout = Some(trust::timeout(&up.spec, class));
                }
                call.class = Some(class);
                call.retry_safe = retry_safe(&self.pool, &call, class);
                self.inner.call(call)
            }
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

fn retry_safe(pool: &Pool, call: &Call, class: CallClass) -> bool {
    if class == CallClass::Read {
        return true;
    }
    let (Some(target), Op::CallTool(p)) = (&call.target, &call.op) else {
        return false;
    };
    let Some(up) = pool.upstream(target.upstream) else {
        return false;
    };
    let lists = up.lists();
    up.spec.tier.trust_annotations
        && lists
            .tools
            .iter()
            .find(|t| t.name == p.name)
            .and_then(|t| t.annotations.as_ref())
            .and_then(|a| a.idempotent_hint)
            == Some(true)
}

fn classify(pool: &Pool, call: &Call) -> Result<CallClass, CallError> {
    let (Some(target), Op::CallTool(p)) = (&call.target, &call.op) else {
        // Prompts, resources and completions read.
        return Ok(CallClass::Read);
    };
    let Some(up) = pool.upstream(target.upstream) else {
        return Ok(CallClass::Read);
    };
    let lists = up.lists();
    let tool = lists.tools.iter().find(|t| t.name == p.name);
    trust::decide(&up.spec, tool, &p.name).map_err(|refusal| CallError::TierRefused {
        tool: match &target.exposed {
            Exposed::Tool(n) => n.clone(),
            _ => p.name.to_string(),
        },
        tier: up.spec.tier.name.clone(),
        refusal,
    })
}
