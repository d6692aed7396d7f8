//! Forward: the call leaves for its upstream; progress comes back in order, before the result.
#![allow(deprecated)] // resources/(un)subscribe are legacy-only and still forwarded

use std::task::{Context, Poll};

use opentelemetry::trace::TraceContextExt;
use rmcp::model::{ResultType, ServerResult};
use tower::Service;

use super::{Call, CallFuture, Op, roundtrip::exchange::RoundTrip};
use crate::{
    pipeline::CallError,
    policy::trust::CallClass,
    telemetry::traces::{self, KeyValue, SpanKind, Status},
    upstream::{Connection, DetectedEra, Upstream},
};

/// The terminal: sends the call to the upstream the route holds (the round trip bridges the
/// eras' ways of asking the caller for input), and checks what comes back.
#[derive(Debug, Clone)]
pub struct Forward {
    roundtrip: RoundTrip,
    /// Opens the connections of upstreams that act as each person.
    pool: std::sync::Arc<crate::upstream::pool::Pool>,
}

impl Forward {
    pub fn new(roundtrip: RoundTrip, pool: std::sync::Arc<crate::upstream::pool::Pool>) -> Self {
        Self { roundtrip, pool }
    }
}

impl Service<Call> for Forward {
    type Response = ServerResult;
    type Error = CallError;
    type Future = CallFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: Call) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.forward(call).await })
    }
}

impl Forward {
    async fn forward(&self, call: Call) -> Result<ServerResult, CallError> {
        let target = call
            .target
            .clone()
            .ok_or_else(|| CallError::UpstreamFailed {
                upstream: String::new(),
                detail: "call reached forward without a route".into(),
            })?;
        let route = target.route().cloned().ok_or_else(|| CallError::Internal {
            detail: "a call for the gateway's own tool reached forward".into(),
        })?;
        let (up, spec) = (route.upstream, route.spec);
        let conn = self.connection(&up, &call).await?;
        if conn.era == DetectedEra::Stateless
            && let Some(done) = watch_resource(&up, &conn, &call.op)
        {
            return done;
        }
        let timeout = call.decided.timeout().unwrap_or(spec.call_timeout);
        let name: &str = &target.owner;
        // A long-running call may write too: only reads are certain to have done nothing.
        let write = call.decided.class().is_some_and(|c| c != CallClass::Read);
        let mut call = call;
        let cx = client_span(&call, name, spec.transport.kind());
        // The upstream continues the trace under this attempt's span (and an HTTP upstream also
        // gets it as the `traceparent` header, copied from here).
        traces::inject(&cx, &mut call.meta);
        let result = self
            .roundtrip
            .exchange(&conn, name, call, timeout)
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
            let size = crate::json_size::encoded_len(&result);
            if size > max {
                return Err(CallError::ResponseTooLarge {
                    upstream: target.owner.to_string(),
                    size,
                    max,
                });
            }
        }
        Ok(normalise(result))
    }
}

impl Forward {
    /// The connection the call goes over: the caller's own, for an upstream that acts as each
    /// person (the connect step put their token on the call), else the shared one.
    async fn connection(
        &self,
        up: &std::sync::Arc<Upstream>,
        call: &super::Call,
    ) -> Result<std::sync::Arc<Connection>, CallError> {
        let unavailable = || {
            let s = up.status();
            CallError::UpstreamUnavailable {
                upstream: up.name().to_owned(),
                phase: s.phase,
                detail: s.last_error,
            }
        };
        let Some(person) = call.decided.person().filter(|_| up.per_user()) else {
            return up.connection().ok_or_else(unavailable);
        };
        if up.phase() != crate::upstream::Phase::Ready {
            return Err(unavailable());
        }
        self.pool
            .person_connection(up, &call.identity.key(), &person.0)
            .await
            .map_err(|e| person_refusal(up.name(), e))
    }
}

/// Why a person's own connection did not open, as the pipeline handles it: their credential
/// refused goes back to the connect step (refresh, or ask again); anything else is the
/// upstream's failure.
pub(super) fn person_refusal(
    upstream: &str,
    e: crate::upstream::error::UpstreamError,
) -> CallError {
    use crate::upstream::error::UpstreamError;
    match e {
        UpstreamError::PersonRefused => CallError::UpstreamRefused {
            upstream: upstream.to_owned(),
            error: Box::new(rmcp::ErrorData::new(
                rmcp::model::ErrorCode(crate::upstream::http_client::PERSON_REJECTED),
                "the upstream refused the caller's own credential",
                None,
            )),
            found: Vec::new(),
        },
        UpstreamError::PersonNeedsScope(scope) => CallError::UpstreamRefused {
            upstream: upstream.to_owned(),
            error: Box::new(rmcp::ErrorData::new(
                rmcp::model::ErrorCode(crate::upstream::http_client::PERSON_NEEDS_SCOPE),
                "the caller's own credential lacks a scope the upstream asks for",
                Some(serde_json::json!({"scope": scope})),
            )),
            found: Vec::new(),
        },
        UpstreamError::PersonSessionsFull { .. } => {
            CallError::Connect(Box::new(super::ConnectRefusal {
                code: "person_sessions_full",
                upstream: upstream.to_owned(),
                url: None,
                message: e.to_string(),
                as_error: false,
            }))
        }
        other => CallError::UpstreamFailed {
            upstream: upstream.to_owned(),
            detail: format!("connecting as you: {other}"),
        },
    }
}

/// `resources/(un)subscribe` for a stateless-era upstream, which has neither method: the URI
/// joins (or leaves) the filter of fedgate's `subscriptions/listen` stream to it. `None` for
/// any other request.
fn watch_resource(
    up: &Upstream,
    conn: &Connection,
    op: &Op,
) -> Option<Result<ServerResult, CallError>> {
    let (uri, on) = match op {
        Op::Subscribe(p) => (&p.uri, true),
        Op::Unsubscribe(p) => (&p.uri, false),
        _ => return None,
    };
    let offered = conn
        .peer
        .peer_info()
        .is_some_and(|i| i.capabilities.resources.as_ref().and_then(|r| r.subscribe) == Some(true));
    if on && !offered {
        return Some(Err(CallError::UpstreamRefused {
            upstream: up.name().to_owned(),
            error: Box::new(rmcp::ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "this upstream offers no resource subscriptions",
                None,
            )),
            found: Vec::new(),
        }));
    }
    up.watched.send_modify(|set| {
        if on {
            set.insert(uri.clone());
        } else {
            set.remove(uri);
        }
    });
    Some(Ok(ServerResult::empty(())))
}

/// The client span of one attempt at the upstream, under the call's server span.
fn client_span(call: &Call, upstream: &str, transport: &'static str) -> opentelemetry::Context {
    if !traces::enabled() {
        return call.trace.clone();
    }
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
    traces::child(&call.trace, span_name, SpanKind::Client, attrs)
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
        ServerResult::CompleteResult(mut r) => {
            r.result_type.get_or_insert(ResultType::COMPLETE);
            ServerResult::CompleteResult(r)
        }
        other => other,
    }
}
