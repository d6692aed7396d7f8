//! A stateless-era `subscriptions/listen` stream's life, whichever transport carries it (rmcp's,
//! or the edge's own in `transport::listen`): what is accepted of the filter, and holding the
//! stream — list changes come from the hub; each resource subscription is made upstream
//! (`resources/subscribe` on a handshake-era upstream, the listen filter of a stateless-era
//! one) by the first subscriber and dropped by the last.

use std::{future::Future, sync::Arc};

use rmcp::model::{SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams};

use super::{
    mcp::Gateway,
    request_of::Incoming,
    sessions::{Hub, Listener},
};
use crate::pipeline::Op;

impl Gateway {
    /// What a listen stream gets of `requested`: the resources the catalog serves, of what the
    /// gateway advertises (as rmcp's handler narrows it).
    pub(super) fn listen_filter(&self, requested: &SubscriptionFilter) -> SubscriptionFilter {
        let advertised = requested.supported_by(&self.info().capabilities);
        requested
            .intersection(&self.accepted_filter(requested))
            .intersection(&advertised)
    }

    /// Holds a listen stream until `until` resolves; resources the caller may not watch, or
    /// that cannot be subscribed to upstream, are left out (the acknowledgement was sent).
    pub(super) async fn hold_listen(
        &self,
        sink: Arc<dyn Listener>,
        accepted: &SubscriptionFilter,
        rctx: &Incoming,
        until: impl Future<Output = ()>,
    ) {
        let hub = &self.parts.hub;
        let id = hub.add_listener(sink);
        let key = Hub::listener_key(id);
        let access = self.identity(rctx).access;
        let mut held = Vec::new();
        for uri in accepted.resource_subscriptions.iter().flatten() {
            if !self.may_watch(&access, uri) {
                continue;
            }
            if hub.subscribe(&key, uri) {
                let op = Op::Subscribe(SubscribeRequestParams::new(uri.clone()));
                if let Err(e) = self.run(op, rctx).await {
                    tracing::info!(
                        uri,
                        "resource subscription failed upstream: {}",
                        crate::guard::masked(&e.message)
                    );
                    hub.unsubscribe(&key, uri);
                    continue;
                }
            }
            held.push(uri.clone());
        }
        until.await;
        for uri in held {
            if hub.unsubscribe(&key, &uri) {
                // The stream's own token is cancelled by now.
                let op = Op::Unsubscribe(UnsubscribeRequestParams::new(uri));
                let _ = self.run_with(op, rctx, Default::default()).await;
            }
        }
        hub.remove_listener(id);
    }
}
