//! The direct path: a handshake-era session's calls, lists and reads answered by the edge
//! itself — decoded once, handed straight to the gateway's answers (`mcp.rs`), written in one
//! go (`call_stream`) — instead of through rmcp's session worker, its channels and its SSE
//! framing of every answer. The client's answers to input requests of such calls and its
//! `notifications/cancelled` for them come here too.
//!
//! rmcp's transport still owns everything else and every request the direct path does not
//! take whole: `initialize`, GET streams and their resumption, DELETE, the stateless era,
//! sessions restored from a sealed id on another replica, and any request that is not
//! plainly well-formed (a browser `Origin`, an unusual `Host` or `Accept`, headers that do not
//! match the body, bodies rmcp refuses) — so its checks and refusals stay exactly as they were.

mod call_stream;
mod keep_alive;
mod message;
mod task_listen;

use std::{
    convert::Infallible,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use dashmap::DashMap;
use futures::StreamExt;
use http::{Response, StatusCode, header, request::Parts};
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use rmcp::{
    ErrorData,
    model::{
        CallToolResponse, ClientCapabilities, ClientJsonRpcMessage, ClientNotification,
        CustomNotification, RequestId, RequestMetaObject, ServerJsonRpcMessage, ServerResult,
    },
    transport::{
        common::server_side_http::ServerSseMessage, streamable_http_server::session::SessionManager,
    },
};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use self::{
    call_stream::{Answer, CallStream, Retry, Start},
    message::{Era, Message, OUR_IDS, Request},
};
use super::{
    http::Body,
    mcp::Gateway,
    replay::Replay,
    request_of::Incoming,
    resumable::Resumable,
    sessions::{Hub, Negotiated},
    wire_error::WireError,
};
use crate::{policy::identity::Identity, telemetry::traces};

/// rmcp's session worker ends a session it has heard nothing from for five minutes; calls
/// answered here tell it the session is in use at most this often.
const TOUCH_EVERY: Duration = Duration::from_secs(30);

/// The stateless era's protocol version (the one fedgate serves).
const STATELESS: &str = "2026-07-28";

/// What the calls in flight share.
pub(super) struct Shared {
    hub: Arc<Hub>,
    replay: Arc<Replay>,
    sse_retry: Retry,
    /// `[gateway] stream_after_ms`.
    stream_after: Duration,
    sessions: Arc<Resumable>,
    /// Requests sent to clients, by our id: the session they went to, and who waits.
    pending: DashMap<String, (String, oneshot::Sender<Answer>)>,
    /// Calls in flight, by session and request id.
    calls: DashMap<(String, RequestId), CancellationToken>,
    next: AtomicU64,
    /// Cancelled at shutdown.
    shutdown: CancellationToken,
}

impl Shared {
    /// rmcp's worker ends sessions it hears nothing from; a direct call's request and each of
    /// its messages count as hearing from the session (a no-op notification to the worker, at
    /// most every [`TOUCH_EVERY`], sent from a task of its own).
    fn touch_later(self: &Arc<Self>, session: &str, negotiated: &Negotiated) {
        {
            let now = tokio::time::Instant::now();
            let mut last = negotiated.touched.lock();
            if now.duration_since(*last) < TOUCH_EVERY {
                return;
            }
            *last = now;
        }
        let note = ClientJsonRpcMessage::notification(ClientNotification::CustomNotification(
            CustomNotification::new("notifications/fedgate/in-use", None),
        ));
        let this = self.clone();
        let session: rmcp::transport::common::server_side_http::SessionId = session.into();
        tokio::spawn(async move {
            let _ = this.sessions.accept_message(&session, note).await;
        });
    }

    fn next_stream(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh id for a request to `session`'s client, and where its answer arrives.
    fn expect_answer(&self, session: &str) -> (RequestId, oneshot::Receiver<Answer>) {
        let id = format!("{OUR_IDS}{}", self.next_stream());
        let (tx, rx) = oneshot::channel();
        self.pending.insert(id.clone(), (session.to_owned(), tx));
        (RequestId::String(id.into()), rx)
    }
}

/// Forgets a request to a client when dropped (answered, or the call gave up waiting).
pub(super) struct Forget(pub Arc<Shared>, pub RequestId);

impl Drop for Forget {
    fn drop(&mut self) {
        if let RequestId::String(id) = &self.1 {
            self.0.pending.remove(id.as_ref());
        }
    }
}

/// The direct path of one listener.
#[derive(Clone)]
pub(super) struct Direct {
    shared: Arc<Shared>,
    gateway: Gateway,
    /// Host names rmcp's transport accepts on `/mcp` (without port).
    hosts: Arc<Vec<String>>,
}

impl Direct {
    pub(super) fn new(
        gateway: Gateway,
        replay: Arc<Replay>,
        sessions: Arc<Resumable>,
        sse_retry: Retry,
        stream_after: Duration,
        hosts: Vec<String>,
        shutdown: CancellationToken,
    ) -> Self {
        let shared = Shared {
            hub: gateway.parts.hub.clone(),
            replay,
            sse_retry,
            stream_after,
            sessions,
            pending: DashMap::new(),
            calls: DashMap::new(),
            next: AtomicU64::new(0),
            shutdown,
        };
        Self {
            shared: Arc::new(shared),
            gateway,
            hosts: Arc::new(hosts),
        }
    }

    /// Answers a POST of the open session `session` (rmcp's id), or `None`: rmcp's transport
    /// answers it.
    pub(super) async fn answer(
        &self,
        parts: &Parts,
        body: &Bytes,
        session: &str,
    ) -> Option<Response<Body>> {
        let negotiated = self.shared.hub.negotiation(session)?;
        if !self.plain(parts, &negotiated) {
            return None;
        }
        // A header given twice, or not as text, is rmcp's to refuse.
        let text = |name: &str| match parts.headers.get(name) {
            None => Some(None),
            Some(_) if !single(parts, name) => None,
            Some(v) => v.to_str().ok().map(Some),
        };
        let message =
            message::decode(body, text("mcp-method")?, text("mcp-name")?, Era::Handshake)?;
        match message {
            Message::Answer(m) => {
                let (id, answer) = match m {
                    ClientJsonRpcMessage::Response(r) => (r.id, Ok(r.result)),
                    ClientJsonRpcMessage::Error(e) => (e.id?, Err(e.error)),
                    _ => return None,
                };
                let RequestId::String(id) = id else {
                    return None;
                };
                let (_, (_, waiting)) = self
                    .shared
                    .pending
                    .remove_if(id.as_ref(), |_, (owner, _)| owner == session)?;
                let _ = waiting.send(answer);
                Some(accepted())
            }
            Message::Cancelled(id) => {
                let (_, ct) = self.shared.calls.remove(&(session.to_owned(), id))?;
                ct.cancel();
                Some(accepted())
            }
            Message::Request { id, request, meta } => {
                self.shared.touch_later(session, &negotiated);
                let call = Call {
                    id,
                    request,
                    meta,
                    capabilities: Some(negotiated.capabilities.clone()),
                    session: Some((session, negotiated)),
                };
                Some(self.call(parts, call).await)
            }
        }
    }

    /// Answers a stateless-era request that opens no session, or `None`: rmcp's transport
    /// answers it (anything but a plain call, list or read with every header the era asks for).
    pub(super) async fn answer_stateless(
        &self,
        parts: &Parts,
        body: &Bytes,
    ) -> Option<Response<Body>> {
        // A header given twice, or not as text, is rmcp's to refuse.
        let text = |name: &str| match parts.headers.get(name) {
            None => Some(None),
            Some(_) if !single(parts, name) => None,
            Some(v) => v.to_str().ok().map(Some),
        };
        if text("mcp-protocol-version")? != Some(STATELESS)
            || !self.plain_media(parts)
            || parts
                .headers
                .keys()
                .any(|k| k.as_str().starts_with("mcp-param-"))
        {
            return None;
        }
        let message = message::decode(
            body,
            text("mcp-method")?,
            text("mcp-name")?,
            Era::Stateless(STATELESS),
        )?;
        let Message::Request { id, request, meta } = message else {
            return None;
        };
        // A tool whose arguments are mirrored in `Mcp-Param-*` headers: rmcp checks them.
        if let Request::CallTool(p) = &request
            && self
                .gateway
                .parts
                .pool
                .catalog()
                .tool_def(&p.name)
                .is_some_and(|t| names_a_header(&t.input_schema))
        {
            return None;
        }
        let capabilities = meta.client_capabilities();
        let call = Call {
            id,
            request,
            meta,
            capabilities,
            session: None,
        };
        Some(self.call(parts, call).await)
    }

    /// Returns once the session's `notifications/initialized` has been handled (the client's
    /// next request may then be answered here), or after a second.
    pub(super) async fn until_negotiated(&self, session: &str) {
        self.shared
            .hub
            .until_negotiated(session, Duration::from_secs(1))
            .await;
    }

    /// The session ended (DELETE): its calls are cancelled, its input requests unanswered.
    pub(super) fn ended(&self, session: &str) {
        self.shared.calls.retain(|(s, _), ct| {
            if s == session {
                ct.cancel();
            }
            s != session
        });
        self.shared.pending.retain(|_, (owner, _)| owner != session);
    }

    /// Whether the request's headers are the plain ones every well-behaved client sends; any
    /// other goes to rmcp, which checks it (and answers its refusals) as before.
    fn plain(&self, parts: &Parts, negotiated: &Negotiated) -> bool {
        let h = &parts.headers;
        self.plain_media(parts)
            && h.get("mcp-protocol-version").and_then(|v| v.to_str().ok())
                == Some(negotiated.version.as_str())
            && negotiated.version.as_str() < STATELESS
            && !h.keys().any(|k| k.as_str().starts_with("mcp-param-"))
    }

    async fn call(&self, parts: &Parts, call: Call<'_>) -> Response<Body> {
        let Call {
            id,
            request,
            meta,
            session,
            capabilities,
        } = call;
        let stateless = session.is_none();
        let (session, negotiated) = session.unzip();
        let ct = self.shared.shutdown.child_token();
        // A session's call can be cancelled by `notifications/cancelled`; a stateless one by
        // closing its response (below).
        let key = session.map(|s| (s.to_owned(), id.clone()));
        if let Some(key) = &key {
            self.shared.calls.insert(key.clone(), ct.clone());
        }
        let (stream, start) = CallStream::new(
            self.shared.clone(),
            session.map(str::to_owned).zip(negotiated),
        );
        let incoming = Incoming {
            id: id.clone(),
            parent: traces::parent(&meta, Some(&parts.headers)),
            meta,
            ct: ct.clone(),
            client: stream.clone(),
            identity: parts.extensions.get::<Identity>().cloned(),
            session: session.map(str::to_owned),
            session_key: session
                .unwrap_or(super::request_of::LOCAL_SESSION)
                .to_owned(),
            workspace: parts
                .headers
                .get(crate::stages::WORKSPACE_HEADER)
                .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned()),
            modern: stateless,
            stateless,
            capabilities,
        };
        let gateway = self.gateway.clone();
        let shared = self.shared.clone();
        let stream_ = stream.clone();
        // The call is its own task: a session's client that goes away mid-call does not cancel
        // it (the spec's rule); its stream stays resumable.
        tokio::spawn(async move {
            let answer = answer(&gateway, request, &incoming).await;
            if let Some(key) = &key {
                shared.calls.remove(key);
            }
            let message = match answer {
                Ok(r) => ServerJsonRpcMessage::response(r, id),
                Err(e) => ServerJsonRpcMessage::error(e, Some(id)),
            };
            let _ = stream_.emit(message, true);
        });
        let mut start = start;
        let started = match session {
            // The stateless era does not resume: its answer waits for the result or the first
            // message, and a client that goes away before either cancels the call.
            None => {
                let gone = ct.clone().drop_guard();
                let started = start.await;
                gone.disarm();
                started
            }
            Some(_) => match tokio::time::timeout(self.shared.stream_after, &mut start).await {
                Ok(started) => started,
                Err(_slow) => {
                    stream.stream_now();
                    start.await
                }
            },
        };
        match (started, session) {
            (Ok(Start::Json(m)), None) => {
                let status = stateless_status(&m);
                let mut r = json(&m);
                *r.status_mut() = status;
                r
            }
            (Ok(Start::Json(m)), Some(_)) => json(&m),
            (Ok(Start::Sse(events)), Some(session)) => self.sse(session, events),
            (Ok(Start::Sse(events)), None) => stateless_sse(events, ct),
            (Err(_), _) => WireError::Internal {
                message: "the call ended without an answer".to_owned(),
            }
            .response(),
        }
    }

    fn sse(
        &self,
        session: &str,
        events: futures::channel::mpsc::Receiver<ServerSseMessage>,
    ) -> Response<Body> {
        let events = self
            .shared
            .replay
            .bound_stream(session.to_owned(), events)
            .map(|e| sse_event(&e));
        event_stream(events)
    }

    /// `plain_host`, and a JSON body from a client that takes JSON and SSE answers.
    fn plain_media(&self, parts: &Parts) -> bool {
        let h = &parts.headers;
        // Media ranges as listed; any parameter (a weight among them) leaves the choice to rmcp.
        let (mut json, mut sse, mut other_params) = (false, false, false);
        for range in h
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
        {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim();
            other_params |= parts.next().is_some();
            json |= media.eq_ignore_ascii_case("application/json");
            sse |= media.eq_ignore_ascii_case("text/event-stream");
        }
        let json_body = h
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| {
                c.split(';')
                    .next()
                    .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json"))
            });
        self.plain_host(parts) && json && sse && !other_params && json_body
    }

    /// Whether `Host` is one `/mcp` answers and no browser `Origin` came with the request.
    fn plain_host(&self, parts: &Parts) -> bool {
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(strip_port);
        !parts.headers.contains_key(header::ORIGIN)
            && host.is_some_and(|host| self.hosts.iter().any(|a| a.eq_ignore_ascii_case(host)))
    }
}

/// An SSE response of stateless-era events (JSON texts, no ids: that era does not resume).
fn http_sse(events: tokio::sync::mpsc::Receiver<String>) -> Response<Body> {
    let events = futures::stream::unfold(events, |mut rx| async move {
        rx.recv().await.map(|text| (text, rx))
    });
    event_stream(Box::pin(
        events.map(|text| Bytes::from(format!("data: {text}\n\n"))),
    ))
}

/// Whether a request carries at most one `name` header (rmcp refuses duplicates).
fn single(parts: &Parts, name: &str) -> bool {
    parts.headers.get_all(name).iter().count() <= 1
}

/// An SSE response of these events, with keep-alive comments in silences.
fn event_stream<S>(events: S) -> Response<Body>
where
    S: futures::Stream<Item = Bytes> + Unpin + Send + Sync + 'static,
{
    let frames =
        keep_alive::KeepAlive::new(events).map(|b| Ok::<_, Infallible>(http_body::Frame::data(b)));
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    h.insert("x-accel-buffering", http::HeaderValue::from_static("no"));
    r
}

/// Whether a POST body is `notifications/initialized`.
pub(super) fn is_initialized(body: &[u8]) -> bool {
    const METHOD: &[u8] = b"notifications/initialized";
    body.len() < 256 && body.windows(METHOD.len()).any(|w| w == METHOD)
}

/// The gateway's answer, shaped for the caller's era as rmcp's handler shapes it.
async fn shaped(g: &Gateway, request: Request, r: &Incoming) -> Result<ServerResult, ErrorData> {
    let mut result = match request {
        Request::CallTool(p) => {
            let answer = g.tools_call(p, r).await?;
            let tasks = r.capabilities.as_ref().is_some_and(|c| c.supports_tasks());
            if matches!(answer, CallToolResponse::Task(_)) && !tasks {
                return Err(ErrorData::missing_required_client_capability(
                    ClientCapabilities::builder().enable_tasks().build(),
                ));
            }
            ServerResult::from(answer)
        }
        Request::ListTools(p) => ServerResult::ListToolsResult(g.tools_list(p, r).await?),
        Request::ListPrompts(p) => ServerResult::ListPromptsResult(g.prompts_list(p, r).await?),
        Request::GetPrompt(p) => ServerResult::from(g.prompts_get(p, r).await?),
        Request::ListResources(p) => {
            ServerResult::ListResourcesResult(g.resources_list(p, r).await?)
        }
        Request::ListTemplates(p) => {
            ServerResult::ListResourceTemplatesResult(g.templates_list(p, r).await?)
        }
        Request::ReadResource(p) => ServerResult::from(g.resources_read(p, r).await?),
    };
    if r.stateless {
        result.fill_missing_cache_hints();
        return Ok(result);
    }
    if matches!(result, ServerResult::InputRequiredResult(_)) {
        return Err(ErrorData::invalid_request(
            "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer",
            None,
        ));
    }
    result.strip_result_type_for_legacy_peer();
    result.strip_non_object_output_for_legacy_peer();
    Ok(result)
}

/// The gateway's answer, as rmcp's handler gives it to each era: the stateless era gets the
/// standard invalid-params code for a resource that is not found.
async fn answer(g: &Gateway, request: Request, r: &Incoming) -> Result<ServerResult, ErrorData> {
    shaped(g, request, r).await.map_err(|mut e| {
        if r.stateless && e.code == rmcp::model::ErrorCode::RESOURCE_NOT_FOUND {
            e.code = rmcp::model::ErrorCode::INVALID_PARAMS;
        }
        e
    })
}

/// The HTTP status of a stateless-era JSON answer, as rmcp's transport sets it (a handshake-era
/// session's errors are all 200).
fn stateless_status(m: &ServerJsonRpcMessage) -> StatusCode {
    use rmcp::model::ErrorCode;
    let ServerJsonRpcMessage::Error(e) = m else {
        return StatusCode::OK;
    };
    match e.error.code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// Whether a tool's input schema mirrors an argument in an `Mcp-Param-*` header.
fn names_a_header(schema: &serde_json::Map<String, serde_json::Value>) -> bool {
    schema
        .iter()
        .any(|(k, v)| k == "x-mcp-header" || v.as_object().is_some_and(names_a_header))
}

/// What a directly answered request is.
struct Call<'a> {
    id: RequestId,
    request: Request,
    meta: RequestMetaObject,
    /// The handshake-era session it belongs to and what it negotiated (`None`: the stateless
    /// era).
    session: Option<(&'a str, Arc<Negotiated>)>,
    capabilities: Option<ClientCapabilities>,
}

/// The SSE answer of a stateless-era call: events without ids; the client closing it cancels
/// the call (that era's way to cancel).
fn stateless_sse(
    events: futures::channel::mpsc::Receiver<ServerSseMessage>,
    ct: CancellationToken,
) -> Response<Body> {
    let gone = ct.drop_guard();
    event_stream(events.map(move |e| {
        let _cancels_when_dropped = &gone;
        sse_event(&e)
    }))
}

/// `host[:port]` → `host` (IPv6 literals keep their brackets stripped too).
fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

fn accepted() -> Response<Body> {
    let mut r = Response::new(Empty::new().boxed());
    *r.status_mut() = StatusCode::ACCEPTED;
    r
}

fn json(m: &ServerJsonRpcMessage) -> Response<Body> {
    match serde_json::to_vec(m) {
        Ok(bytes) => {
            let mut r = Response::new(Full::new(Bytes::from(bytes)).boxed());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => WireError::Internal {
            message: format!("the answer could not be encoded: {e}"),
        }
        .response(),
    }
}

/// One SSE event: `id`, `retry`, and the message as `data` (empty for a priming event).
fn sse_event(e: &ServerSseMessage) -> Bytes {
    use std::fmt::Write;
    let mut out = String::with_capacity(64);
    if let Some(id) = &e.event_id {
        let _ = writeln!(out, "id: {id}");
    }
    if let Some(retry) = e.retry {
        let _ = writeln!(out, "retry: {}", retry.as_millis());
    }
    out.push_str("data: ");
    if let Some(m) = &e.message
        && let Ok(text) = serde_json::to_string(m.as_ref())
    {
        out.push_str(&text);
    }
    out.push_str("\n\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_lose_their_port() {
        assert_eq!(strip_port("localhost:8080"), "localhost");
        assert_eq!(strip_port("127.0.0.1"), "127.0.0.1");
        assert_eq!(strip_port("[::1]:9"), "::1");
        assert_eq!(strip_port("gw.example"), "gw.example");
    }

    #[test]
    fn an_sse_event_carries_id_retry_and_data() {
        let priming = ServerSseMessage::priming("3.0", Duration::from_millis(1500));
        let mut e = priming.clone();
        e.event_id = Some("3.0".into());
        assert_eq!(
            sse_event(&e),
            Bytes::from_static(b"id: 3.0\nretry: 1500\ndata: \n\n")
        );
    }
}
