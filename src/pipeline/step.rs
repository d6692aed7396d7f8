//! The shape every policy layer shares: a `Step` decides what to do with a call and may pass it
//! to the inner service; `StepLayer` makes any step a tower layer over the rest of the stack.

use std::task::{Context, Poll};

use rmcp::model::ServerResult;
use tower::{Layer, Service};

use super::{Call, CallFuture};
use crate::pipeline::CallError;

/// The services below a step: the rest of the stack.
pub trait CallService:
    Service<Call, Response = ServerResult, Error = CallError, Future = CallFuture>
    + Clone
    + Send
    + 'static
{
}

impl<T> CallService for T where
    T: Service<Call, Response = ServerResult, Error = CallError, Future = CallFuture>
        + Clone
        + Send
        + 'static
{
}

/// One policy of the call stack; it owns the state it decides with.
pub trait Step: Clone + Send + Sync + 'static {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture;
}

/// Makes a [`Step`] a tower layer.
#[derive(Debug, Clone)]
pub struct StepLayer<P> {
    step: P,
}

impl<P> StepLayer<P> {
    pub fn new(step: P) -> Self {
        Self { step }
    }
}

impl<P: Clone, S> Layer<S> for StepLayer<P> {
    type Service = StepService<P, S>;
    fn layer(&self, inner: S) -> Self::Service {
        StepService {
            inner,
            step: self.step.clone(),
        }
    }
}

/// A [`Step`] in front of the rest of the stack.
#[derive(Debug, Clone)]
pub struct StepService<P, S> {
    inner: S,
    step: P,
}

impl<P: Step, S: CallService> Service<Call> for StepService<P, S> {
    type Response = ServerResult;
    type Error = CallError;
    type Future = CallFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: Call) -> Self::Future {
        self.step.run(&mut self.inner, call)
    }
}

/// A finished answer (a refusal) without calling further in.
pub fn done(result: Result<ServerResult, CallError>) -> CallFuture {
    Box::pin(std::future::ready(result))
}
