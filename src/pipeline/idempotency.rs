//! Idempotency: a call carrying `_meta.idempotencyKey` that was already answered (same caller,
//! tool and arguments, within the TTL) gets the recorded answer without reaching the upstream;
//! a duplicate that arrives while the first still runs waits for its answer, so concurrent
//! duplicates run once. With `[cluster] redis` the same holds across replicas: the key is
//! claimed in Redis too (see `stores::idempotency`).

use std::sync::Arc;

use tokio::time::Instant;

use super::{
    Call, CallFuture, Op,
    step::{CallService, Step, done},
};
use crate::{
    pipeline::CallError,
    stores::{
        Store,
        idempotency::{Claim, IdempotencyStore, META_KEY, SharedClaim, SharedRecords},
    },
    telemetry::audit::hash_arguments,
};

/// Idempotency: replay the recorded answer of a repeated key.
#[derive(Debug, Clone)]
pub struct Idempotency {
    pub store: Arc<IdempotencyStore>,
    /// The records every replica shares (`[cluster] redis`), or this replica's alone.
    pub records: Store<dyn SharedRecords>,
}

impl Step for Idempotency {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        let Op::CallTool(p) = &call.op else {
            return inner.call(call);
        };
        let Some(key) = call.meta.get(META_KEY).and_then(|k| k.as_str()) else {
            return inner.call(call);
        };
        // Scoped by who calls which upstream's tool: `a.echo` and `b.echo` never share records.
        let owner = call
            .target
            .as_ref()
            .map(|t| t.owner.as_ref())
            .unwrap_or_default();
        let scoped = format!(
            "{}\u{1f}{owner}\u{1f}{}\u{1f}{key}",
            call.identity.key(),
            p.name
        );
        let args = hash_arguments(&serde_json::Value::Object(
            p.arguments.clone().unwrap_or_default(),
        ));
        // A retry carrying input answers continues an input-required round: it is not a repeat
        // (its final answer is recorded like a first call's).
        let continuing = p.request_state.is_some() || p.input_responses.is_some();
        if continuing {
            let store = self.store.clone();
            let fut = inner.call(call);
            return Box::pin(async move {
                let result = fut.await;
                if let Ok(r) = &result
                    && !matches!(r, rmcp::model::ServerResult::InputRequiredResult(_))
                {
                    store.record(scoped, args, r.clone(), Instant::now());
                }
                result
            });
        }
        match self.store.claim(&scoped, &args, Instant::now()) {
            Claim::Recorded(result) => {
                tracing::info!(identity = %call.identity.name, "idempotency key seen before: recorded result returned");
                done(Ok(*result))
            }
            Claim::Conflict => done(Err(CallError::IdempotencyConflict)),
            Claim::Wait(mut answer) => {
                // The same call runs already: its answer is this one's. Should it end without
                // one (failed, cancelled), this call runs itself.
                let mut inner = inner.clone();
                Box::pin(async move {
                    let waited = answer
                        .wait_for(Option::is_some)
                        .await
                        .ok()
                        .and_then(|r| r.clone());
                    match waited {
                        Some(result) => Ok(result),
                        None => inner.call(call).await,
                    }
                })
            }
            Claim::Lead(leader) => {
                let (records, ttl) = (self.records.clone(), self.store.ttl());
                let mut inner = inner.clone();
                Box::pin(async move {
                    let claimed = records
                        .run(|r| r.claim(&scoped, &args, ttl))
                        .await
                        .map_err(|u| CallError::StoreUnavailable { feature: u.0 })?;
                    let shared_lead = match claimed {
                        SharedClaim::Lead(lead) => lead,
                        SharedClaim::Recorded(result) => {
                            tracing::info!(identity = %call.identity.name, "idempotency key seen on another replica: recorded result returned");
                            leader.finish((*result).clone());
                            return Ok(*result);
                        }
                        SharedClaim::Conflict => return Err(CallError::IdempotencyConflict),
                    };
                    let result = inner.call(call).await;
                    // Only final answers are recorded: an input-required round is not the
                    // call's result, and replaying it would never let the call finish.
                    if let Ok(r) = &result
                        && !matches!(r, rmcp::model::ServerResult::InputRequiredResult(_))
                    {
                        if let Some(lead) = shared_lead {
                            lead.finish(r).await;
                        }
                        leader.finish(r.clone());
                    }
                    result
                })
            }
        }
    }
}
