//! Downstream sessions that want notifications: list changes and resource updates.
#![allow(deprecated)] // logging is deprecated by SEP-2577 but still served

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use crate::upstream::{Changed, Downstreams};
use dashmap::DashMap;
use futures::StreamExt;
use rmcp::{
    model::{ClientCapabilities, LoggingLevel, ResourceUpdatedNotificationParam},
    service::SubscriptionSink,
};

use crate::to_client::ToClient;

/// Subscriber keys of `subscriptions/listen` streams start with this (session ids never do:
/// rmcp mints UUIDs, stdio is `stdio`).
const LISTENER_PREFIX: &str = "listen:";

/// Registry of live downstream sessions, keyed by their `Mcp-Session-Id` (or `stdio`).
#[derive(Debug, Default)]
pub struct Hub {
    sessions: DashMap<String, ToClient>,
    /// uri -> sessions subscribed to it
    subscriptions: DashMap<String, Vec<String>>,
    /// Open `subscriptions/listen` streams of stateless-era clients.
    listeners: DashMap<u64, SubscriptionSink>,
    next_listener: AtomicU64,
    /// Handshake-era `logging/setLevel`, per session.
    log_levels: DashMap<String, LoggingLevel>,
    /// What handshake-era sessions negotiated (the edge's direct path answers their calls).
    negotiated: DashMap<String, Arc<Negotiated>>,
    /// Woken whenever a session's negotiation is recorded.
    recorded: tokio::sync::Notify,
    /// URIs whose subscribers all went away without unsubscribing.
    released: parking_lot::Mutex<Vec<String>>,
}

/// What a handshake-era session's `initialize` settled.
#[derive(Debug)]
pub struct Negotiated {
    pub capabilities: ClientCapabilities,
    /// The protocol version its requests name in `MCP-Protocol-Version`.
    pub version: String,
    /// When a request last reached rmcp's session worker (which ends idle sessions).
    pub touched: parking_lot::Mutex<tokio::time::Instant>,
}

/// List-change notifications sent at once (each waits on its session's channel).
const NOTIFY_CONCURRENCY: usize = 32;

impl Hub {
    /// Registers a session's client under its key.
    pub fn register(&self, session: &str, client: ToClient) {
        self.sessions.insert(session.to_owned(), client);
    }

    /// Records what a session negotiated; forgotten with the session.
    pub fn negotiated(&self, session: &str, n: Negotiated) {
        self.negotiated.insert(session.to_owned(), Arc::new(n));
        self.recorded.notify_waiters();
    }

    /// Waits (at most `limit`) until the session's negotiation is recorded: rmcp acknowledges
    /// `notifications/initialized` before its worker has handled it.
    pub async fn until_negotiated(&self, session: &str, limit: std::time::Duration) {
        let wait = async {
            loop {
                let recorded = self.recorded.notified();
                if self.negotiated.contains_key(session) {
                    return;
                }
                recorded.await;
            }
        };
        let _ = tokio::time::timeout(limit, wait).await;
    }

    /// What an open handshake-era session negotiated.
    pub fn negotiation(&self, session: &str) -> Option<Arc<Negotiated>> {
        if !self.is_open(session) {
            return None;
        }
        self.negotiated.get(session).map(|n| n.clone())
    }

    pub fn set_log_level(&self, session: &str, level: LoggingLevel) {
        self.log_levels.insert(session.to_owned(), level);
    }

    pub fn log_level(&self, session: &str) -> Option<LoggingLevel> {
        self.log_levels.get(session).map(|l| *l)
    }

    /// Adds a stateless-era listener; remove it with [`Self::remove_listener`].
    pub fn add_listener(&self, sink: SubscriptionSink) -> u64 {
        let id = self.next_listener.fetch_add(1, Ordering::Relaxed);
        self.listeners.insert(id, sink);
        id
    }

    pub fn remove_listener(&self, id: u64) {
        self.listeners.remove(&id);
    }

    /// Whether a session of this key is registered and its transport open.
    pub fn is_open(&self, session: &str) -> bool {
        self.sessions.get(session).is_some_and(|p| !p.is_closed())
    }

    pub fn len(&self) -> usize {
        self.prune();
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets sessions whose transport closed, with their log levels and subscriptions; the
    /// URIs nobody subscribes to any more are kept for [`Self::take_released`].
    fn prune(&self) {
        let mut gone = Vec::new();
        self.sessions.retain(|k, p| {
            let open = !p.is_closed();
            if !open {
                gone.push(k.clone());
            }
            open
        });
        if gone.is_empty() {
            return;
        }
        for k in &gone {
            self.log_levels.remove(k);
            self.negotiated.remove(k);
        }
        let mut released = Vec::new();
        self.subscriptions.retain(|uri, subscribers| {
            subscribers.retain(|s| !gone.contains(s));
            if subscribers.is_empty() {
                released.push(uri.clone());
            }
            !subscribers.is_empty()
        });
        if !released.is_empty() {
            self.released.lock().extend(released);
        }
    }

    /// Prunes, and answers the resource URIs whose last subscriber went without unsubscribing
    /// (their upstream subscriptions are then released).
    pub fn take_released(&self) -> Vec<String> {
        self.prune();
        std::mem::take(&mut *self.released.lock())
    }

    /// How many log levels and subscription lists are held (bounded by the open sessions).
    pub fn held(&self) -> (usize, usize) {
        (self.log_levels.len(), self.subscriptions.len())
    }

    /// Tells every session which lists changed: one background task sends to all of them, a
    /// few at a time, whatever the number of sessions.
    pub fn notify_changed(&self, changed: Changed) {
        if !changed.any() {
            return;
        }
        self.prune();
        let peers: Vec<ToClient> = self.sessions.iter().map(|e| e.value().clone()).collect();
        // A listener's sink drops what its accepted filter does not cover.
        let sinks: Vec<SubscriptionSink> =
            self.listeners.iter().map(|e| e.value().clone()).collect();
        if peers.is_empty() && sinks.is_empty() {
            return;
        }
        tokio::spawn(async move {
            futures::stream::iter(peers)
                .for_each_concurrent(NOTIFY_CONCURRENCY, |peer| async move {
                    if changed.tools {
                        let _ = peer.tools_changed().await;
                    }
                    if changed.prompts {
                        let _ = peer.prompts_changed().await;
                    }
                    if changed.resources {
                        let _ = peer.resources_changed().await;
                    }
                })
                .await;
            futures::stream::iter(sinks)
                .for_each_concurrent(NOTIFY_CONCURRENCY, |sink| async move {
                    if changed.tools {
                        let _ = sink.notify_tool_list_changed().await;
                    }
                    if changed.prompts {
                        let _ = sink.notify_prompt_list_changed().await;
                    }
                    if changed.resources {
                        let _ = sink.notify_resource_list_changed().await;
                    }
                })
                .await;
        });
    }

    /// Tells these sessions their tool lists changed (a workspace's stage moved).
    pub fn notify_tools_changed(&self, sessions: &[String]) {
        let peers: Vec<ToClient> = sessions
            .iter()
            .filter_map(|s| self.sessions.get(s).map(|p| p.clone()))
            .collect();
        if peers.is_empty() {
            return;
        }
        tokio::spawn(futures::stream::iter(peers).for_each_concurrent(
            NOTIFY_CONCURRENCY,
            |peer| async move {
                let _ = peer.tools_changed().await;
            },
        ));
    }

    /// Records a subscription; true when it is the first for that URI (subscribe upstream).
    pub fn subscribe(&self, session: &str, uri: &str) -> bool {
        let mut entry = self.subscriptions.entry(uri.to_owned()).or_default();
        let first = entry.is_empty();
        if !entry.iter().any(|s| s == session) {
            entry.push(session.to_owned());
        }
        first
    }

    /// Drops a subscription; true when it was the last for that URI (unsubscribe upstream).
    pub fn unsubscribe(&self, session: &str, uri: &str) -> bool {
        let mut last = false;
        if let Some(mut e) = self.subscriptions.get_mut(uri) {
            e.retain(|s| s != session);
            last = e.is_empty();
        }
        if last {
            self.subscriptions.remove(uri);
        }
        last
    }

    /// Delivers `notifications/resources/updated` to the sessions subscribed to its URI.
    pub fn resource_updated(&self, params: ResourceUpdatedNotificationParam) {
        let Some(ids) = self.subscriptions.get(&params.uri).map(|e| e.clone()) else {
            return;
        };
        for id in ids {
            let p = params.clone();
            if let Some(peer) = self.sessions.get(&id).map(|p| p.clone()) {
                tokio::spawn(async move {
                    let _ = peer.resource_updated(p).await;
                });
            } else if let Some(sink) = Self::listener_id(&id)
                .and_then(|l| self.listeners.get(&l))
                .map(|s| s.clone())
            {
                tokio::spawn(async move {
                    let _ = sink.notify_resource_updated(p.uri).await;
                });
            }
        }
    }

    /// The subscriber key of a stateless-era listener (sessions are keyed by their id).
    pub fn listener_key(id: u64) -> String {
        format!("{LISTENER_PREFIX}{id}")
    }

    fn listener_id(key: &str) -> Option<u64> {
        key.strip_prefix(LISTENER_PREFIX)?.parse().ok()
    }
}

impl Downstreams for Hub {
    fn lists_changed(&self, changed: Changed) {
        self.notify_changed(changed);
    }
    fn resource_updated(&self, update: ResourceUpdatedNotificationParam) {
        Hub::resource_updated(self, update);
    }
}
