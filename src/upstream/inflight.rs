//! Requests in flight on one upstream connection, and the downstream call each belongs to.
//!
//! The tap transport registers every outgoing request that carries a [`CallKey`] here *before*
//! it reaches the wire, so progress notifications and server-to-client requests that come back
//! can always be matched to their downstream call (pitfall C.6-1/-3 of PROTOCOL.md).
#![allow(deprecated)] // logging is deprecated by SEP-2577 but still relayed

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use dashmap::DashMap;
use rmcp::model::{
    ClientCapabilities, ClientResult, InputRequest, LoggingLevel, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProgressToken, RequestId, ServerRequest,
};
use tokio::sync::{mpsc, oneshot};

/// Events (progress, logs, input asks) queued for one call; past it an upstream's flood is
/// dropped rather than held in memory.
const CALL_EVENTS: usize = 256;

/// Marker put in an outgoing request's (never serialized) extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallKey(pub u64);

/// The downstream side of a forwarded call.
#[derive(Debug, Clone)]
pub struct Downstream {
    /// The client, whatever transport carries it.
    pub client: crate::to_client::ToClient,
    pub request_id: RequestId,
    /// Lowest log level the caller wants relayed; `None` = no log messages.
    pub log_level: Option<LoggingLevel>,
    /// What the caller declared it can do (forwarded to stateless-era upstreams).
    pub capabilities: Option<ClientCapabilities>,
    /// The caller speaks the stateless era: it cannot be sent requests, only asked for input
    /// with an `InputRequiredResult`.
    pub modern: bool,
    /// The downstream session (its key in the session hub); `None` for stateless requests.
    pub session: Option<String>,
    /// The workspace the request names in its `Fedgate-Workspace` header (`[stages]`), as
    /// sent: the stage gate checks it.
    pub workspace: Option<String>,
}

/// Why a request for client input got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoInput {
    #[error(transparent)]
    Unanswered(#[from] crate::to_client::Unanswered),
    #[error("a stateless-era client cannot be asked for input during {0}")]
    NotDuring(String),
    #[error("fedgate has too many calls waiting for input")]
    Busy,
    #[error("the client did not provide the input in time")]
    TimedOut,
}

impl Downstream {
    /// Sends a request to a handshake-era caller on the stream of its call, and waits for the
    /// answer.
    pub async fn request(&self, request: ServerRequest) -> Result<ClientResult, NoInput> {
        Ok(self
            .client
            .request(request, self.request_id.clone())
            .await?)
    }
}

/// An upstream's request for client input, held for a stateless-era caller: the call returns
/// it as an `InputRequiredResult` and the caller's retry answers it.
#[derive(Debug)]
pub struct InputAsk {
    pub request: InputRequest,
    pub reply: oneshot::Sender<Result<serde_json::Value, NoInput>>,
}

/// What the upstream sends back for one call besides its response.
#[derive(Debug)]
pub enum CallEvent {
    Progress(ProgressNotificationParam),
    Log(LoggingMessageNotificationParam),
    Input(InputAsk),
}

#[derive(Debug)]
struct Slot {
    downstream: Option<Downstream>,
    events: mpsc::Sender<CallEvent>,
    /// Set by `bind`, so the guard can remove the index entries without scanning.
    id: Option<RequestId>,
    token: Option<ProgressToken>,
}

/// Table of in-flight calls of one upstream connection.
#[derive(Debug, Default)]
pub struct Inflight {
    next: AtomicU64,
    slots: DashMap<u64, Slot>,
    by_token: DashMap<ProgressToken, u64>,
    by_request: DashMap<RequestId, u64>,
}

/// Removes a call's entries when the call ends, however it ends.
#[derive(Debug)]
pub struct CallGuard {
    table: Arc<Inflight>,
    pub key: CallKey,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some((_, slot)) = self.table.slots.remove(&self.key.0) {
            if let Some(id) = slot.id {
                self.table.by_request.remove(&id);
            }
            if let Some(token) = slot.token {
                self.table.by_token.remove(&token);
            }
        }
    }
}

impl Inflight {
    /// Opens a slot; events for the call arrive on the returned receiver.
    pub fn open(
        self: &Arc<Self>,
        downstream: Option<Downstream>,
    ) -> (CallGuard, mpsc::Receiver<CallEvent>) {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(CALL_EVENTS);
        self.slots.insert(
            key,
            Slot {
                downstream,
                events: tx,
                id: None,
                token: None,
            },
        );
        (
            CallGuard {
                table: self.clone(),
                key: CallKey(key),
            },
            rx,
        )
    }

    /// Called by the tap as the request leaves: binds its id and progress token to the call.
    pub fn bind(&self, key: CallKey, id: RequestId, token: Option<ProgressToken>) {
        let Some(mut slot) = self.slots.get_mut(&key.0) else {
            return;
        };
        self.by_request.insert(id.clone(), key.0);
        slot.id = Some(id);
        if let Some(t) = token {
            self.by_token.insert(t.clone(), key.0);
            slot.token = Some(t);
        }
    }

    /// Delivers a progress notification to its call; the token back when no call owns it.
    pub fn route_progress(&self, p: ProgressNotificationParam) -> Result<(), ProgressToken> {
        let Some(key) = self.by_token.get(&p.progress_token).map(|k| *k) else {
            return Err(p.progress_token);
        };
        match self.slots.get(&key) {
            Some(slot) => {
                // A closed receiver means the call already returned; a full queue, an upstream
                // sending progress faster than the caller takes it: dropping is right for both.
                let _ = slot.events.try_send(CallEvent::Progress(p));
                Ok(())
            }
            None => Err(p.progress_token),
        }
    }

    /// Delivers a log message to the call it belongs to. The wire links log messages to no
    /// request, so this only succeeds (true) while exactly one call with a downstream is in
    /// flight.
    pub fn route_log(&self, p: LoggingMessageNotificationParam) -> bool {
        match self.sole_call().and_then(|key| self.slots.get(&key)) {
            Some(slot) => {
                let _ = slot.events.try_send(CallEvent::Log(p));
                true
            }
            None => false,
        }
    }

    /// The one call with a downstream in flight, if there is exactly one: the only way to
    /// attribute messages the wire does not link to a request.
    fn sole_call(&self) -> Option<u64> {
        let mut found = None;
        for slot in self.slots.iter() {
            if slot.downstream.is_some() {
                if found.is_some() {
                    return None;
                }
                found = Some(*slot.key());
            }
        }
        found
    }

    /// The downstream call that caused an upstream request.
    ///
    /// With a known originating request id (Streamable HTTP tells which response stream a
    /// request arrived on) the match is exact. Without one (stdio), the request can only be
    /// attributed when exactly one call with a downstream is in flight; otherwise `None`.
    pub fn downstream_for(&self, origin: Option<&RequestId>) -> Option<Downstream> {
        if let Some(id) = origin {
            let key = *self.by_request.get(id)?;
            return self.slots.get(&key).and_then(|s| s.downstream.clone());
        }
        let key = self.sole_call()?;
        self.slots.get(&key).and_then(|s| s.downstream.clone())
    }

    /// The call an upstream request belongs to (see [`Self::downstream_for`]), with its key.
    pub fn call_for(&self, origin: Option<&RequestId>) -> Option<(CallKey, Downstream)> {
        let key = match origin {
            Some(id) => *self.by_request.get(id)?,
            None => self.sole_call()?,
        };
        let d = self.slots.get(&key).and_then(|s| s.downstream.clone())?;
        Some((CallKey(key), d))
    }

    /// Queues a request for client input on a call. If the call has ended the ask is dropped,
    /// which closes its reply channel: the asker sees that as the answer.
    pub fn ask(&self, key: CallKey, ask: InputAsk) {
        if let Some(slot) = self.slots.get(&key.0) {
            // A full queue drops the ask, which answers it with an error (see above).
            let _ = slot.events.try_send(CallEvent::Input(ask));
        }
    }

    /// A resumed call belongs to the caller's retry from now on.
    pub fn rebind(&self, key: CallKey, downstream: Option<Downstream>) {
        if let Some(mut slot) = self.slots.get_mut(&key.0) {
            slot.downstream = downstream;
        }
    }

    /// Number of calls in flight.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}
