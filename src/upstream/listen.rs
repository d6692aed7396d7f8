//! Stateless-era upstreams send list changes and resource updates only on a
//! `subscriptions/listen` stream; this keeps one open per connection, with the filter the
//! upstream's capabilities and the clients' resource subscriptions call for. A stream that
//! cannot be reopened because nobody answers reports the connection broken.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use rmcp::{
    RoleClient,
    model::{ServerNotification, SubscriptionFilter},
    service::Peer,
};
use tokio::sync::mpsc;

use super::{Upstream, client::UpstreamEvent, supervisor::STABLE_AFTER};

/// Pauses before listening again after an upstream's subscription stream ended.
const LISTEN_RETRY_START: Duration = Duration::from_millis(500);
const LISTEN_RETRY_MAX: Duration = Duration::from_secs(30);

/// Stateless-era upstreams send list changes and resource updates only on a
/// `subscriptions/listen` stream. Its filter holds the list changes the upstream offers and the
/// URIs downstream clients subscribed to; when those change the stream is opened anew.
pub(super) async fn listen_for_changes(
    up: Arc<Upstream>,
    peer: Peer<RoleClient>,
    events: mpsc::UnboundedSender<UpstreamEvent>,
) {
    let caps = peer
        .peer_info()
        .map(|i| i.capabilities.clone())
        .unwrap_or_default();
    let mut base = SubscriptionFilter::default();
    if caps.tools.as_ref().and_then(|t| t.list_changed) == Some(true) {
        base.tools_list_changed = Some(true);
    }
    if caps.prompts.as_ref().and_then(|p| p.list_changed) == Some(true) {
        base.prompts_list_changed = Some(true);
    }
    if caps.resources.as_ref().and_then(|r| r.list_changed) == Some(true) {
        base.resources_list_changed = Some(true);
    }
    let mut watched = up.watched.subscribe();
    let mut pause = LISTEN_RETRY_START;
    let mut reopened = false;
    loop {
        let mut filter = base.clone();
        let uris: Vec<String> = watched.borrow_and_update().iter().cloned().collect();
        if !uris.is_empty() {
            filter.resource_subscriptions = Some(uris);
        }
        if filter == SubscriptionFilter::default() {
            // Nothing to listen for until a client subscribes to a resource.
            if watched.changed().await.is_err() {
                return;
            }
            continue;
        }
        let why = match peer.listen(filter).await {
            Ok(mut sub) => {
                let opened = tokio::time::Instant::now();
                pause = LISTEN_RETRY_START;
                if reopened {
                    // A list that changed while no stream was open sent its notification to
                    // nobody: look again (a refresh that finds nothing new tells no client).
                    catch_up(&base, &events);
                }
                reopened = true;
                let ended = relay_subscription(&mut sub, &mut watched, &events).await;
                if opened.elapsed() >= STABLE_AFTER {
                    up.listen_failing.store(false, Ordering::Relaxed);
                }
                match ended {
                    Some(why) => why,
                    // The URIs changed: open the stream anew at once.
                    None => continue,
                }
            }
            Err(rmcp::ServiceError::McpError(e)) => {
                format!("refused: {}", crate::guard::masked(&e.message))
            }
            Err(rmcp::ServiceError::Cancelled { .. }) => return,
            // No answer at all, not a refusal: a dead HTTP server or peer closes nothing, so
            // drop the connection; the supervisor reports it down and reconnects with backoff.
            Err(e) => {
                let why = crate::error::plain(&e);
                if let Some(c) = up.conn.load_full() {
                    c.broken
                        .report(format!("the upstream stopped answering ({why})"));
                }
                return;
            }
        };
        if events.is_closed() {
            return;
        }
        // Notifications would be lost until the upstream reconnects: listen again, with
        // backoff, as long as the connection lives (this task ends with it).
        // Once per episode (until a stream stays open for STABLE_AFTER), however often a
        // flapping server ends it.
        if up.listen_failing.swap(true, Ordering::Relaxed) {
            tracing::debug!(upstream = %up.name(), "{why}; listening again in {pause:?}");
        } else {
            tracing::warn!(upstream = %up.name(), "{why}; listening again in {pause:?}");
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            c = watched.changed() => if c.is_err() { return },
        }
        pause = (pause * 2).min(LISTEN_RETRY_MAX);
    }
}

/// Asks for a refresh of every list the upstream announces changes of.
fn catch_up(base: &SubscriptionFilter, events: &mpsc::UnboundedSender<UpstreamEvent>) {
    let wanted = [
        (base.tools_list_changed, UpstreamEvent::ToolsChanged),
        (base.prompts_list_changed, UpstreamEvent::PromptsChanged),
        (base.resources_list_changed, UpstreamEvent::ResourcesChanged),
    ];
    for (on, ev) in wanted {
        if on == Some(true) {
            let _ = events.send(ev);
        }
    }
}

/// Passes one subscription's notifications on; `None` when the watched URIs changed (the
/// stream must be reopened), else why the stream ended.
async fn relay_subscription(
    sub: &mut rmcp::service::Subscription,
    watched: &mut tokio::sync::watch::Receiver<std::collections::BTreeSet<String>>,
    events: &mpsc::UnboundedSender<UpstreamEvent>,
) -> Option<String> {
    loop {
        let next = tokio::select! {
            n = sub.next() => n,
            c = watched.changed() => return match c {
                Ok(()) => None,
                Err(_) => Some("upstream stopped".to_owned()),
            },
        };
        let ev = match next {
            Ok(Some(ServerNotification::ToolListChangedNotification(_))) => {
                UpstreamEvent::ToolsChanged
            }
            Ok(Some(ServerNotification::PromptListChangedNotification(_))) => {
                UpstreamEvent::PromptsChanged
            }
            Ok(Some(ServerNotification::ResourceListChangedNotification(_))) => {
                UpstreamEvent::ResourcesChanged
            }
            Ok(Some(ServerNotification::ResourceUpdatedNotification(n))) => {
                UpstreamEvent::ResourceUpdated(n.params)
            }
            Ok(Some(_)) => continue,
            Ok(None) => return Some("the upstream ended its subscription".to_owned()),
            Err(e) => return Some(format!("subscription failed: {e}")),
        };
        if events.send(ev).is_err() {
            return Some("upstream stopped".to_owned());
        }
    }
}
