//! Handshake-era sessions. `initialize` is answered here and the session is a small record in
//! the hub (what it negotiated, when it was last used, a client handle with a GET stream while
//! the client has one open) — no worker, channels or tasks behind it. Its requests (calls,
//! lists, reads, completion, `tasks/*`, subscriptions) take the direct path; its
//! `notifications/initialized`, `ping`, `logging/setLevel`, GET stream (resumed with
//! `Last-Event-ID` from the buffer too) and DELETE are answered here, and a sealed id of a
//! session this replica does not hold (opened on another replica, or ended here after idling)
//! is restored from what the id carries.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use futures::{StreamExt, future::BoxFuture};
use http::{Response, StatusCode, request::Parts};
use parking_lot::Mutex;
use rmcp::{
    ServerHandler,
    model::{
        ClientResult, ProtocolVersion, RequestId, ServerJsonRpcMessage, ServerNotification,
        ServerRequest,
    },
    transport::{
        common::server_side_http::{ServerSseMessage, session_id},
        streamable_http_server::session::store::{SessionState, SessionStore},
    },
};
use tokio::sync::mpsc;

use super::{
    Direct, STATELESS, Shared,
    era_check::speaks_handshake,
    http_answers::{accepted, event_stream, json, sse_event},
    message,
};
use crate::{
    policy::identity::Identity,
    server::{
        http::Body, replay::Replay, session_limit::STANDALONE_PRIMING_ID, sessions::Negotiated,
        wire_error::WireError,
    },
    to_client::{ClientChannel, NotSent, Unanswered},
};

/// How many notifications may wait for a slow GET stream; past it the stream ends (every event
/// is buffered: the client resumes with `Last-Event-ID`, as from any broken stream).
const STREAM_BACKLOG: usize = 64;

/// The client of a session: open until the session ends. Its notifications go on its GET
/// stream once the client opened one (each stored for resumption); before that there is
/// nowhere to send them and they are dropped, as rmcp's worker dropped them.
#[derive(Debug)]
pub(super) struct NativeClient {
    session: String,
    replay: Arc<Replay>,
    closed: AtomicBool,
    /// The open GET stream's sender; `Some` once one was opened (closed when it ended).
    stream: Mutex<Option<mpsc::Sender<ServerSseMessage>>>,
    /// Resumed streams open now (each follows the resumption buffer).
    resumed: AtomicUsize,
}

/// What restoring a session came to.
pub(super) enum Restore {
    /// The edge holds it now.
    Held,
    /// It ended: no replica serves it again.
    Ended,
    /// It cannot be held now (`max_sessions`, or the store failed).
    Refused(WireError),
}

/// A resumed stream of a session the edge holds: while it is open the client listens.
struct Resumed(Arc<NativeClient>);

impl Drop for Resumed {
    fn drop(&mut self) {
        self.0.resumed.fetch_sub(1, Ordering::Relaxed);
    }
}

impl NativeClient {
    fn new(session: &str, replay: Arc<Replay>) -> Self {
        Self {
            session: session.to_owned(),
            replay,
            closed: AtomicBool::new(false),
            stream: Mutex::new(None),
            resumed: AtomicUsize::new(0),
        }
    }

    /// Whether its GET stream or a resumed stream is open (the client listens: the session is
    /// in use).
    fn listening(&self) -> bool {
        self.resumed.load(Ordering::Relaxed) > 0
            || self
                .stream
                .lock()
                .as_ref()
                .is_some_and(|tx| !tx.is_closed())
    }

    /// The events of a new GET stream (one that was open before ends).
    fn open_stream(&self) -> mpsc::Receiver<ServerSseMessage> {
        let (tx, rx) = mpsc::channel(STREAM_BACKLOG);
        *self.stream.lock() = Some(tx);
        rx
    }
}

impl ClientChannel for NativeClient {
    fn notify(&self, n: ServerNotification) -> BoxFuture<'static, Result<(), NotSent>> {
        if self.is_closed() {
            return Box::pin(std::future::ready(Err(NotSent::Closed)));
        }
        let mut stream = self.stream.lock();
        if let Some(tx) = stream.as_ref() {
            let mut event = ServerSseMessage::from_message(ServerJsonRpcMessage::notification(n));
            let key = format!("{}:common", self.session);
            event.event_id = Some(self.replay.store(&key, &event));
            if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(event) {
                // Ends the stream; later events are still stored for the resumption.
                *stream = Some(mpsc::channel(1).0);
            }
        }
        drop(stream);
        Box::pin(std::future::ready(Ok(())))
    }

    fn request(
        &self,
        _r: ServerRequest,
        _origin: RequestId,
    ) -> BoxFuture<'static, Result<ClientResult, Unanswered>> {
        // A call's requests travel on the call's own stream (`CallStream`), never here.
        Box::pin(std::future::ready(Err(Unanswered::Client(
            "the session has no stream to carry a request".to_owned(),
        ))))
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        // Its GET stream ends.
        self.stream.lock().take();
    }
}

impl Direct {
    /// Answers `initialize` (a POST without a session id) by opening a session, or `None`:
    /// `rare` refuses it (its headers, or `max_sessions` when requests raced past the
    /// edge's first refusal).
    pub(in crate::server) async fn initialize(
        &self,
        parts: &Parts,
        body: &Bytes,
    ) -> Option<Response<Body>> {
        let text = |name: &str| super::era_check::header_text(parts, name);
        if self.shared.sessions.full() {
            return None;
        }
        let (id, params) = message::decode_initialize(body)?;
        // rmcp refuses a version header that is not the one asked for or not one it knows, and
        // from the stateless era on an `Mcp-Method` other than `initialize`, or two (below it,
        // `Mcp-*` headers mean nothing). A version the handshake cannot speak is answered with
        // the newest one it can (`negotiate_initialize`), as rmcp's handshake answers it.
        if let Some(v) = text("mcp-protocol-version")? {
            let known = ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .any(|k| k.as_str() == v);
            if v != params.protocol_version.as_str()
                || !known
                || (v >= STATELESS && !matches!(text("mcp-method")?, None | Some("initialize")))
            {
                return None;
            }
        }
        let result = match ServerHandler::negotiate_initialize(&self.gateway, &params) {
            Ok(result) => result,
            Err(e) => {
                return Some(json(
                    StatusCode::OK,
                    &ServerJsonRpcMessage::error(e, Some(id)),
                ));
            }
        };
        let who = parts
            .extensions
            .get::<Identity>()
            .map_or_else(String::new, |i| i.name.clone());
        let sid = session_id();
        let negotiated = Negotiated::new(
            params.capabilities.clone(),
            result.protocol_version.to_string(),
        );
        // What the sealed id carries, so another replica (or this one, later) can restore the
        // session.
        if let Err(e) =
            SessionStore::store(&*self.shared.sealed, &sid, &SessionState::new(params)).await
        {
            tracing::warn!(error = %e, "a session could not be stored");
            return Some(
                WireError::Internal {
                    message: "the session could not be stored; try again".to_owned(),
                }
                .response_to(Some(&id)),
            );
        }
        self.hold(&sid, negotiated);
        tracing::debug!(session = %sid, client = %who, "session opened by the edge");
        let answer =
            ServerJsonRpcMessage::response(rmcp::model::ServerResult::InitializeResult(result), id);
        let mut r = json(StatusCode::OK, &answer);
        if let Ok(v) = http::HeaderValue::from_str(&sid) {
            r.headers_mut().insert("mcp-session-id", v);
        }
        Some(r)
    }

    /// Opens a session this replica does not hold from what its sealed id carries (the edge
    /// verified the id, its owner and its age).
    pub(super) async fn restore(&self, session: &str) -> Restore {
        let full = WireError::TooManySessions {
            max: self.shared.sessions.max(),
        };
        if self.shared.sessions.full() {
            return Restore::Refused(full);
        }
        let state = match SessionStore::load(&*self.shared.sealed, session).await {
            Ok(Some(state)) => state,
            // Ended (DELETE) — on this replica or, with a shared store, on another.
            Ok(None) => return Restore::Ended,
            Err(e) => {
                tracing::warn!(error = %e, "a session could not be restored");
                return Restore::Refused(WireError::Internal {
                    message: "the session could not be restored; try again".to_owned(),
                });
            }
        };
        let params = state.initialize_params;
        let version = match ServerHandler::negotiate_initialize(&self.gateway, &params) {
            Ok(result) => result.protocol_version.to_string(),
            // What it negotiated once is no longer spoken (an upgrade): it starts over.
            Err(_) => return Restore::Ended,
        };
        // A concurrent request restored it meanwhile: that one stands.
        if self.shared.hub.negotiation(session).is_some() {
            return Restore::Held;
        }
        self.hold(session, Negotiated::new(params.capabilities, version));
        tracing::debug!(session, "session restored by the edge");
        Restore::Held
    }

    /// What a request of `session` is answered from: its negotiation, restored when needed;
    /// else the answer (404 when the session ended).
    pub(super) async fn negotiation(
        &self,
        session: &str,
    ) -> Result<Arc<Negotiated>, Response<Body>> {
        if let Some(n) = self.shared.hub.negotiation(session) {
            return Ok(n);
        }
        let refused = match self.restore(session).await {
            Restore::Held => match self.shared.hub.negotiation(session) {
                Some(n) => return Ok(n),
                // Ended by a concurrent DELETE.
                None => WireError::NoSuchSession,
            },
            Restore::Ended => WireError::NoSuchSession,
            Restore::Refused(e) => e,
        };
        Err(refused.response())
    }

    /// Answers a handshake-era DELETE: the session ends on this replica and its sealed id is
    /// refused from now on (everywhere, with a shared store); `None` for the stateless era's.
    pub(in crate::server) async fn delete(
        &self,
        parts: &Parts,
        session: &str,
    ) -> Option<Response<Body>> {
        if !speaks_handshake(&parts.headers) {
            return None;
        }
        let _ = SessionStore::delete(&*self.shared.sealed, session).await;
        self.ended(session);
        Some(accepted())
    }
}

impl Direct {
    /// Records a session the edge holds from now on.
    fn hold(&self, session: &str, negotiated: Negotiated) {
        let client = Arc::new(NativeClient::new(session, self.shared.replay.clone()));
        self.shared
            .native
            .insert(session.to_owned(), client.clone());
        self.gateway.initialized(session, client);
        self.shared.hub.hold_natively(session, negotiated);
    }

    /// rmcp's standalone stream starts with a priming event that is never stored.
    fn standalone_priming(&self) -> Option<ServerSseMessage> {
        self.shared
            .sse_retry
            .map(|retry| ServerSseMessage::priming(STANDALONE_PRIMING_ID, retry))
    }

    /// Answers a GET that opens or resumes a session's stream (restoring the session when
    /// needed), or `None` for the stateless era's (`rare`).
    pub(in crate::server) async fn stream(
        &self,
        parts: &Parts,
        session: &str,
    ) -> Option<Response<Body>> {
        // The first value, as rmcp reads it (the edge refused one it cannot resume from).
        let last = parts
            .headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok());
        let last = match last {
            Some(STANDALONE_PRIMING_ID) => Resume::Start,
            Some(id) => Resume::After(id),
            None => Resume::No,
        };
        if !speaks_handshake(&parts.headers) {
            return None;
        }
        let negotiated = match self.negotiation(session).await {
            Ok(n) => n,
            Err(answer) => return Some(answer),
        };
        // Ended by a concurrent DELETE.
        let Some(client) = self
            .shared
            .native
            .get(session)
            .map(|c| c.clone())
            .filter(|c| !c.is_closed())
        else {
            return Some(WireError::NoSuchSession.response());
        };
        negotiated.touched_now();
        // The edge refused ids this session cannot resume from before (`http::route`). What
        // was missed comes from the buffer, then what is stored as it happens (a notification
        // is stored by the client, a call's event by its stream).
        let resumed = match last {
            Resume::After(id) => match self.shared.replay.resume_after(session, id) {
                Ok(events) => Some(events),
                Err(refused) => {
                    let gone = matches!(refused, crate::server::replay::ResumeRefused::Dropped(_));
                    let why = refused.to_string();
                    return Some(WireError::CannotResume { why, gone }.response());
                }
            },
            Resume::Start => self.shared.replay.standalone_from_start(session),
            Resume::No => None,
        };
        if let Some(events) = resumed {
            client.resumed.fetch_add(1, Ordering::Relaxed);
            let open = Resumed(client);
            let events = events
                .map(move |e| {
                    let _listening = &open;
                    sse_event(&e)
                })
                .take_until(self.shared.shutdown.clone().cancelled_owned());
            return Some(event_stream(Box::pin(events)));
        }
        // A second GET while one is open gets a stream that only keeps alive (as rmcp's
        // shadow streams); the first keeps the session's events.
        if client.listening() {
            let quiet = futures::stream::iter(self.standalone_priming())
                .map(|e| sse_event(&e))
                .chain(futures::stream::pending())
                .take_until(self.shared.shutdown.clone().cancelled_owned());
            return Some(event_stream(Box::pin(quiet)));
        }
        let events = client.open_stream();
        let events =
            futures::stream::unfold(
                events,
                |mut rx| async move { rx.recv().await.map(|e| (e, rx)) },
            );
        let events = futures::stream::iter(self.standalone_priming())
            .chain(events)
            .map(|e| sse_event(&e))
            .take_until(self.shared.shutdown.clone().cancelled_owned());
        Some(event_stream(Box::pin(events)))
    }
}

/// What a GET's `Last-Event-ID` asks for.
enum Resume<'a> {
    No,
    /// The standalone stream from its oldest buffered event (the client saw only the priming
    /// event, which carries no stored id).
    Start,
    After(&'a str),
}

impl Shared {
    /// Ends the sessions the edge holds that were idle for `idle` (rmcp's workers end theirs
    /// alike); a client coming back with the sealed id gets its session restored.
    pub(super) fn expire_idle(&self, idle: Duration) {
        let Some(before) = tokio::time::Instant::now().checked_sub(idle) else {
            return;
        };
        for session in self.hub.idle_native(before) {
            // A client listening on its GET stream, or waiting for a call, is using it.
            let listening = self.native.get(&session).is_some_and(|c| c.listening());
            if listening || self.calls.iter().any(|c| c.key().0 == session) {
                continue;
            }
            tracing::debug!(session, "idle session ended by the edge");
            self.end(&session);
        }
        // Clients the hub closed.
        self.native.retain(|_, c| !c.is_closed());
    }
}
