//! rmcp's local session manager with fedgate's resumption buffer (`replay`): sessions work as
//! rmcp's do; their streams are stored, bound to the session and resumed from the buffer.

use std::sync::Arc;

use futures::Stream;
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::{
        WorkerTransport,
        common::server_side_http::{ServerSseMessage, SessionId},
        streamable_http_server::session::{
            EventStore, EventStream, RestoreOutcome, SessionManager,
            local::{LocalSessionManager, LocalSessionManagerError, LocalSessionWorker},
        },
    },
};

use super::{
    replay::{Replay, ResumeRefused},
    sessions::Hub,
};

/// The id of the priming event rmcp puts first on a standalone GET stream when it has no
/// store to ask (it is never stored).
pub(super) const STANDALONE_PRIMING_ID: &str = "0";

#[derive(Debug)]
pub struct Resumable {
    inner: LocalSessionManager,
    replay: Arc<Replay>,
    /// `[gateway] max_sessions`.
    max_sessions: usize,
    /// Counts the sessions the edge holds itself.
    hub: Arc<Hub>,
}

impl Resumable {
    pub fn new(
        inner: LocalSessionManager,
        replay: Arc<Replay>,
        max_sessions: usize,
        hub: Arc<Hub>,
    ) -> Self {
        let store: Arc<dyn EventStore> = replay.clone();
        Self {
            inner: inner.with_event_store(store),
            replay,
            max_sessions,
            hub,
        }
    }

    /// Sessions open now, rmcp's (initialized or not) and the edge's own (`None` while rmcp's
    /// map is being written).
    pub fn open_sessions(&self) -> Option<usize> {
        let rmcp = self.inner.sessions.try_read().ok().map(|m| m.len())?;
        Some(rmcp + self.hub.native_count())
    }

    /// Whether rmcp's session manager holds this session.
    pub async fn rmcp_holds(&self, id: &str) -> bool {
        self.inner.sessions.read().await.contains_key(id)
    }

    /// Whether `max_sessions` are open.
    pub fn full(&self) -> bool {
        self.open_sessions().is_some_and(|n| n >= self.max_sessions)
    }

    /// A 503 with a JSON-RPC error for a request that would open a session while
    /// `max_sessions` are open: a handshake-era POST without a session id (a stateless-era
    /// request names its method in `Mcp-Method` and opens none, unless it is `initialize`).
    pub fn refuse_new<B>(
        &self,
        req: &http::Request<B>,
    ) -> Option<http::Response<super::http::Body>> {
        let opens = req.method() == http::Method::POST
            && !req.headers().contains_key("mcp-session-id")
            && req
                .headers()
                .get("mcp-method")
                .is_none_or(|m| m.as_bytes() == b"initialize");
        if !opens || !self.full() {
            return None;
        }
        Some(
            super::wire_error::WireError::TooManySessions {
                max: self.max_sessions,
            }
            .response(),
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ResumableError {
    #[error(transparent)]
    Session(#[from] LocalSessionManagerError),
    #[error(transparent)]
    Resume(#[from] ResumeRefused),
    #[error("too many sessions open ({0})")]
    Full(usize),
}

impl SessionManager for Resumable {
    type Error = ResumableError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // The edge refuses first with a clear answer; this holds when requests race past it.
        if self.full() {
            return Err(ResumableError::Full(self.max_sessions));
        }
        Ok(self.inner.create_session().await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.create_stream(id, message).await?;
        Ok(self.replay.bound_stream(id.to_string(), Box::pin(stream)))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        if last_event_id != STANDALONE_PRIMING_ID {
            return Ok(self.replay.resume_after(id, &last_event_id)?);
        }
        // The standalone stream starts over: from what is still buffered, else afresh.
        match self.replay.standalone_from_start(id) {
            Some(stream) => Ok(stream),
            None => {
                let fresh: EventStream = Box::pin(self.inner.create_standalone_stream(id).await?);
                Ok(fresh)
            }
        }
    }

    /// Refused at `max_sessions`, unless rmcp takes over a session the edge holds (the count
    /// does not grow).
    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        if self.full() && !self.hub.is_native(&id) {
            return Err(ResumableError::Full(self.max_sessions));
        }
        Ok(self.inner.restore_session(id).await?)
    }

    /// None: rmcp would otherwise persist stateless-era responses too (see `replay`).
    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        None
    }
}
