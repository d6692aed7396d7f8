//! Downstream sessions that want notifications: list changes and resource updates.
#![allow(deprecated)] // logging is deprecated by SEP-2577 but still served

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use crate::upstream::{Changed, Downstreams};
use dashmap::DashMap;
use futures::{StreamExt, future::BoxFuture};
use rmcp::model::{
    ClientCapabilities, LoggingLevel, ResourceUpdatedNotification,
    ResourceUpdatedNotificationParam, ServerNotification,
};

use crate::to_client::ToClient;

/// Subscriber keys of `subscriptions/listen` streams start with this (session ids never do:
/// rmcp mints UUIDs, stdio is `stdio`).
const LISTENER_PREFIX: &str = "listen:";

/// A stateless-era `subscriptions/listen` stream: it sends what its accepted filter covers,
/// naming its subscription, and drops the rest (rmcp's sink, or the edge's own).
pub trait Listener: Send + Sync + std::fmt::Debug {
    fn send(&self, n: ServerNotification) -> BoxFuture<'static, ()>;
}

impl Listener for rmcp::service::SubscriptionSink {
    fn send(&self, n: ServerNotification) -> BoxFuture<'static, ()> {
        let sink = self.clone();
        Box::pin(async move {
            let _ = rmcp::service::SubscriptionSink::send(&sink, n).await;
        })
    }
}

/// Registry of live downstream sessions, keyed by their `Mcp-Session-Id` (or `stdio`).
#[derive(Debug, Default)]
pub struct Hub {
    sessions: DashMap<String, ToClient>,
    /// uri -> sessions subscribed to it
    subscriptions: DashMap<String, Vec<String>>,
    /// Open `subscriptions/listen` streams of stateless-era clients.
    listeners: DashMap<u64, Arc<dyn Listener>>,
    next_listener: AtomicU64,
    /// Handshake-era `logging/setLevel`, per session.
    log_levels: DashMap<String, LoggingLevel>,
    /// What handshake-era sessions negotiated (the edge's direct path answers their calls).
    negotiated: DashMap<String, Arc<Negotiated>>,
    /// Handshake-era sessions of the HTTP listener (see `transport::handshake`); `fedgate stdio`'s
    /// one session is rmcp's.
    native: DashMap<String, ()>,
    /// URIs whose subscribers all went away without unsubscribing.
    released: parking_lot::Mutex<Vec<String>>,
}

/// What a handshake-era session's `initialize` settled.
#[derive(Debug)]
pub struct Negotiated {
    pub capabilities: ClientCapabilities,
    /// The protocol version its requests name in `MCP-Protocol-Version`.
    pub version: String,
    /// When it was last used (it ends after `session_idle_ms` unused).
    pub touched: parking_lot::Mutex<tokio::time::Instant>,
}

impl Negotiated {
    /// The session was just used.
    pub fn touched_now(&self) {
        *self.touched.lock() = tokio::time::Instant::now();
    }

    pub fn new(capabilities: ClientCapabilities, version: String) -> Self {
        Self {
            capabilities,
            version,
            touched: parking_lot::Mutex::new(tokio::time::Instant::now()),
        }
    }
}

/// List-change notifications sent at once (each waits on its session's channel).
const NOTIFY_CONCURRENCY: usize = 32;

impl Hub {
    /// Registers a session's client under its key. Registering the client it holds again (a
    /// subscription of a session) changes nothing.
    pub fn register(&self, session: &str, client: ToClient) {
        let again = self
            .sessions
            .get(session)
            .is_some_and(|c| std::ptr::addr_eq(Arc::as_ptr(&*c), Arc::as_ptr(&client)));
        if !again {
            self.sessions.insert(session.to_owned(), client);
        }
    }

    /// Records a session the edge holds itself, registered before with [`Self::register`].
    pub fn hold_natively(&self, session: &str, n: Negotiated) {
        self.native.insert(session.to_owned(), ());
        self.negotiated(session, n);
    }

    /// Whether the edge holds this session itself (no rmcp worker behind it).
    pub fn is_native(&self, session: &str) -> bool {
        self.native.contains_key(session)
    }

    /// How many sessions the edge holds itself.
    pub fn native_count(&self) -> usize {
        self.native.len()
    }

    /// Ends a session the edge holds itself (DELETE, or idle too long): its client is closed
    /// and forgotten with its log level and subscriptions. False if it held no such session.
    pub fn end_native(&self, session: &str) -> bool {
        if self.native.remove(session).is_none() {
            return false;
        }
        if let Some(client) = self.sessions.get(session) {
            client.close();
        }
        self.prune();
        true
    }

    /// The sessions the edge holds itself that were last used before `before`.
    pub fn idle_native(&self, before: tokio::time::Instant) -> Vec<String> {
        self.native
            .iter()
            .filter(|e| {
                self.negotiated
                    .get(e.key())
                    .is_none_or(|n| *n.touched.lock() < before)
            })
            .map(|e| e.key().clone())
            .collect()
    }

    /// Records what a session negotiated; forgotten with the session.
    pub fn negotiated(&self, session: &str, n: Negotiated) {
        self.negotiated.insert(session.to_owned(), Arc::new(n));
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
    pub fn add_listener(&self, sink: Arc<dyn Listener>) -> u64 {
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
            self.native.remove(k);
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
        let sinks: Vec<Arc<dyn Listener>> =
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
                        let n = ServerNotification::ToolListChangedNotification(Default::default());
                        sink.send(n).await;
                    }
                    if changed.prompts {
                        let n =
                            ServerNotification::PromptListChangedNotification(Default::default());
                        sink.send(n).await;
                    }
                    if changed.resources {
                        let n =
                            ServerNotification::ResourceListChangedNotification(Default::default());
                        sink.send(n).await;
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
                let n = ServerNotification::ResourceUpdatedNotification(
                    ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(p.uri)),
                );
                tokio::spawn(sink.send(n));
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

#[cfg(test)]
mod tests {
    use std::{sync::atomic::AtomicBool, time::Duration};

    use futures::future::BoxFuture;
    use rmcp::model::{ClientResult, RequestId, ServerNotification, ServerRequest};
    use tokio::time::Instant;

    use super::*;
    use crate::to_client::{ClientChannel, NotSent, Unanswered};

    #[derive(Debug, Default)]
    struct Probe(AtomicBool);

    impl ClientChannel for Probe {
        fn notify(&self, _n: ServerNotification) -> BoxFuture<'static, Result<(), NotSent>> {
            Box::pin(std::future::ready(Ok(())))
        }
        fn request(
            &self,
            _r: ServerRequest,
            _o: RequestId,
        ) -> BoxFuture<'static, Result<ClientResult, Unanswered>> {
            Box::pin(std::future::ready(Err(Unanswered::Client("probe".into()))))
        }
        fn is_closed(&self) -> bool {
            self.0.load(Ordering::Relaxed)
        }
        fn close(&self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    fn hold(hub: &Hub, session: &str) -> Arc<Probe> {
        let client = Arc::new(Probe::default());
        hub.register(session, client.clone());
        let n = Negotiated::new(ClientCapabilities::default(), "2025-11-25".into());
        hub.hold_natively(session, n);
        client
    }

    #[tokio::test(start_paused = true)]
    async fn sessions_idle_out_and_end_forgetting_what_they_held() {
        let hub = Hub::default();
        let native = hold(&hub, "s1");
        assert_eq!(hub.native_count(), 1);
        assert!(hub.negotiation("s1").is_some() && hub.is_native("s1"));

        // Idle past the horizon, until used again.
        tokio::time::advance(Duration::from_secs(10)).await;
        let horizon = Instant::now() - Duration::from_secs(5);
        assert_eq!(hub.idle_native(horizon), vec!["s1".to_owned()]);
        hub.negotiation("s1").expect("open").touched_now();
        assert!(hub.idle_native(horizon).is_empty());

        // Its own client registered again (it subscribes to a resource): still the edge's.
        hub.register("s1", native.clone());
        assert!(!native.is_closed() && hub.is_native("s1"));

        // Ended by the edge: forgotten with its log level.
        let other = hold(&hub, "s2");
        hub.set_log_level("s2", LoggingLevel::Error);
        assert!(hub.end_native("s2"));
        assert!(other.is_closed());
        assert!(hub.negotiation("s2").is_none());
        assert_eq!(hub.log_level("s2"), None);
        assert_eq!(hub.native_count(), 1);
        assert!(hub.is_open("s1") && !native.is_closed());
    }
}
