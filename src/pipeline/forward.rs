//! Forward: the call leaves for its upstream; progress comes back in order, before the result.
#![allow(deprecated)] // resources/(un)subscribe are legacy-only and still forwarded

use std::{
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use sha2::{Digest, Sha256};

use rmcp::model::{
    CallToolRequest, ClientRequest, CompleteRequest, DEFAULT_MRTR_MAX_ROUNDS, GetPromptRequest,
    InputResponses, ReadResourceRequest, RequestMetaObject, RequestStateCodec, ResultType,
    ServerResult, SubscribeRequest, UnsubscribeRequest,
};
use tower::Service;

use opentelemetry::trace::TraceContextExt;

use super::{
    Call, CallFuture, Op,
    roundtrip::{
        parked::ParkingLot,
        pending::{Outcome, Pending},
    },
};
use crate::{
    error::Classify,
    pipeline::CallError,
    policy::trust::CallClass,
    telemetry::{
        metrics::Metrics,
        traces::{self, KeyValue, SpanKind, Status},
    },
    upstream::{Connection, DetectedEra, Upstream, client::server_request, inflight::Downstream},
};

/// `_meta` keys that belong to one hop and are never copied to the next.
const HOP_META_PREFIX: &str = "io.modelcontextprotocol/";
const PROGRESS_TOKEN_KEY: &str = "progressToken";

/// How often parked calls are checked for expiry.
const REAP_EVERY: Duration = Duration::from_secs(1);

/// The terminal: sends the call to the upstream the route holds, and bridges the eras'
/// ways of asking the caller for input.
#[derive(Debug, Clone)]
pub struct Forward {
    lot: Arc<ParkingLot<Pending>>,
    /// How long a handshake-era caller may take to answer an upstream's input request.
    input_wait: Duration,
    metrics: Arc<Metrics>,
}

impl Forward {
    /// Also starts the task that releases parked calls whose callers did not come back.
    pub fn new(
        seal: Arc<RequestStateCodec>,
        input_wait: Duration,
        max_parked_calls: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        let lot = Arc::new(ParkingLot::<Pending>::new(
            seal,
            input_wait,
            max_parked_calls,
        ));
        let weak_lot = Arc::downgrade(&lot);
        let gauge = metrics.parked_calls.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REAP_EVERY);
            loop {
                tick.tick().await;
                let Some(lot) = weak_lot.upgrade() else {
                    return;
                };
                for call in lot.expire(tokio::time::Instant::now()) {
                    call.cancel("the client did not provide the requested input in time")
                        .await;
                }
                gauge.set(lot.len() as i64);
            }
        });
        Self {
            lot,
            input_wait,
            metrics,
        }
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
        let up = target
            .upstream()
            .cloned()
            .ok_or_else(|| CallError::Internal {
                detail: "a call for the gateway's own tool reached forward".into(),
            })?;
        let spec = up.spec();
        let conn = up.connection().ok_or_else(|| {
            let s = up.status();
            CallError::UpstreamUnavailable {
                upstream: target.owner.to_string(),
                phase: s.phase,
                detail: s.last_error,
            }
        })?;
        if conn.era == DetectedEra::Stateless
            && let Some(done) = watch_resource(&up, &conn, &call.op)
        {
            return done;
        }
        let timeout = call.timeout.unwrap_or(spec.call_timeout);
        let name: &str = &target.owner;
        let write = call.class == Some(CallClass::Write);
        let mut call = call;
        let cx = client_span(&call, name, spec.transport.kind());
        // The upstream continues the trace under this attempt's span (and an HTTP upstream also
        // gets it as the `traceparent` header, copied from here).
        traces::inject(&cx, &mut call.meta);
        let result = self
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
            let size = serde_json::to_vec(&result)
                .map(|v| v.len())
                .unwrap_or(usize::MAX);
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

    /// Runs the call at the upstream, across the eras' ways of asking the caller for input:
    /// - a handshake-era upstream asks by sending a request; a handshake-era caller gets it as
    ///   is (see `UpstreamClient`), a stateless-era caller gets an `InputRequiredResult` while
    ///   the upstream call is parked, and its retry resumes the parked call;
    /// - a stateless-era upstream answers `InputRequiredResult`; a stateless-era caller gets it
    ///   as is, a handshake-era caller is sent the requests and fedgate retries the upstream with
    ///   the answers, transparently.
    async fn exchange(
        &self,
        conn: &Arc<Connection>,
        upstream: &str,
        call: Call,
        timeout: Duration,
    ) -> Result<ServerResult, CallError> {
        let Call {
            op,
            meta,
            downstream,
            progress_token,
            ct,
            identity,
            ..
        } = call;
        // Only calls that park or resume need it (a digest of the arguments).
        let bind = || binding(&identity.name, upstream, &op);
        let meta = hop_meta(meta, conn.era, downstream.as_ref());
        let mut pending = match (conn.era, retry_of(&op)) {
            (DetectedEra::Handshake, Some((state, answers))) => {
                let resumed = self.lot.resume(state, &bind(), answers)?.call;
                self.parked_changed();
                resumed.attach(downstream.clone());
                resumed
            }
            _ => {
                Pending::start(
                    conn.clone(),
                    upstream,
                    to_request(op.clone()),
                    meta.clone(),
                    downstream.clone(),
                    timeout,
                )
                .await?
            }
        };
        let mut rounds = 0;
        loop {
            match pending
                .drive(downstream.as_ref(), progress_token.as_ref(), &ct)
                .await
            {
                Outcome::Input(p, asks) if can_ask(&op) => {
                    // A parked call has no caller until it is resumed: it must not keep other
                    // calls on this connection from being the one in flight.
                    p.attach(None);
                    let parked = self.lot.park(p, asks, &bind());
                    self.parked_changed();
                    return match parked {
                        Ok(ir) => Ok(ServerResult::InputRequiredResult(ir)),
                        Err((e, p)) => {
                            p.cancel("fedgate could not park the call").await;
                            Err(e)
                        }
                    };
                }
                Outcome::Input(p, asks) => {
                    // Only tools/call, prompts/get and resources/read may answer input_required.
                    for ask in asks {
                        let _ = ask.reply.send(Err(format!(
                            "a stateless-era client cannot be asked for input during {}",
                            op.method()
                        )));
                    }
                    pending = p;
                }
                Outcome::Done(Ok(ServerResult::InputRequiredResult(ir)))
                    if rounds < DEFAULT_MRTR_MAX_ROUNDS
                        && downstream.as_ref().is_some_and(|d| !d.modern) =>
                {
                    let Some(d) = downstream.as_ref() else {
                        return Ok(ServerResult::InputRequiredResult(ir));
                    };
                    // Bounded like a parked call, and given up when the caller cancels.
                    let answers = tokio::select! {
                        a = ask_caller(d, upstream, &ir) => a?,
                        _ = ct.cancelled() => return Err(CallError::Cancelled),
                        _ = tokio::time::sleep(self.input_wait) => {
                            return Err(CallError::NoClientInput {
                                detail: "no answer in time".into(),
                            });
                        }
                    };
                    let next = answered(op.clone(), answers, ir.request_state);
                    rounds += 1;
                    pending = Pending::start(
                        conn.clone(),
                        upstream,
                        to_request(next),
                        meta.clone(),
                        downstream.clone(),
                        timeout,
                    )
                    .await?;
                }
                Outcome::Done(Ok(ServerResult::InputRequiredResult(_)))
                    if downstream.as_ref().is_some_and(|d| !d.modern) =>
                {
                    return Err(CallError::UpstreamFailed {
                        upstream: upstream.to_owned(),
                        detail: format!(
                            "asked for input more than {DEFAULT_MRTR_MAX_ROUNDS} times in one call"
                        ),
                    });
                }
                Outcome::Done(r) => return r,
            }
        }
    }

    fn parked_changed(&self) {
        self.metrics.parked_calls.set(self.lot.len() as i64);
    }
}

/// What a parked call's `requestState` is bound to: the caller, the upstream and the request
/// (method, name or URI, and a digest of the arguments), so it resumes nothing else.
fn binding(caller: &str, upstream: &str, op: &Op) -> Vec<u8> {
    let (name, args) = match op {
        // No arguments and `{}` are the same request.
        Op::CallTool(p) => (
            p.name.to_string(),
            serde_json::to_vec(&p.arguments.clone().unwrap_or_default()),
        ),
        Op::GetPrompt(p) => (
            p.name.clone(),
            serde_json::to_vec(&p.arguments.clone().unwrap_or_default()),
        ),
        Op::ReadResource(p) => (p.uri.clone(), Ok(Vec::new())),
        other => (other.method().to_owned(), Ok(Vec::new())),
    };
    let digest = Sha256::digest(args.unwrap_or_default());
    let mut b = format!(
        "fedgate-mrtr\0{caller}\0{upstream}\0{}\0{name}\0",
        op.method()
    )
    .into_bytes();
    b.extend_from_slice(&digest);
    b
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
            error: rmcp::ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "this upstream offers no resource subscriptions",
                None,
            ),
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

/// Whether the request may be answered with `InputRequiredResult` (SEP-2322).
fn can_ask(op: &Op) -> bool {
    matches!(op, Op::CallTool(_) | Op::GetPrompt(_) | Op::ReadResource(_))
}

/// The `requestState` and `inputResponses` of a retried input-required request.
fn retry_of(op: &Op) -> Option<(&str, Option<&InputResponses>)> {
    let (state, answers) = match op {
        Op::CallTool(p) => (&p.request_state, &p.input_responses),
        Op::GetPrompt(p) => (&p.request_state, &p.input_responses),
        Op::ReadResource(p) => (&p.request_state, &p.input_responses),
        _ => return None,
    };
    state.as_deref().map(|s| (s, answers.as_ref()))
}

/// The request retried with the caller's answers and the upstream's state.
fn answered(op: Op, answers: InputResponses, state: Option<String>) -> Op {
    match op {
        Op::CallTool(mut p) => {
            p.input_responses = Some(answers);
            p.request_state = state;
            Op::CallTool(p)
        }
        Op::GetPrompt(mut p) => {
            p.input_responses = Some(answers);
            p.request_state = state;
            Op::GetPrompt(p)
        }
        Op::ReadResource(mut p) => {
            p.input_responses = Some(answers);
            p.request_state = state;
            Op::ReadResource(p)
        }
        other => other,
    }
}

/// Sends a stateless-era upstream's input requests to a handshake-era caller, one by one, and
/// collects the answers under the upstream's keys.
async fn ask_caller(
    d: &Downstream,
    upstream: &str,
    ir: &rmcp::model::InputRequiredResult,
) -> Result<InputResponses, CallError> {
    let mut answers = InputResponses::new();
    for (key, request) in ir.input_requests.iter().flatten() {
        let Some(request) = server_request(request.clone()) else {
            return Err(CallError::UpstreamFailed {
                upstream: upstream.to_owned(),
                detail: format!("asked for input fedgate cannot relay: {request:?}"),
            });
        };
        let answer = d
            .request(request)
            .await
            .map_err(|e| CallError::NoClientInput {
                detail: format!("`{key}` of upstream `{upstream}`: {e}"),
            })?;
        let value = serde_json::to_value(&answer).map_err(|e| CallError::Internal {
            detail: format!("cannot encode the client's answer: {e}"),
        })?;
        answers.insert(key.clone(), value);
    }
    Ok(answers)
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
        ServerResult::CompleteResult(mut r) => {
            r.result_type.get_or_insert(ResultType::COMPLETE);
            ServerResult::CompleteResult(r)
        }
        other => other,
    }
}
