//! The answer of one directly served call, and its [`ClientChannel`]: the answer is a single
//! `application/json` body when the call sends nothing before its result; the first
//! notification or input request turns it into an SSE stream (priming event, event ids,
//! stored for resumption with `Last-Event-ID` like any session stream) that ends with the
//! result.

use std::{sync::Arc, time::Duration};

use futures::{channel::mpsc, future::BoxFuture};
use parking_lot::Mutex;
use rmcp::{
    ErrorData,
    model::{ClientResult, RequestId, ServerJsonRpcMessage, ServerNotification, ServerRequest},
    transport::common::server_side_http::ServerSseMessage,
};
use tokio::sync::oneshot;

use super::{Forget, Shared};
use crate::server::sessions::Negotiated;
use crate::to_client::{ClientChannel, NotSent, Unanswered};

/// Events a call's stream holds for a client that reads slowly; past it the stream ends (a
/// session's client resumes from the buffer with `Last-Event-ID`; a stateless-era call ends
/// with its stream, as that era cancels).
const BACKLOG: usize = 256;

/// How the answer starts.
pub(super) enum Start {
    /// The whole answer, nothing came before it.
    Json(Box<ServerJsonRpcMessage>),
    /// An SSE stream of stored events, ending with the answer.
    Sse(mpsc::Receiver<ServerSseMessage>),
}

enum Mode {
    Waiting(oneshot::Sender<Start>),
    Streaming {
        /// `None` once the client fell [`BACKLOG`] events behind (events are still stored).
        tx: Option<mpsc::Sender<ServerSseMessage>>,
        /// The stream's key in the resumption buffer.
        key: String,
    },
    Done,
}

pub(super) struct CallStream {
    mode: Mutex<Mode>,
    shared: Arc<Shared>,
    /// `None` for a stateless-era call: its stream has no ids, is not stored (that era does
    /// not resume) and carries no requests to the client.
    session: Option<String>,
    /// What the session negotiated: every message of the call tells rmcp's worker the session
    /// is in use.
    negotiated: Option<Arc<Negotiated>>,
}

impl std::fmt::Debug for CallStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallStream")
            .field("session", &self.session)
            .finish()
    }
}

impl CallStream {
    pub(super) fn new(
        shared: Arc<Shared>,
        session: Option<(String, Arc<Negotiated>)>,
    ) -> (Arc<Self>, oneshot::Receiver<Start>) {
        let (tx, rx) = oneshot::channel();
        let (session, negotiated) = session.unzip();
        let this = Arc::new(Self {
            mode: Mutex::new(Mode::Waiting(tx)),
            shared,
            session,
            negotiated,
        });
        (this, rx)
    }

    /// A call still unanswered after a moment is answered on a stream after all: its priming
    /// event gives the client an id to resume from if the connection breaks before the result.
    pub(super) fn stream_now(&self) {
        let mut mode = self.mode.lock();
        self.open(&mut mode);
    }

    /// Waiting → streaming: the headers go out with a priming event.
    fn open(&self, mode: &mut Mode) {
        if !matches!(mode, Mode::Waiting(_)) {
            return;
        }
        let Mode::Waiting(start) = std::mem::replace(mode, Mode::Done) else {
            return;
        };
        let (tx, rx) = mpsc::channel(BACKLOG);
        let mut tx = Some(tx);
        let key = format!("direct:{}", self.shared.next_stream());
        if let Some(retry) = self.shared.sse_retry
            && self.session.is_some()
        {
            self.store_and_send(&mut tx, &key, ServerSseMessage::priming("", retry));
        }
        let _ = start.send(Start::Sse(rx));
        *mode = Mode::Streaming { tx, key };
    }

    /// Sends `message`; `last` ends the answer (the call's result or error).
    pub(super) fn emit(&self, message: ServerJsonRpcMessage, last: bool) -> Result<(), NotSent> {
        if let Some(n) = &self.negotiated {
            n.touched_now();
        }
        let mut mode = self.mode.lock();
        if last && matches!(&*mode, Mode::Waiting(_)) {
            if let Mode::Waiting(start) = std::mem::replace(&mut *mode, Mode::Done) {
                // A client gone before the headers loses the answer, as it would have with
                // any non-resumable response.
                let _ = start.send(Start::Json(Box::new(message)));
            }
            return Ok(());
        }
        self.open(&mut mode);
        let Mode::Streaming { tx, key } = &mut *mode else {
            return Err(NotSent::Closed);
        };
        // Stored whether or not the client still listens: it may resume.
        let key = key.clone();
        self.store_and_send(tx, &key, ServerSseMessage::from_message(message));
        if last {
            *mode = Mode::Done;
        }
        Ok(())
    }

    fn store_and_send(
        &self,
        tx: &mut Option<mpsc::Sender<ServerSseMessage>>,
        key: &str,
        mut event: ServerSseMessage,
    ) {
        if let Some(session) = &self.session {
            let id = self.shared.replay.store(key, &event);
            if event.message.is_none() {
                // The priming event names the stream: bind it to the session that opened it.
                self.shared.replay.bind(&id, session);
            }
            event.event_id = Some(id);
        }
        if let Some(sender) = tx
            && sender.try_send(event).is_err()
        {
            // Gone, or too far behind: the stream ends here.
            *tx = None;
        }
    }
}

impl ClientChannel for CallStream {
    fn notify(&self, n: ServerNotification) -> BoxFuture<'static, Result<(), NotSent>> {
        let sent = self.emit(ServerJsonRpcMessage::notification(n), false);
        Box::pin(futures::future::ready(sent))
    }

    fn request(
        &self,
        r: ServerRequest,
        _origin: RequestId,
    ) -> BoxFuture<'static, Result<ClientResult, Unanswered>> {
        let Some(session) = &self.session else {
            // The stateless era asks for input with an incomplete result, never a request.
            return Box::pin(futures::future::ready(Err(Unanswered::Client(
                "a stateless-era call's stream carries no requests".to_owned(),
            ))));
        };
        let (id, answer) = self.shared.expect_answer(session);
        let sent = self.emit(ServerJsonRpcMessage::request(r, id.clone()), false);
        let shared = self.shared.clone();
        Box::pin(async move {
            let _forget = Forget(shared, id);
            sent.map_err(|e| Unanswered::Client(e.to_string()))?;
            match answer.await {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(e)) => Err(Unanswered::Client(e.message.into_owned())),
                Err(_) => Err(Unanswered::Client("the session ended".to_owned())),
            }
        })
    }

    fn is_closed(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| !self.shared.hub.is_open(s))
    }
}

/// The client's answer to a request of ours.
pub(super) type Answer = Result<ClientResult, ErrorData>;

/// `retry` is sent on a stream's priming event; `None` sends none (as rmcp's sessions do).
pub(super) type Retry = Option<Duration>;
