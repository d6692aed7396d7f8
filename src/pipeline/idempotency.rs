//! Idempotency: a call carrying `_meta.idempotencyKey` that was already answered (same caller,
//! tool and arguments, within the TTL) gets the recorded answer without reaching the upstream.

use std::{
    sync::Arc,
    task::{Context, Poll},
};

use rmcp::model::ServerResult;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::{Call, CallFuture, Op};
use crate::{
    error::CallError,
    policy::idempotency::{Lookup, META_KEY},
    telemetry::audit::hash_arguments,
    upstream::pool::Pool,
};

#[derive(Debug, Clone)]
pub struct IdempotencyLayer {
    pool: Arc<Pool>,
}

impl IdempotencyLayer {
    pub fn new(pool: Arc<Pool>) -> Self {
        Self { pool }
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = Idempotency<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Idempotency {
            inner,
            pool: self.pool.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Idempotency<S> {
    inner: S,
    pool: Arc<Pool>,
}

impl<S> Service<Call> for Idempotency<S>
where
    S: Service<Call, Response = ServerResult, Error = CallError, Future = CallFuture>,
{
    type Response = ServerResult;
    type Error = CallError;
    type Future = CallFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: Call) -> Self::Future {
        let Op::CallTool(p) = &call.op else {
            return self.inner.call(call);
        };
        let Some(key) = call.meta.get(META_KEY).and_then(|k| k.as_str()) else {
            return self.inner.call(call);
        };
        let scoped = format!("{}\u{1f}{}\u{1f}{key}", call.identity.name, p.name);
        let args = hash_arguments(&serde_json::Value::Object(
            p.arguments.clone().unwrap_or_default(),
        ));
        let store = self.pool.idempotency().clone();
        match store.lookup(&scoped, &args, Instant::now()) {
            Lookup::Recorded(result) => {
                tracing::info!(identity = %call.identity.name, "idempotency key seen before: recorded result returned");
                Box::pin(std::future::ready(Ok(*result)))
            }
            Lookup::Conflict => Box::pin(std::future::ready(Err(CallError::IdempotencyConflict))),
            Lookup::New => {
                let fut = self.inner.call(call);
                Box::pin(async move {
                    let result = fut.await;
                    if let Ok(r) = &result {
                        store.record(scoped, args, r.clone(), Instant::now());
                    }
                    result
                })
            }
        }
    }
}
