//! What the gateway sends to one connected client — notifications, and requests for input on
//! the stream of one of its calls — whatever transport carries them. The steps, the upstream
//! tap, flows and the session hub see only [`ClientChannel`]; rmcp's server peer is the carrier
//! of both listeners today, so the downstream transport can change without them.
#![allow(deprecated)] // logging is deprecated by SEP-2577 but still relayed

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::{
    RoleServer,
    model::{
        ClientResult, GetExtensions, LoggingMessageNotificationParam, Notification,
        ProgressNotificationParam, PromptListChangedNotification, RequestId,
        ResourceListChangedNotification, ResourceUpdatedNotificationParam, ServerNotification,
        ServerRequest, ToolListChangedNotification,
    },
    service::{OriginatingRequestId, Peer},
};

/// Why a notification did not go out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotSent {
    #[error("the client's session is closed")]
    Closed,
}

/// Why a request to the client got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unanswered {
    #[error("relay task failed: {0}")]
    Relay(String),
    /// The client answered with an error, or the session ended (the carrier's words).
    #[error("{0}")]
    Client(String),
}

/// One connected client, as the gateway talks back to it.
pub trait ClientChannel: Send + Sync + std::fmt::Debug {
    /// Sends a notification; a session's notifications keep their order.
    fn notify(&self, n: ServerNotification) -> BoxFuture<'static, Result<(), NotSent>>;

    /// Sends a request on the stream of the client's request `origin` and waits for the answer.
    fn request(
        &self,
        r: ServerRequest,
        origin: RequestId,
    ) -> BoxFuture<'static, Result<ClientResult, Unanswered>>;

    /// Whether the client's transport has closed (its session is gone).
    fn is_closed(&self) -> bool;

    /// Ends the session, for a carrier that holds it itself (rmcp's ends its own).
    fn close(&self) {}
}

/// A client, shared by the calls and the session hub that talk to it.
pub type ToClient = Arc<dyn ClientChannel>;

impl dyn ClientChannel {
    pub async fn progress(&self, p: ProgressNotificationParam) -> Result<(), NotSent> {
        self.notify(ServerNotification::ProgressNotification(Notification::new(
            p,
        )))
        .await
    }

    pub async fn log(&self, l: LoggingMessageNotificationParam) -> Result<(), NotSent> {
        self.notify(ServerNotification::LoggingMessageNotification(
            Notification::new(l),
        ))
        .await
    }

    pub async fn resource_updated(
        &self,
        p: ResourceUpdatedNotificationParam,
    ) -> Result<(), NotSent> {
        self.notify(ServerNotification::ResourceUpdatedNotification(
            Notification::new(p),
        ))
        .await
    }

    pub async fn tools_changed(&self) -> Result<(), NotSent> {
        self.notify(ServerNotification::ToolListChangedNotification(
            ToolListChangedNotification {
                method: Default::default(),
                extensions: Default::default(),
            },
        ))
        .await
    }

    pub async fn prompts_changed(&self) -> Result<(), NotSent> {
        self.notify(ServerNotification::PromptListChangedNotification(
            PromptListChangedNotification {
                method: Default::default(),
                extensions: Default::default(),
            },
        ))
        .await
    }

    pub async fn resources_changed(&self) -> Result<(), NotSent> {
        self.notify(ServerNotification::ResourceListChangedNotification(
            ResourceListChangedNotification {
                method: Default::default(),
                extensions: Default::default(),
            },
        ))
        .await
    }
}

/// rmcp's server peer: the carrier of `/mcp` (both eras) and of `fedgate stdio`.
impl ClientChannel for Peer<RoleServer> {
    fn notify(&self, n: ServerNotification) -> BoxFuture<'static, Result<(), NotSent>> {
        let peer = self.clone();
        Box::pin(async move { peer.send_notification(n).await.map_err(|_| NotSent::Closed) })
    }

    fn request(
        &self,
        mut r: ServerRequest,
        origin: RequestId,
    ) -> BoxFuture<'static, Result<ClientResult, Unanswered>> {
        // rmcp routes a server request onto the stream of the client request it names.
        r.extensions_mut().insert(OriginatingRequestId(origin));
        let peer = self.clone();
        Box::pin(async move {
            // Sent from a fresh task so rmcp's task-local does not stamp the upstream's
            // request id; the task ends with the call (cancelled, timed out), not when the
            // caller answers.
            tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
                peer.send_request(r).await
            }))
            .await
            .map_err(|e| Unanswered::Relay(e.to_string()))?
            .map_err(|e| Unanswered::Client(e.to_string()))
        })
    }

    fn is_closed(&self) -> bool {
        self.is_transport_closed()
    }
}
