//! A transport wrapper that sees every message to and from an upstream, in wire order.
//!
//! rmcp dispatches notifications on spawned tasks but resolves responses inline, so a progress
//! notification could overtake nothing and still arrive downstream after the response. The tap
//! routes progress to its call's queue synchronously while reading, before the response behind
//! it is even handed to rmcp; the call drains that queue before it returns.

use std::{future::Future, sync::Arc};

use rmcp::{
    RoleClient,
    model::{
        ClientRequest, GetExtensions, GetMeta, JsonRpcMessage, JsonRpcNotification, RequestId,
        ServerNotification,
    },
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};

use super::inflight::{CallKey, Inflight};

pub struct Tap<T> {
    inner: T,
    table: Arc<Inflight>,
    /// The era probe: the id of the `server/discover` request sent, if any.
    probe: Option<RequestId>,
    /// A probe given up on (rmcp fell back to `initialize`): its late answer is dropped, never
    /// taken for the answer to `initialize` (a slow server answers both, in order).
    abandoned: Option<RequestId>,
}

impl<T> Tap<T> {
    pub fn new(inner: T, table: Arc<Inflight>) -> Self {
        Self {
            inner,
            table,
            probe: None,
            abandoned: None,
        }
    }

    fn sent(&mut self, item: &TxJsonRpcMessage<RoleClient>) {
        let JsonRpcMessage::Request(req) = item else {
            return;
        };
        match &req.request {
            ClientRequest::DiscoverRequest(_) => self.probe = Some(req.id.clone()),
            ClientRequest::InitializeRequest(_) => self.abandoned = self.probe.take(),
            _ => {}
        }
    }

    /// Whether `msg` is the late answer to an abandoned probe.
    fn late_probe_answer(&mut self, msg: &RxJsonRpcMessage<RoleClient>) -> bool {
        let id = match msg {
            JsonRpcMessage::Response(r) => Some(&r.id),
            JsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        if id.is_some() && id == self.abandoned.as_ref() {
            self.abandoned = None;
            return true;
        }
        false
    }
}

impl<T> Transport<RoleClient> for Tap<T>
where
    T: Transport<RoleClient>,
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.sent(&item);
        if let JsonRpcMessage::Request(req) = &item
            && let Some(key) = req.request.extensions().get::<CallKey>()
        {
            let token = req.request.get_meta().get_progress_token();
            self.table.bind(*key, req.id.clone(), token);
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let msg = self.inner.receive().await?;
            if self.late_probe_answer(&msg) {
                tracing::debug!(
                    "late answer to the era probe dropped (the server is slow to start)"
                );
                continue;
            }
            let JsonRpcMessage::Notification(n) = msg else {
                return Some(msg);
            };
            match n.notification {
                ServerNotification::ProgressNotification(p) => {
                    if let Err(token) = self.table.route_progress(p.params) {
                        tracing::debug!(token = ?token, "progress for no call in flight");
                    }
                }
                // Log messages carry no request link; one that cannot be attributed to a single
                // call in flight is dropped rather than shown to the wrong client.
                ServerNotification::LoggingMessageNotification(l) => {
                    if !self.table.route_log(l.params) {
                        tracing::debug!("log message with no single call in flight dropped");
                    }
                }
                notification => {
                    return Some(JsonRpcMessage::Notification(JsonRpcNotification {
                        notification,
                        ..n
                    }));
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
