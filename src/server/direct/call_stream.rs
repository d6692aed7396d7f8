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
use crate::to_client::{ClientChannel, NotSent, Unanswered};

/// How the answer starts.
pub(super) enum Start {
    /// The whole answer, nothing came before it.
    Json(Box<ServerJsonRpcMessage>),
    /// An SSE stream of stored events, ending with the answer.
    Sse(mpsc::UnboundedReceiver<ServerSseMessage>),
}

enum Mode {
    Waiting(oneshot::Sender<Start>),
    Streaming {
        tx: mpsc::UnboundedSender<ServerSseMessage>,
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
        session: Option<String>,
    ) -> (Arc<Self>, oneshot::Receiver<Start>) {
        let (tx, rx) = oneshot::channel();
        let this = Arc::new(Self {
            mode: Mutex::new(Mode::Waiting(tx)),
            shared,
            session,
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
        let (tx, rx) = mpsc::unbounded();
        let key = format!("direct:{}", self.shared.next_stream());
        if let Some(retry) = self.shared.sse_retry
            && self.session.is_some()
        {
            self.store_and_send(&tx, &key, ServerSseMessage::priming("", retry));
        }
        let _ = start.send(Start::Sse(rx));
        *mode = Mode::Streaming { tx, key };
    }

    /// Sends `message`; `last` ends the answer (the call's result or error).
    pub(super) fn emit(&self, message: ServerJsonRpcMessage, last: bool) -> Result<(), NotSent> {
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
        match &*mode {
            Mode::Streaming { tx, key } => {
                // Stored whether or not the client still listens: it may resume.
                self.store_and_send(tx, key, ServerSseMessage::from_message(message));
                if last {
                    *mode = Mode::Done;
                }
                Ok(())
            }
            _ => Err(NotSent::Closed),
        }
    }

    fn store_and_send(
        &self,
        tx: &mpsc::UnboundedSender<ServerSseMessage>,
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
        let _ = tx.unbounded_send(event);
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
