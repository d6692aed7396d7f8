//! Forward: the call leaves for its upstream; progress comes back in order, before the result.
#![allow(deprecated)] // resources/(un)subscribe are legacy-only and still forwarded

use std::task::{Context, Poll};

use rmcp::{
    model::{
        CallToolRequest, CancelledNotificationParam, ClientRequest, CompleteRequest, GetExtensions,
        GetPromptRequest, ReadResourceRequest, RequestMetaObject, ResultType, ServerResult,
        SubscribeRequest, UnsubscribeRequest,
    },
    service::PeerRequestOptions,
};
use tower::Service;

use opentelemetry::trace::TraceContextExt;

use super::{Call, CallFuture, Op};
use crate::{
    error::CallError,
    policy::trust::CallClass,
    telemetry::traces::{self, KeyValue, SpanKind, Status, Tracer},
    upstream::{
        Connection, DetectedEra,
        inflight::{CallEvent, Downstream},
    },
};

/// `_meta` keys that belong to one hop and are never copied to the next.
const HOP_META_PREFIX: &str = "io.modelcontextprotocol/";
const PROGRESS_TOKEN_KEY: &str = "progressToken";

/// The terminal: sends the call to the upstream the route holds.
#[derive(Debug, Clone)]
pub struct Forward;

impl Service<Call> for Forward {
    type Response = ServerResult;
    type Error = CallError;
    type Future = CallFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: Call) -> Self::Future {
        Box::pin(forward(call))
    }
}

async fn forward(call: Call) -> Result<ServerResult, CallError> {
    let target = call
        .target
        .clone()
        .ok_or_else(|| CallError::UpstreamFailed {
            upstream: String::new(),
            detail: "call reached forward without a route".into(),
        })?;
    let up = target.upstream.clone();
    let spec = up.spec();
    let conn = up.connection().ok_or_else(|| {
        let s = up.status();
        CallError::UpstreamUnavailable {
            upstream: target.upstream_name.clone(),
            phase: s.phase,
            detail: s.last_error,
        }
    })?;
    let timeout = call.timeout.unwrap_or(spec.call_timeout);
    let name = target.upstream_name.as_str();
    let write = call.class == Some(CallClass::Write);
    let mut call = call;
    let cx = client_span(&call, name, spec.transport.kind());
    // The upstream continues the trace under this attempt's span (and an HTTP upstream also
    // gets it as the `traceparent` header, copied from here).
    traces::inject(&cx, &mut call.meta);
    let result = send(&conn, name, call, timeout)
        .await
        .map_err(|e| mark_uncertain(e, write));
    let span = cx.span();
    match &result {
        Ok(ServerResult::CallToolResult(r)) if r.is_error == Some(true) => {
            span.set_attribute(KeyValue::new("error.type", "tool_error"));
        }
        Ok(_) => {}
        Err(e) => {
            span.set_attribute(KeyValue::new("error.type", e.code()));
            span.set_status(Status::error(e.code()));
        }
    }
    span.end();
    let result = result?;
    if let Some(max) = spec.tier.max_response_bytes {
        let size = serde_json::to_vec(&result)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > max {
            return Err(CallError::ResponseTooLarge {
                upstream: target.upstream_name.clone(),
                size,
                max,
            });
        }
    }
    Ok(normalise(result))
}

/// The client span of one attempt at the upstream, under the call's server span.
fn client_span(call: &Call, upstream: &str, transport: &'static str) -> opentelemetry::Context {
    let tracer = traces::tracer();
    let (method, own_name) = match &call.op {
        Op::CallTool(p) => ("tools/call", Some(p.name.to_string())),
        Op::GetPrompt(p) => ("prompts/get", Some(p.name.clone())),
        op => (op.method(), None),
    };
    let mut attrs = vec![
        KeyValue::new("mcp.method.name", method),
        KeyValue::new("fedgate.upstream", upstream.to_owned()),
        KeyValue::new("fedgate.upstream.transport", transport),
    ];
    if let (Op::CallTool(_), Some(n)) = (&call.op, &own_name) {
        attrs.push(KeyValue::new("gen_ai.tool.name", n.clone()));
    }
    let span_name = match &own_name {
        Some(n) => format!("{method} {upstream}/{n}"),
        None => format!("{method} {upstream}"),
    };
    let span = tracer
        .span_builder(span_name)
        .with_kind(SpanKind::Client)
        .with_attributes(attrs)
        .start_with_context(&tracer, &call.trace);
    call.trace.with_span(span)
}

/// Sends one request and waits for its response, relaying progress downstream meanwhile.
async fn send(
    conn: &Connection,
    upstream: &str,
    call: Call,
    timeout: std::time::Duration,
) -> Result<ServerResult, CallError> {
    let Call {
        op,
        meta,
        downstream,
        progress_token,
        ct,
        ..
    } = call;
    let (guard, mut events) = conn.inflight.open(downstream.clone());
    let mut request = to_request(op);
    request.extensions_mut().insert(guard.key);
    let options =
        PeerRequestOptions::no_options().with_meta(hop_meta(meta, conn.era, downstream.as_ref()));
    let handle = conn
        .peer
        .send_request_with_option(request, options)
        .await
        .map_err(|e| CallError::from_service(upstream, e))?;
    let upstream_id = handle.id.clone();
    let response = handle.await_response();
    tokio::pin!(response);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let relay = |ev| relay(downstream.as_ref(), progress_token.as_ref(), ev);
    let outcome = loop {
        tokio::select! {
            biased;
            Some(ev) = events.recv() => relay(ev).await,
            r = &mut response => {
                // Everything the upstream sent before its response is already queued.
                while let Ok(ev) = events.try_recv() {
                    relay(ev).await;
                }
                break r.map_err(|e| CallError::from_service(upstream, e));
            }
            _ = ct.cancelled() => {
                cancel_upstream(conn, upstream_id.clone(), "cancelled by the client").await;
                break Err(CallError::Cancelled);
            }
            _ = &mut deadline => {
                cancel_upstream(conn, upstream_id.clone(), "fedgate call timeout").await;
                break Err(CallError::UpstreamTimeout {
                    upstream: upstream.to_owned(),
                    after: timeout,
                    uncertain: false,
                });
            }
        }
    };
    drop(guard);
    outcome
}

/// A write that timed out or lost its connection may have happened.
fn mark_uncertain(e: CallError, write: bool) -> CallError {
    match e {
        CallError::UpstreamTimeout {
            upstream, after, ..
        } => CallError::UpstreamTimeout {
            upstream,
            after,
            uncertain: write,
        },
        CallError::UpstreamClosed { upstream, .. } => CallError::UpstreamClosed {
            upstream,
            uncertain: write,
        },
        other => other,
    }
}

/// Passes one upstream notification of this call to the caller, in arrival order.
async fn relay(
    downstream: Option<&Downstream>,
    token: Option<&rmcp::model::ProgressToken>,
    ev: CallEvent,
) {
    let Some(d) = downstream else { return };
    match ev {
        CallEvent::Progress(mut p) => {
            // A caller that sent no progress token asked for no progress.
            if let Some(token) = token {
                p.progress_token = token.clone();
                let _ = d.peer.notify_progress(p).await;
            }
        }
        CallEvent::Log(l) => {
            if d.log_level.is_some_and(|min| l.level as u8 >= min as u8) {
                let _ = d.peer.notify_logging_message(l).await;
            }
        }
    }
}

async fn cancel_upstream(conn: &Connection, id: rmcp::model::RequestId, reason: &str) {
    let p = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
    let _ = conn.peer.notify_cancelled(p).await;
}

/// The downstream `_meta` minus what belongs to the downstream hop only. A stateless-era
/// upstream decides per request what to ask of the client and what to log, so it gets the
/// caller's capabilities and log level (rmcp fills in the rest of the hop's metadata).
fn hop_meta(
    mut meta: RequestMetaObject,
    era: DetectedEra,
    downstream: Option<&Downstream>,
) -> RequestMetaObject {
    meta.retain(|k, _| k != PROGRESS_TOKEN_KEY && !k.starts_with(HOP_META_PREFIX));
    if era == DetectedEra::Stateless
        && let Some(d) = downstream
    {
        if let Some(caps) = &d.capabilities {
            meta.set_client_capabilities(caps.clone());
        }
        if let Some(level) = d.log_level {
            meta.set_log_level(level);
        }
    }
    meta
}

fn to_request(op: Op) -> ClientRequest {
    match op {
        Op::CallTool(p) => ClientRequest::CallToolRequest(CallToolRequest::new(p)),
        Op::GetPrompt(p) => ClientRequest::GetPromptRequest(GetPromptRequest::new(p)),
        Op::ReadResource(p) => ClientRequest::ReadResourceRequest(ReadResourceRequest::new(p)),
        Op::Complete(p) => ClientRequest::CompleteRequest(CompleteRequest::new(p)),
        Op::Subscribe(p) => ClientRequest::SubscribeRequest(SubscribeRequest::new(p)),
        Op::Unsubscribe(p) => ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(p)),
    }
}

/// Legacy upstreams omit `resultType`; modern clients require it (rmcp strips it again for
/// legacy clients).
fn normalise(result: ServerResult) -> ServerResult {
    match result {
        ServerResult::CallToolResult(mut r) => {
            r.result_type.get_or_insert(ResultType::COMPLETE);
            ServerResult::CallToolResult(r)
        }
        ServerResult::GetPromptResult(mut r) => {
            r.result_type.get_or_insert(ResultType::COMPLETE);
            ServerResult::GetPromptResult(r)
        }
        ServerResult::ReadResourceResult(mut r) => {
            r.result_type.get_or_insert(ResultType::COMPLETE);
            ServerResult::ReadResourceResult(r)
        }
        other => other,
    }
}
