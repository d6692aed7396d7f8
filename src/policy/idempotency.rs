//! Idempotency keys (F9): a client may send `_meta.idempotencyKey` with a call. fedgate
//! forwards it and records the result for a while, so a repeated call with the same key (same
//! caller, same tool, same arguments) gets the recorded result instead of running again.

use std::time::Duration;

use dashmap::DashMap;
use rmcp::model::ServerResult;
use tokio::time::Instant;

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

#[derive(Debug)]
pub struct IdempotencyStore {
    ttl: Duration,
    entries: DashMap<String, Entry>,
}

impl IdempotencyStore {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: DashMap::new(),
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
