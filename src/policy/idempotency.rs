//! Idempotency keys (F9): a client may send `_meta.idempotencyKey` with a call. fedgate
//! forwards it and records the result for a while, so a repeated call with the same key (same
//! caller, same tool, same arguments) gets the recorded result instead of running again.

use std::time::Duration;

use dashmap::DashMap;
use rmcp::model::ServerResult;
use tokio::{sync::watch, time::Instant};

/// The `_meta` key clients put the idempotency key under.
pub const META_KEY: &str = "idempotencyKey";
/// Recorded entries at which expired ones are swept on insert.
const SWEEP_AT: usize = 1024;

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

#[derive(Debug)]
pub struct IdempotencyStore {
    ttl: Duration,
    entries: DashMap<String, Entry>,
    /// Keys whose call runs now, with its arguments and the channel of its answer.
    running: DashMap<String, (String, watch::Receiver<Option<ServerResult>>)>,
}

impl IdempotencyStore {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: DashMap::new(),
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
        if self.entries.len() >= SWEEP_AT {
            let ttl = self.ttl;
            self.entries.retain(|_, e| now.duration_since(e.at) < ttl);
        }
        self.entries.insert(
            key,
            Entry {
                at: now,
                arguments_sha256,
                result,
            },
        );
    }
}
