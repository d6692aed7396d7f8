//! Idempotency keys (F9): a client may send `_meta.idempotencyKey` with a call. fedgate
//! forwards it and records the result for a while, so a repeated call with the same key (same
//! caller, same tool, same arguments) gets the recorded result instead of running again.

use std::time::Duration;

use dashmap::DashMap;
use rmcp::model::ServerResult;
use tokio::{sync::watch, time::Instant};

/// The `_meta` key clients put the idempotency key under.
pub const META_KEY: &str = "idempotencyKey";
/// Most results recorded at once, whatever their size.
const MAX_ENTRIES: usize = 100_000;

#[derive(Debug)]
struct Entry {
    at: Instant,
    arguments_sha256: String,
    result: ServerResult,
}

/// What a repeated key means.
#[derive(Debug)]
pub enum Lookup {
    New,
    Recorded(Box<ServerResult>),
    /// The key was used before with other arguments.
    Conflict,
}

/// What a call with a key does now.
#[derive(Debug)]
pub enum Claim {
    /// Run it; the guard records its answer and releases callers waiting for it.
    Lead(Leader),
    /// The same call runs already: wait for its answer (`None` if it ended without one).
    Wait(watch::Receiver<Option<ServerResult>>),
    Recorded(Box<ServerResult>),
    Conflict,
}

/// The running call of a key; dropping it without [`Leader::finish`] (a failure, a
/// cancellation) lets waiting duplicates run themselves.
#[derive(Debug)]
pub struct Leader {
    store: std::sync::Arc<IdempotencyStore>,
    key: String,
    arguments_sha256: String,
    tx: watch::Sender<Option<ServerResult>>,
}

impl Leader {
    /// Records the call's final answer and hands it to the duplicates waiting for it.
    pub fn finish(self, result: ServerResult) {
        self.store.record(
            self.key.clone(),
            self.arguments_sha256.clone(),
            result.clone(),
            Instant::now(),
        );
        let _ = self.tx.send(Some(result));
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.store.running.remove(&self.key);
    }
}

/// One recording: when, under which key, how many bytes.
type Recorded = (Instant, String, usize);

/// Recorded results are bounded by age, count and bytes; the oldest go first, so recording
/// never sweeps the whole map.
#[derive(Debug)]
pub struct IdempotencyStore {
    ttl: Duration,
    max_bytes: usize,
    entries: DashMap<String, Entry>,
    /// Recording order, oldest first, and the bytes of all together.
    order: parking_lot::Mutex<(std::collections::VecDeque<Recorded>, usize)>,
    /// Keys whose call runs now, with its arguments and the channel of its answer.
    running: DashMap<String, (String, watch::Receiver<Option<ServerResult>>)>,
}

impl IdempotencyStore {
    pub fn new(ttl: Duration, max_bytes: usize) -> Self {
        Self {
            ttl,
            max_bytes,
            entries: DashMap::new(),
            order: parking_lot::Mutex::default(),
            running: DashMap::new(),
        }
    }

    /// The recorded answer, the running duplicate to wait for, or the lead of a new call:
    /// concurrent duplicates run once.
    pub fn claim(
        self: &std::sync::Arc<Self>,
        key: &str,
        arguments_sha256: &str,
        now: Instant,
    ) -> Claim {
        match self.lookup(key, arguments_sha256, now) {
            Lookup::Recorded(r) => return Claim::Recorded(r),
            Lookup::Conflict => return Claim::Conflict,
            Lookup::New => {}
        }
        match self.running.entry(key.to_owned()) {
            dashmap::Entry::Occupied(e) => {
                if e.get().0 == arguments_sha256 {
                    Claim::Wait(e.get().1.clone())
                } else {
                    Claim::Conflict
                }
            }
            dashmap::Entry::Vacant(v) => {
                let (tx, rx) = watch::channel(None);
                v.insert((arguments_sha256.to_owned(), rx));
                Claim::Lead(Leader {
                    store: self.clone(),
                    key: key.to_owned(),
                    arguments_sha256: arguments_sha256.to_owned(),
                    tx,
                })
            }
        }
    }

    /// How long results are recorded.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn lookup(&self, key: &str, arguments_sha256: &str, now: Instant) -> Lookup {
        match self.entries.get(key) {
            Some(e) if now.duration_since(e.at) < self.ttl => {
                if e.arguments_sha256 == arguments_sha256 {
                    Lookup::Recorded(Box::new(e.result.clone()))
                } else {
                    Lookup::Conflict
                }
            }
            _ => Lookup::New,
        }
    }

    pub fn record(
        &self,
        key: String,
        arguments_sha256: String,
        result: ServerResult,
        now: Instant,
    ) {
        let bytes = crate::json_size::encoded_len(&result).saturating_add(key.len());
        let mut order = self.order.lock();
        order.0.push_back((now, key.clone(), bytes));
        order.1 = order.1.saturating_add(bytes);
        self.entries.insert(
            key,
            Entry {
                at: now,
                arguments_sha256,
                result,
            },
        );
        // The oldest go while there are too many, too much, or they expired.
        while let Some((at, _, _)) = order.0.front() {
            let over = order.0.len() > MAX_ENTRIES || order.1 > self.max_bytes;
            if !over && now.duration_since(*at) < self.ttl {
                break;
            }
            let Some((at, old, size)) = order.0.pop_front() else {
                break;
            };
            order.1 = order.1.saturating_sub(size);
            // A key recorded again later has a newer entry: only this recording goes.
            self.entries.remove_if(&old, |_, e| e.at == at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(text: &str) -> ServerResult {
        ServerResult::CallToolResult(rmcp::model::CallToolResult::success(vec![
            rmcp::model::ContentBlock::text(text.to_owned()),
        ]))
    }

    #[test]
    fn recorded_results_are_bounded_by_bytes_and_age_oldest_first() {
        let one = crate::json_size::encoded_len(&result(&"x".repeat(100))) + 2;
        let store = IdempotencyStore::new(Duration::from_secs(60), one * 2);
        let t0 = Instant::now();
        for (i, key) in ["k1", "k2", "k3"].into_iter().enumerate() {
            let at = t0 + Duration::from_millis(i as u64);
            store.record(key.into(), "a".into(), result(&"x".repeat(100)), at);
        }
        let now = t0 + Duration::from_millis(10);
        // Two fit: the oldest went.
        assert!(matches!(store.lookup("k1", "a", now), Lookup::New));
        assert!(matches!(store.lookup("k2", "a", now), Lookup::Recorded(_)));
        assert!(matches!(store.lookup("k3", "a", now), Lookup::Recorded(_)));
        // Re-recording a key keeps only its newest entry, counted once.
        store.record("k2".into(), "a".into(), result(&"x".repeat(100)), now);
        assert!(matches!(store.lookup("k2", "a", now), Lookup::Recorded(_)));
        // Expired entries leave when anything is recorded after them.
        let later = t0 + Duration::from_secs(120);
        store.record("k4".into(), "a".into(), result("y"), later);
        assert_eq!(store.entries.len(), 1, "only k4 is left");
    }
}
