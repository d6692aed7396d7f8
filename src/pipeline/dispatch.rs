//! Dispatch: the inner stack's terminal, chosen by the kind of target a call resolved to — an
//! upstream's own stack (connect → retry → breaker → forward) or one of the gateway's own tools
//! (flows are own tools; peer gateways are upstreams of `kind = "peer"`).

use std::task::{Context, Poll};

use rmcp::model::ServerResult;
use tower::Service;

use super::{Call, CallError, CallFuture, TargetKind, step::CallService};

/// See the module doc.
#[derive(Debug, Clone)]
pub struct Dispatch<U> {
    upstream: U,
}

impl<U> Dispatch<U> {
    pub fn new(upstream: U) -> Self {
        Self { upstream }
    }
}

impl<U: CallService> Service<Call> for Dispatch<U> {
    type Response = ServerResult;
    type Error = CallError;
    type Future = CallFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.upstream.poll_ready(cx)
    }

    fn call(&mut self, call: Call) -> Self::Future {
        match call.target.as_ref().map(|t| &t.kind) {
            Some(TargetKind::Gateway(tool)) => {
                let tool = tool.clone();
                tool.call(call)
            }
            // Upstream targets, and the (impossible) unresolved call, which forward refuses.
            _ => self.upstream.call(call),
        }
    }
}
