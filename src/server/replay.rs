//! Resumable SSE streams of handshake-era sessions (SEP-1699): every event fedgate sends on a
//! session's streams gets an id and is kept in a bounded buffer, so a client whose stream broke
//! reconnects with `GET` + `Last-Event-ID` and gets what it missed — the response included —
//! and then the rest as it happens.
//!
//! Streams are bound to the session that opened them, so a `Last-Event-ID` of another
//! session's stream is refused. The stateless era has no resumption: its answers are not
//! stored.
//!
//! Each stream keeps at most `events` events and `bytes` bytes, each for at most `ttl`; all
//! streams together at most [`TOTAL_BYTES`]. What is dropped before its stream ended is counted
//! in `fedgate_replay_events_dropped_total`. The buffer is per process: a client must resume on
//! the replica that served the stream.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::Arc,
};

use futures::Stream;
use parking_lot::Mutex;
use prometheus::IntCounterVec;
use rmcp::{
    model::ServerJsonRpcMessage,
    transport::{
        common::server_side_http::ServerSseMessage, streamable_http_server::session::EventStream,
    },
};
use tokio::{sync::watch, time::Instant};

/// All streams' buffers together; past it the oldest streams go first.
pub const TOTAL_BYTES: usize = 64 << 20;

/// What a resumption asked for that cannot be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResumeRefused {
    #[error(
        "Last-Event-ID `{0}` names no stream of this session (unknown, another session's, or ended and expired)"
    )]
    NoSuchStream(String),
    #[error("the events after Last-Event-ID `{0}` are no longer buffered; send the request again")]
    Dropped(String),
}

pub use crate::config::ReplayLimits as Limits;

struct Stored {
    index: u64,
    event: ServerSseMessage,
    bytes: usize,
    at: Instant,
}

struct Buffer {
    /// The session the stream belongs to, once known.
    owner: Option<String>,
    events: VecDeque<Stored>,
    /// The index the next stored event gets.
    next: u64,
    bytes: usize,
    last_at: Instant,
    /// A request's stream ends with its response; the session's standalone stream never does.
    finished: bool,
    /// Bumped on every stored event, so followers wake up (made by the first follower).
    tick: Option<watch::Sender<u64>>,
    /// rmcp's id of the stream.
    key: String,
    /// Its place in `State::lru`.
    seq: u64,
}

impl Buffer {
    /// The index of the oldest event still held (`next` when empty).
    fn first(&self) -> u64 {
        self.events.front().map_or(self.next, |e| e.index)
    }
}

#[derive(Default)]
struct State {
    buffers: HashMap<u64, Buffer>,
    /// rmcp's stream id -> ours.
    ids: HashMap<String, u64>,
    /// Activity order -> stream, least recently written first (expiry and eviction order).
    lru: BTreeMap<u64, u64>,
    next_seq: u64,
    next_stream: u64,
    bytes: usize,
}

/// The event store (see the module doc).
pub struct Replay {
    state: Mutex<State>,
    limits: Limits,
    dropped: IntCounterVec,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        f.debug_struct("Replay")
            .field("streams", &s.buffers.len())
            .field("bytes", &s.bytes)
            .finish()
    }
}

/// `<stream>.<index>`, the event id clients see.
fn event_id(stream: u64, index: u64) -> String {
    format!("{stream}.{index}")
}

fn parse(id: &str) -> Option<(u64, u64)> {
    let (s, i) = id.split_once('.')?;
    Some((s.parse().ok()?, i.parse().ok()?))
}

fn size(event: &ServerSseMessage) -> usize {
    // Bytes of the JSON text; a priming event counts as a few.
    event
        .message
        .as_ref()
        .map_or(16, |m| crate::json_size::encoded_len(m.as_ref()))
}

/// A request's stream ends with its response (or error).
pub(super) fn ends_stream(event: &ServerSseMessage) -> bool {
    matches!(
        event.message.as_deref(),
        Some(ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_))
    )
}

impl Replay {
    pub fn new(limits: Limits, dropped: IntCounterVec) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::default(),
            limits: Limits {
                events: limits.events.max(1),
                ..limits
            },
            dropped,
        })
    }

    /// Binds the stream of `first` (the first event of a request's stream) to `session`.
    pub fn bind(&self, event_id: &str, session: &str) {
        if let Some((stream, _)) = parse(event_id)
            && let Some(b) = self.state.lock().buffers.get_mut(&stream)
        {
            b.owner.get_or_insert_with(|| session.to_owned());
        }
    }

    /// Whether `session` may resume after `last`, and from where.
    pub fn check(&self, session: &str, last: &str) -> Result<(u64, u64), ResumeRefused> {
        let mut s = self.state.lock();
        self.expire(&mut s, Instant::now());
        let refused = || ResumeRefused::NoSuchStream(crate::names::shown(last));
        let (stream, index) = parse(last).ok_or_else(refused)?;
        let b = s.buffers.get(&stream).ok_or_else(refused)?;
        if b.owner.as_deref() != Some(session) || index >= b.next {
            return Err(refused());
        }
        if index + 1 < b.first() {
            return Err(ResumeRefused::Dropped(crate::names::shown(last)));
        }
        Ok((stream, index + 1))
    }

    /// The events of `stream` from `from` on: the buffered ones, then new ones as they are
    /// stored, until the stream ends or leaves the buffer.
    fn follow(self: &Arc<Self>, stream: u64, from: u64) -> EventStream {
        let rx = self.state.lock().buffers.get_mut(&stream).map(|b| {
            b.tick
                .get_or_insert_with(|| watch::channel(0).0)
                .subscribe()
        });
        let this = self.clone();
        let state = (this, rx, from, false);
        Box::pin(futures::stream::unfold(
            state,
            move |(this, rx, next, done)| async move {
                let mut rx = rx?;
                if done {
                    return None;
                }
                loop {
                    let found = {
                        let s = this.state.lock();
                        let b = s.buffers.get(&stream)?;
                        // Events the buffer already dropped are skipped, not waited for.
                        b.events
                            .iter()
                            .find(|e| e.index >= next)
                            .map(|e| {
                                (
                                    e.index,
                                    e.event.clone(),
                                    b.finished && e.index + 1 == b.next,
                                )
                            })
                            .ok_or(b.finished)
                    };
                    match found {
                        Ok((index, event, last)) => {
                            return Some((event, (this, Some(rx), index + 1, last)));
                        }
                        Err(true) => return None,
                        Err(false) => {
                            if rx.changed().await.is_err() {
                                return None;
                            }
                        }
                    }
                }
            },
        ))
    }

    /// The standalone stream of `session` from its oldest buffered event (a client resuming
    /// after the priming event of its GET stream, which carries no stored id).
    pub fn standalone_from_start(self: &Arc<Self>, session: &str) -> Option<EventStream> {
        let key = format!("{session}:common");
        let (stream, from) = {
            let s = self.state.lock();
            let stream = *s.ids.get(&key)?;
            (stream, s.buffers.get(&stream)?.first())
        };
        Some(self.follow(stream, from))
    }

    pub fn resume_after(
        self: &Arc<Self>,
        session: &str,
        last: &str,
    ) -> Result<EventStream, ResumeRefused> {
        let (stream, from) = self.check(session, last)?;
        Ok(self.follow(stream, from))
    }

    /// Stores an event of the stream `rmcp_stream` names; answers the id clients see.
    pub(super) fn store(&self, rmcp_stream: &str, event: &ServerSseMessage) -> String {
        let now = Instant::now();
        let mut s = self.state.lock();
        self.expire(&mut s, now);
        let seq = s.next_seq;
        s.next_seq += 1;
        let stream = match s.ids.get(rmcp_stream).copied() {
            Some(n) => {
                if let Some(b) = s.buffers.get_mut(&n) {
                    let old = std::mem::replace(&mut b.seq, seq);
                    s.lru.remove(&old);
                }
                s.lru.insert(seq, n);
                n
            }
            None => {
                let n = s.next_stream;
                s.next_stream += 1;
                s.ids.insert(rmcp_stream.to_owned(), n);
                s.lru.insert(seq, n);
                // The standalone stream's id names its session.
                let owner = rmcp_stream.strip_suffix(":common").map(str::to_owned);
                s.buffers.insert(
                    n,
                    Buffer {
                        owner,
                        events: VecDeque::new(),
                        next: 0,
                        bytes: 0,
                        last_at: now,
                        finished: false,
                        tick: None,
                        key: rmcp_stream.to_owned(),
                        seq,
                    },
                );
                n
            }
        };
        let bytes = size(event);
        let limits = self.limits;
        let mut dropped = [0u64; 3];
        let mut freed = 0;
        let index = {
            let Some(b) = s.buffers.get_mut(&stream) else {
                return event_id(stream, 0);
            };
            let index = b.next;
            b.next += 1;
            b.last_at = now;
            b.finished |= ends_stream(event);
            b.events.push_back(Stored {
                index,
                event: {
                    let mut e = event.clone();
                    e.event_id = Some(event_id(stream, index));
                    e
                },
                bytes,
                at: now,
            });
            b.bytes = b.bytes.saturating_add(bytes);
            // A long-lived stream (the session's standalone one) sheds its old events.
            while b.events.len() > 1
                && b.events
                    .front()
                    .is_some_and(|e| now.duration_since(e.at) >= limits.ttl)
            {
                if let Some(old) = b.events.pop_front() {
                    b.bytes = b.bytes.saturating_sub(old.bytes);
                    freed += old.bytes;
                    dropped[2] += 1;
                }
            }
            // Keep the newest event whatever its size: it may be the response.
            while b.events.len() > 1 && (b.events.len() > limits.events || b.bytes > limits.bytes) {
                let over_count = b.events.len() > limits.events;
                if let Some(old) = b.events.pop_front() {
                    b.bytes = b.bytes.saturating_sub(old.bytes);
                    freed += old.bytes;
                    dropped[usize::from(!over_count)] += 1;
                }
            }
            if let Some(t) = &b.tick {
                t.send_modify(|t| *t += 1);
            }
            index
        };
        s.bytes = s.bytes.saturating_add(bytes).saturating_sub(freed);
        self.count("count", dropped[0]);
        self.count("bytes", dropped[1]);
        self.count("age", dropped[2]);
        while s.bytes > TOTAL_BYTES && s.lru.len() > 1 {
            let lost = self.evict_oldest(&mut s);
            self.count("total", lost);
        }
        event_id(stream, index)
    }

    /// Drops the streams nothing was written to for the ttl, least recently written first.
    fn expire(&self, s: &mut State, now: Instant) {
        let ttl = self.limits.ttl;
        while let Some((_, &n)) = s.lru.first_key_value() {
            let Some(b) = s.buffers.get(&n) else {
                s.lru.pop_first();
                continue;
            };
            if now.duration_since(b.last_at) < ttl {
                break;
            }
            let lost = if b.finished { 0 } else { b.events.len() as u64 };
            self.evict_oldest(s);
            self.count("age", lost);
        }
    }

    /// Removes the least recently written stream; returns how many events it still held.
    fn evict_oldest(&self, s: &mut State) -> u64 {
        let Some((_, n)) = s.lru.pop_first() else {
            return 0;
        };
        Self::remove(s, n).map_or(0, |b| b.events.len() as u64)
    }

    fn remove(s: &mut State, n: u64) -> Option<Buffer> {
        let b = s.buffers.remove(&n)?;
        s.lru.remove(&b.seq);
        s.ids.remove(&b.key);
        s.bytes = s.bytes.saturating_sub(b.bytes);
        Some(b)
    }

    /// A request's stream whose response went out whole: nothing is left to resume, so its
    /// events are released now rather than after the ttl.
    pub fn delivered(&self, event_id: &str) {
        if let Some((stream, _)) = parse(event_id) {
            let mut s = self.state.lock();
            if s.buffers
                .get(&stream)
                .is_some_and(|b| b.finished && b.tick.is_none())
            {
                Self::remove(&mut s, stream);
            }
        }
    }

    fn count(&self, reason: &str, n: u64) {
        if n > 0 {
            self.dropped.with_label_values(&[reason]).inc_by(n);
        }
    }

    /// The stream of the session's request whose first event (the priming event) is `first`,
    /// with that stream bound to `session` and the priming event held back until the next
    /// event is ready (or `PRIMING_HOLD` passed), so both go out in one write.
    pub fn bound_stream<S>(
        self: &Arc<Self>,
        session: String,
        inner: S,
    ) -> impl Stream<Item = ServerSseMessage> + Send + Sync + 'static
    where
        S: Stream<Item = ServerSseMessage> + Send + Sync + Unpin + 'static,
    {
        super::priming::Held::new(inner, self.clone(), session)
    }
}
