//! Gate: a check another part of the gateway owns decides whether a call may go on (the
//! workflows' stages, `crate::stages`); after authz, so a caller learns nothing of tools its
//! roles hide, and before trust and approval, so no one approves a call its stage forbids.

use std::{fmt::Debug, sync::Arc};

use futures::future::BoxFuture;

use super::{
    Call, CallError, CallFuture,
    step::{CallService, Step},
};

/// A check of a call before it runs.
pub trait Gate: Send + Sync + Debug {
    fn check<'a>(&'a self, call: &'a Call) -> BoxFuture<'a, Result<(), CallError>>;
}

/// Runs the gate, if there is one.
#[derive(Debug, Clone)]
pub struct GateStep(pub Option<Arc<dyn Gate>>);

impl Step for GateStep {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        let Some(gate) = self.0.clone() else {
            return inner.call(call);
        };
        let mut inner = inner.clone();
        Box::pin(async move {
            gate.check(&call).await?;
            inner.call(call).await
        })
    }
}
