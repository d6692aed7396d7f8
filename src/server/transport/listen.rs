//! A stateless-era `subscriptions/listen` for list changes and resource updates, served by the
//! edge: the stream opens with the acknowledgement of what was accepted (as rmcp's handler
//! narrows it), then carries each notification the hub sends that the filter covers, naming
//! the subscription. It ends when the client closes it, when the client falls [`BACKLOG`]
//! notifications behind, or at shutdown.
//! The gateway's side of it (upstream resource subscriptions) is `server::listen`.

use std::sync::Arc;

use futures::future::BoxFuture;
use http::{Response, request::Parts};
use rmcp::model::{
    GetMeta, NotificationMetaObject, RequestId, RequestMetaObject, ServerJsonRpcMessage,
    ServerNotification, SubscriptionFilter, SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Direct, http_answers::http_sse};
use crate::server::{http::Body, sessions::Listener};

/// Notifications a stream holds for a client that reads slowly; past it the stream ends.
const BACKLOG: usize = 64;

/// The edge's end of one listen stream.
#[derive(Debug)]
struct EdgeListener {
    subscription: RequestId,
    accepted: SubscriptionFilter,
    tx: mpsc::Sender<String>,
    /// Cancelled when the stream ends (the client closed it, or fell behind).
    ended: CancellationToken,
}

impl Listener for EdgeListener {
    fn send(&self, mut n: ServerNotification) -> BoxFuture<'static, ()> {
        if covers(&self.accepted, &n) {
            n.get_meta_mut()
                .set_subscription_id(self.subscription.clone());
            let text = serde_json::to_string(&ServerJsonRpcMessage::notification(n));
            // A client that does not read its stream loses it.
            if text.map_or(true, |t| self.tx.try_send(t).is_err()) {
                self.ended.cancel();
            }
        }
        Box::pin(std::future::ready(()))
    }
}

/// Whether the accepted filter covers `n` (what rmcp's sink would send).
fn covers(accepted: &SubscriptionFilter, n: &ServerNotification) -> bool {
    match n {
        ServerNotification::ToolListChangedNotification(_) => {
            accepted.tools_list_changed == Some(true)
        }
        ServerNotification::PromptListChangedNotification(_) => {
            accepted.prompts_list_changed == Some(true)
        }
        ServerNotification::ResourceListChangedNotification(_) => {
            accepted.resources_list_changed == Some(true)
        }
        ServerNotification::ResourceUpdatedNotification(u) => accepted
            .resource_subscriptions
            .as_ref()
            .is_some_and(|uris| uris.contains(&u.params.uri)),
        _ => false,
    }
}

/// A listen request the edge serves: its id, `_meta` and filter.
pub(super) struct Listen {
    pub id: RequestId,
    pub meta: RequestMetaObject,
    pub filter: SubscriptionFilter,
}

impl Direct {
    /// Serves a listen stream for list changes and resource updates.
    pub(super) fn listen_changes(&self, parts: &Parts, listen: Listen) -> Response<Body> {
        let Listen { id, meta, filter } = listen;
        let accepted = self.gateway.listen_filter(&filter);
        let (tx, rx) = mpsc::channel(BACKLOG);
        let mut ack = SubscriptionsAcknowledgedNotification::new(
            SubscriptionsAcknowledgedNotificationParams::new(accepted.clone()),
        );
        let mut ack_meta = NotificationMetaObject::new();
        ack_meta.set_subscription_id(id.clone());
        ack.extensions.insert(ack_meta);
        let ack = ServerNotification::SubscriptionsAcknowledgedNotification(ack);
        if let Ok(text) = serde_json::to_string(&ServerJsonRpcMessage::notification(ack)) {
            let _ = tx.try_send(text);
        }
        let ended = self.shared.shutdown.child_token();
        let incoming = super::task_listen::listen_incoming(parts, id.clone(), meta, ended.clone());
        let sink = Arc::new(EdgeListener {
            subscription: id.clone(),
            accepted: accepted.clone(),
            tx: tx.clone(),
            ended: ended.clone(),
        });
        let gateway = self.gateway.clone();
        tokio::spawn(async move {
            let until = async {
                tokio::select! {
                    _ = tx.closed() => {}
                    _ = ended.cancelled() => {}
                }
            };
            gateway.hold_listen(sink, &accepted, &incoming, until).await;
        });
        http_sse(rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_carries_what_its_filter_accepted() {
        let accepted = SubscriptionFilter::builder()
            .tools_list_changed()
            .resource_subscriptions(["demo://a".to_owned()])
            .build();
        let (tx, mut rx) = mpsc::channel(BACKLOG);
        let sink = EdgeListener {
            subscription: RequestId::Number(7),
            accepted,
            tx,
            ended: CancellationToken::new(),
        };
        let updated = |uri: &str| {
            ServerNotification::ResourceUpdatedNotification(
                rmcp::model::ResourceUpdatedNotification::new(
                    rmcp::model::ResourceUpdatedNotificationParam::new(uri),
                ),
            )
        };
        drop(sink.send(ServerNotification::PromptListChangedNotification(
            Default::default(),
        )));
        drop(sink.send(updated("demo://b")));
        drop(sink.send(ServerNotification::ToolListChangedNotification(
            Default::default(),
        )));
        drop(sink.send(updated("demo://a")));
        let first: serde_json::Value =
            serde_json::from_str(&rx.try_recv().expect("sent")).expect("JSON");
        assert_eq!(first["method"], "notifications/tools/list_changed");
        assert_eq!(
            first["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            7
        );
        let second: serde_json::Value =
            serde_json::from_str(&rx.try_recv().expect("sent")).expect("JSON");
        assert_eq!(second["params"]["uri"], "demo://a");
        assert!(rx.try_recv().is_err(), "nothing the filter did not accept");
    }
}
