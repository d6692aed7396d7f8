//! fedgate's own MCP server transport: every request of both eras on `/mcp` is answered by the
//! edge itself. The headers are checked first (`gate`); calls, lists, reads, completion,
//! `tasks/*`, a session's subscriptions and the stateless era's `server/discover` and
//! `subscriptions/listen` (`listen`, `task_listen`) are decoded once, handed straight to the
//! gateway's answers (`mcp.rs`) and written in one go (`call_stream`): one JSON body, or SSE
//! when the call sent something first or took longer than `stream_after_ms`. The client's
//! answers to input requests of such calls and its `notifications/cancelled` come here too.
//! `initialize` opens a session, a small record in the hub, with its GET stream, `ping`,
//! `logging/setLevel` and DELETE (`handshake`); the stateless era's refusals are `stateless`'s,
//! and the rare requests no other path takes are `rare`'s. rmcp's model types are used
//! throughout; its server transport is not mounted.

mod call_stream;
mod era_check;
mod gate;
mod handshake;
mod http_answers;
mod keep_alive;
mod listen;
mod mcp_headers;
mod message;
mod rare;
mod shape;
mod stateless;
mod task_listen;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use dashmap::DashMap;
use futures::StreamExt;
use http::{Response, StatusCode, request::Parts};
use rmcp::{
    model::{
        ClientCapabilities, ClientJsonRpcMessage, RequestId, RequestMetaObject,
        ServerJsonRpcMessage,
    },
    transport::common::server_side_http::ServerSseMessage,
};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub(super) use self::gate::{ALLOWED_METHODS, decodable};
use self::{
    call_stream::{Answer, CallStream, Retry, Start},
    gate::Gate,
    http_answers::{accepted, event_stream, json, sse_event, stateless_sse, stateless_status},
    message::{Era, Message, OUR_IDS, Request},
    shape::answer,
};
use super::{
    http::Body,
    mcp::Gateway,
    replay::Replay,
    request_of::Incoming,
    sealed_sessions::SealedSessions,
    session_limit::SessionLimit,
    sessions::{Hub, Negotiated},
    wire_error::WireError,
};
use crate::{policy::identity::Identity, telemetry::traces, to_client::ToClient};

/// How often sessions the edge holds are checked for idleness.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// What the direct path of one listener is given.
pub(super) struct Settings {
    pub replay: Arc<Replay>,
    pub sessions: Arc<SessionLimit>,
    pub sealed: Arc<SealedSessions>,
    pub sse_retry: Retry,
    /// `[gateway] stream_after_ms`.
    pub stream_after: Duration,
    /// How long a session may go unused before it ends.
    pub idle_session: Duration,
    /// Cancelled at shutdown.
    pub shutdown: CancellationToken,
}

/// The stateless era's protocol version (the one fedgate serves).
pub(super) const STATELESS: &str = "2026-07-28";

/// What the calls in flight share.
pub(super) struct Shared {
    hub: Arc<Hub>,
    replay: Arc<Replay>,
    sse_retry: Retry,
    /// `[gateway] stream_after_ms`.
    stream_after: Duration,
    sessions: Arc<SessionLimit>,
    /// Opens and seals the ids of sessions the edge holds (see `handshake`).
    sealed: Arc<SealedSessions>,
    /// The clients of sessions the edge holds, by session id.
    native: DashMap<String, Arc<handshake::NativeClient>>,
    /// Requests sent to clients, by our id: the session they went to, and who waits.
    pending: DashMap<String, (String, oneshot::Sender<Answer>)>,
    /// Calls in flight, by session and request id.
    calls: DashMap<(String, RequestId), CancellationToken>,
    next: AtomicU64,
    /// Cancelled at shutdown.
    shutdown: CancellationToken,
}

impl Shared {
    /// The session ended (DELETE, or idle too long): its calls are cancelled, its input
    /// requests unanswered, and a session the edge held is forgotten.
    fn end(&self, session: &str) {
        self.calls.retain(|(s, _), ct| {
            if s == session {
                ct.cancel();
            }
            s != session
        });
        self.pending.retain(|_, (owner, _)| owner != session);
        self.hub.end_native(session);
        self.native.remove(session);
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
    /// What every request's headers are checked against first (`Host`, `Origin`, media types).
    gate: Arc<Gate>,
}

impl Direct {
    pub(super) fn new(
        gateway: Gateway,
        hosts: Vec<String>,
        origins: Vec<String>,
        settings: Settings,
    ) -> Self {
        let Settings {
            replay,
            sessions,
            sealed,
            sse_retry,
            stream_after,
            idle_session,
            shutdown,
        } = settings;
        let shared = Arc::new(Shared {
            hub: gateway.parts.hub.clone(),
            replay,
            sse_retry,
            stream_after,
            sessions,
            sealed,
            native: DashMap::new(),
            pending: DashMap::new(),
            calls: DashMap::new(),
            next: AtomicU64::new(0),
            shutdown,
        });
        let sweeper = shared.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(idle_session.min(SWEEP_EVERY));
            loop {
                tokio::select! {
                    _ = sweeper.shutdown.cancelled() => return,
                    _ = tick.tick() => sweeper.expire_idle(idle_session),
                }
            }
        });
        Self {
            shared,
            gateway,
            gate: Arc::new(Gate::new(&hosts, &origins)),
        }
    }

    /// What `/mcp` checks of every request's headers before anything else reads it (see
    /// `gate`): a refusal is the answer.
    pub(super) fn gate(&self, parts: &Parts) -> Result<(), WireError> {
        self.gate.check(parts)
    }

    /// Answers a POST of the open session `session` (its sealed id), or `None`: another
    /// path of the transport answers it.
    pub(super) async fn answer(
        &self,
        parts: &Parts,
        body: &Bytes,
        session: &str,
    ) -> Option<Response<Body>> {
        let negotiated = match self.negotiation(session).await {
            Ok(n) => n,
            Err(answer) => return Some(answer),
        };
        if !era_check::speaks_handshake(&parts.headers) {
            return None;
        }
        // The handshake era has no `Mcp-Method`, `Mcp-Name` or `Mcp-Param-*` headers: rmcp
        // ignores them below the version that introduced them, and so does the edge.
        let message = message::decode(body, None, None, Era::Handshake)?;
        match message {
            Message::Answer(m) => {
                let (id, answer) = match m {
                    ClientJsonRpcMessage::Response(r) => (Some(r.id), Ok(r.result)),
                    ClientJsonRpcMessage::Error(e) => (e.id, Err(e.error)),
                    _ => return Some(accepted()),
                };
                // An answer no one waits for is ignored.
                if let Some(RequestId::String(id)) = &id
                    && let Some((_, (_, waiting))) = self
                        .shared
                        .pending
                        .remove_if(id.as_ref(), |_, (owner, _)| owner == session)
                {
                    let _ = waiting.send(answer);
                }
                Some(accepted())
            }
            // The edge holds what `initialize` negotiated from the start.
            Message::Initialized | Message::Notification => Some(accepted()),
            Message::Cancelled(id) => {
                // A call that ended already has nothing to cancel.
                if let Some((_, ct)) = self.shared.calls.remove(&(session.to_owned(), id)) {
                    ct.cancel();
                }
                Some(accepted())
            }
            Message::Request { id, request, meta } => {
                // A subscription's updates go to the session's own client (its GET stream).
                let client = match request {
                    Request::Subscribe(_) | Request::Unsubscribe(_) => {
                        match self.shared.native.get(session) {
                            Some(native) => Some(native.clone() as ToClient),
                            None => return Some(WireError::NoSuchSession.response()),
                        }
                    }
                    _ => None,
                };
                let call = Call::in_session(id, request, meta, (session, negotiated), client);
                Some(self.call(parts, call).await)
            }
        }
    }

    /// The session ended (DELETE): its calls are cancelled, its input requests unanswered,
    /// and a session the edge held is forgotten.
    pub(super) fn ended(&self, session: &str) {
        self.shared.end(session);
    }

    async fn call(&self, parts: &Parts, call: Call<'_>) -> Response<Body> {
        let Call {
            id,
            request,
            meta,
            session,
            capabilities,
            client,
        } = call;
        let stateless = session.is_none();
        let modern = stateless || meta.protocol_version().is_some();
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
            client: client.unwrap_or_else(|| stream.clone() as ToClient),
            identity: parts.extensions.get::<Identity>().cloned(),
            session: session.map(str::to_owned),
            session_key: session
                .unwrap_or(super::request_of::LOCAL_SESSION)
                .to_owned(),
            workspace: parts
                .headers
                .get(crate::stages::WORKSPACE_HEADER)
                .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned()),
            // Naming its version in `_meta` (every stateless request does; a session's may).
            modern,
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
            (Ok(Start::Json(m)), None) => json(stateless_status(&m), &m),
            (Ok(Start::Json(m)), Some(_)) => json(StatusCode::OK, &m),
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
    /// Who the request's own messages go to, when not its stream (a subscription's client).
    client: Option<ToClient>,
}

impl<'a> Call<'a> {
    /// A request of a handshake-era session, which it marks as used: its capabilities are
    /// those its `_meta` names, else those the session negotiated.
    fn in_session(
        id: RequestId,
        request: Request,
        meta: RequestMetaObject,
        (session, negotiated): (&'a str, Arc<Negotiated>),
        client: Option<ToClient>,
    ) -> Self {
        negotiated.touched_now();
        let capabilities = meta
            .client_capabilities()
            .or_else(|| Some(negotiated.capabilities.clone()));
        Self {
            id,
            request,
            meta,
            capabilities,
            session: Some((session, negotiated)),
            client,
        }
    }
}
