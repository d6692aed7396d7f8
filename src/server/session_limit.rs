//! `[gateway] max_sessions`: how many handshake-era sessions the HTTP listener holds at once,
//! and the clear refusal of a request that would open one more.

use std::sync::Arc;

use super::{http::Body, sessions::Hub, wire_error::WireError};

/// The id of the priming event a standalone GET stream starts with (it is never stored: a
/// client resuming after it gets the stream from its start).
pub(super) const STANDALONE_PRIMING_ID: &str = "0";

#[derive(Debug)]
pub struct SessionLimit {
    max_sessions: usize,
    /// Holds the sessions the edge opened.
    hub: Arc<Hub>,
}

impl SessionLimit {
    pub fn new(max_sessions: usize, hub: Arc<Hub>) -> Self {
        Self { max_sessions, hub }
    }

    /// Sessions open now.
    pub fn open_sessions(&self) -> usize {
        self.hub.native_count()
    }

    /// `max_sessions`.
    pub fn max(&self) -> usize {
        self.max_sessions
    }

    /// Whether `max_sessions` are open.
    pub fn full(&self) -> bool {
        self.open_sessions() >= self.max_sessions
    }

    /// A 503 with a JSON-RPC error for a request that would open a session while
    /// `max_sessions` are open: a handshake-era POST without a session id (a stateless-era
    /// request names its method in `Mcp-Method` and opens none, unless it is `initialize`).
    pub fn refuse_new<B>(&self, req: &http::Request<B>) -> Option<http::Response<Body>> {
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
            WireError::TooManySessions {
                max: self.max_sessions,
            }
            .response(),
        )
    }
}
