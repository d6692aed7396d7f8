//! Wire: outermost, the one place a call's typed failure becomes what the client sees — a
//! JSON-RPC error in the caller's protocol era (the plan envelope is added in `observe`).
//! Everything inside it keeps the typed [`CallError`], so audit, metrics and spans record the
//! real reason.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use rmcp::{
    ErrorData as McpError,
    model::{ErrorCode, ServerResult},
};
use tower::{Layer, Service};

use super::{Call, CallError, step::CallService};

/// The error a client of either era gets for `e`.
pub fn to_wire(e: &CallError, modern: bool) -> McpError {
    let mut wire = e.to_mcp();
    // 2026-07-28 reports an unknown resource as invalid params (-32002 before).
    if modern && wire.code == ErrorCode::RESOURCE_NOT_FOUND {
        wire.code = ErrorCode::INVALID_PARAMS;
    }
    wire
}

/// Makes the stack below answer in wire errors.
#[derive(Debug, Clone, Copy, Default)]
pub struct WireLayer;

impl<S> Layer<S> for WireLayer {
    type Service = Wire<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Wire { inner }
    }
}

/// See the module doc.
#[derive(Debug, Clone)]
pub struct Wire<S> {
    inner: S,
}

pub type WireFuture = Pin<Box<dyn Future<Output = Result<ServerResult, McpError>> + Send>>;

impl<S: CallService> Service<Call> for Wire<S> {
    type Response = ServerResult;
    type Error = McpError;
    type Future = WireFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(|e| to_wire(&e, false))
    }

    fn call(&mut self, call: Call) -> Self::Future {
        let modern = call.downstream.as_ref().is_some_and(|d| d.modern);
        let fut = self.inner.call(call);
        Box::pin(async move { fut.await.map_err(|e| to_wire(&e, modern)) })
    }
}
