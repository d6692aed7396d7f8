//! Gate: a check another part of the gateway owns decides whether a call may go on (the
//! workflows' stages, `crate::stages`); after authz, so a caller learns nothing of tools its
//! roles hide, and before trust and approval, so no one approves a call its stage forbids.

use std::{fmt::Debug, sync::Arc};

use futures::future::BoxFuture;

use crate::policy::workflow::Standing;

use super::{
    Call, CallError, CallFuture,
    step::{CallService, Step},
};

/// A check of a call before it runs.
pub trait Gate: Send + Sync + Debug {
    fn check<'a>(&'a self, call: &'a Call) -> BoxFuture<'a, Result<(), CallError>>;
    /// The workspace a client's call works in (`workflow/workspace`), if any: what a flow it
    /// starts runs its nodes in.
    fn workspace(&self, call: &Call) -> Option<String>;
    /// Where a call from `place` stands in the workflows (for what is offered to it); a store
    /// that does not answer stands nowhere: only ungated tools.
    fn standing<'a>(&'a self, place: &'a Place) -> BoxFuture<'a, Standing>;
}

/// What says which workspace a call works in: its session (bound by the stage tools) and the
/// workspace it names (the `Fedgate-Workspace` header, or a flow run's).
#[derive(Debug, Clone, Default)]
pub struct Place {
    pub session: Option<String>,
    pub workspace: Option<String>,
}

impl Place {
    pub fn of(call: &Call) -> Self {
        match &call.downstream {
            Some(d) => Self {
                session: d.session.clone(),
                workspace: d.workspace.clone(),
            },
            None => Self {
                session: None,
                workspace: call.workspace.clone(),
            },
        }
    }
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
            let mut call = call;
            // Only a gateway's own tool (a flow) carries it on: an upstream call is gated by
            // its session, so the hot path does no lookup for it.
            let own = call
                .target
                .as_ref()
                .is_some_and(|t| matches!(t.kind, super::TargetKind::Gateway(_)));
            if own && call.workspace.is_none() {
                call.workspace = gate.workspace(&call);
            }
            gate.check(&call).await?;
            inner.call(call).await
        })
    }
}
