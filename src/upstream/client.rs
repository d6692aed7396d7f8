//! fedgate's client face towards one upstream: server-to-client requests go back to the
//! downstream call that caused them; list changes and resource updates go to the supervisor.
#![allow(deprecated)] // sampling, roots and logging are deprecated by SEP-2577 but still in use

use std::sync::Arc;

use rmcp::{
    ClientHandler, ErrorData as McpError, RoleClient,
    model::{
        ClientCapabilities, ClientConfig, ClientResult, CreateMessageRequestParams,
        CreateMessageResult, ElicitRequestParams, ElicitResult, GetExtensions, Implementation,
        ListRootsResult, ProtocolVersion, Request, ResourceUpdatedNotificationParam, ServerRequest,
    },
    service::{InboundStreamOrigin, NotificationContext, OriginatingRequestId, RequestContext},
};
use tokio::sync::mpsc;

use super::inflight::{Downstream, Inflight};

/// What an upstream tells its supervisor outside of request/response.
#[derive(Debug)]
pub enum UpstreamEvent {
    ToolsChanged,
    PromptsChanged,
    ResourcesChanged,
    ResourceUpdated(ResourceUpdatedNotificationParam),
}

#[derive(Debug, Clone)]
pub struct UpstreamClient {
    pub upstream: Arc<str>,
    pub inflight: Arc<Inflight>,
    pub events: mpsc::UnboundedSender<UpstreamEvent>,
}

impl UpstreamClient {
    fn downstream(&self, ctx: &RequestContext<RoleClient>) -> Result<Downstream, McpError> {
        let origin = match ctx.extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => Some(id),
            _ => None,
        };
        self.inflight.downstream_for(origin).ok_or_else(|| {
            McpError::invalid_request(
                format!(
                    "fedgate cannot tell which client call upstream `{}` is asking for: \
                     {} calls are in flight on this connection",
                    self.upstream,
                    self.inflight.len()
                ),
                None,
            )
        })
    }

    /// Sends a server-to-client request to the downstream session, on the stream of the call
    /// it belongs to, and returns the client's answer.
    async fn relay(
        &self,
        ctx: &RequestContext<RoleClient>,
        mut request: ServerRequest,
    ) -> Result<ClientResult, McpError> {
        let d = self.downstream(ctx)?;
        request
            .extensions_mut()
            .insert(OriginatingRequestId(d.request_id.clone()));
        // Sent from a fresh task so rmcp's task-local does not stamp the upstream's request id.
        let peer = d.peer.clone();
        let answer = tokio::spawn(async move { peer.send_request(request).await })
            .await
            .map_err(|e| McpError::internal_error(format!("relay task failed: {e}"), None))?;
        answer.map_err(|e| {
            McpError::internal_error(
                format!(
                    "the client did not answer the request of upstream `{}`: {e}",
                    self.upstream
                ),
                None,
            )
        })
    }
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        let caps = ClientCapabilities::builder()
            .enable_sampling()
            .enable_elicitation()
            .enable_roots()
            .build();
        ClientConfig::new(
            caps,
            Implementation::new("fedgate", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        ctx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        match self
            .relay(
                &ctx,
                ServerRequest::CreateMessageRequest(Request::new(params)),
            )
            .await?
        {
            ClientResult::CreateMessageResult(r) => Ok(*r),
            other => Err(unexpected("sampling/createMessage", &other)),
        }
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        ctx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        match self
            .relay(&ctx, ServerRequest::ElicitRequest(Request::new(params)))
            .await?
        {
            ClientResult::ElicitResult(r) => Ok(r),
            other => Err(unexpected("elicitation/create", &other)),
        }
    }

    async fn list_roots(
        &self,
        ctx: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        let req = ServerRequest::ListRootsRequest(Default::default());
        match self.relay(&ctx, req).await? {
            ClientResult::ListRootsResult(r) => Ok(r),
            other => Err(unexpected("roots/list", &other)),
        }
    }

    async fn on_tool_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        let _ = self.events.send(UpstreamEvent::ToolsChanged);
    }

    async fn on_prompt_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        let _ = self.events.send(UpstreamEvent::PromptsChanged);
    }

    async fn on_resource_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        let _ = self.events.send(UpstreamEvent::ResourcesChanged);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        let _ = self.events.send(UpstreamEvent::ResourceUpdated(params));
    }
}

fn unexpected(method: &str, got: &ClientResult) -> McpError {
    McpError::internal_error(
        format!("the client answered {method} with an unexpected result: {got:?}"),
        None,
    )
}
