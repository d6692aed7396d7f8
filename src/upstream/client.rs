//! fedgate's client face towards one upstream: server-to-client requests go back to the
//! downstream call that caused them; list changes and resource updates go to the supervisor.
#![allow(deprecated)] // sampling, roots and logging are deprecated by SEP-2577 but still in use

use crate::upstream::inflight::NoInput;
use std::sync::Arc;

use rmcp::{
    ClientHandler, ErrorData as McpError, RoleClient,
    model::{
        ClientCapabilities, ClientConfig, ClientResult, CreateMessageRequestParams,
        CreateMessageResult, ElicitRequestParams, ElicitResult, Implementation, InputRequest,
        ListRootsResult, ProtocolVersion, Request, ResourceUpdatedNotificationParam, ServerRequest,
    },
    service::{InboundStreamOrigin, NotificationContext, RequestContext},
};
use tokio::sync::{mpsc, oneshot};

use super::inflight::{CallKey, Downstream, Inflight, InputAsk};

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
    fn downstream(
        &self,
        ctx: &RequestContext<RoleClient>,
    ) -> Result<(CallKey, Downstream), McpError> {
        let origin = match ctx.extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => Some(id),
            _ => None,
        };
        self.inflight.call_for(origin).ok_or_else(|| {
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

    /// Gets the caller's answer to a server-to-client request: a handshake-era caller is sent
    /// the request on the stream of its call; a stateless-era caller cannot be sent requests,
    /// so the request goes to its call, which returns an `InputRequiredResult` and waits.
    async fn relay(
        &self,
        ctx: &RequestContext<RoleClient>,
        request: ServerRequest,
    ) -> Result<ClientResult, McpError> {
        let (key, d) = self.downstream(ctx)?;
        let failed = |e: NoInput| {
            McpError::internal_error(
                format!(
                    "the client did not answer the request of upstream `{}`: {e}",
                    self.upstream
                ),
                None,
            )
        };
        if !d.modern {
            return d.request(request).await.map_err(failed);
        }
        let (input, method) = input_request(request)?;
        if !declared(d.capabilities.as_ref(), &input) {
            return Err(McpError::invalid_request(
                format!("the client did not declare the capability for {method}"),
                None,
            ));
        }
        let (reply, answer) = oneshot::channel();
        self.inflight.ask(
            key,
            InputAsk {
                request: input,
                reply,
            },
        );
        let value = answer
            .await
            .map_err(|_| {
                failed(NoInput::Unanswered(crate::to_client::Unanswered::Client(
                    "the call ended before the client answered".into(),
                )))
            })?
            .map_err(failed)?;
        client_result(method, value)
    }
}

/// The server-to-client request an input request stands for (the inverse of
/// `input_request`); `None` for kinds fedgate does not know.
pub fn server_request(input: InputRequest) -> Option<ServerRequest> {
    match input {
        InputRequest::CreateMessage(r) => Some(ServerRequest::CreateMessageRequest(r)),
        InputRequest::Elicitation(r) => Some(ServerRequest::ElicitRequest(r)),
        InputRequest::ListRoots(r) => Some(ServerRequest::ListRootsRequest(r)),
        _ => None,
    }
}

/// The input-request form of a server-to-client request, and its method.
fn input_request(request: ServerRequest) -> Result<(InputRequest, &'static str), McpError> {
    match request {
        ServerRequest::CreateMessageRequest(r) => {
            Ok((InputRequest::CreateMessage(r), "sampling/createMessage"))
        }
        ServerRequest::ElicitRequest(r) => Ok((InputRequest::Elicitation(r), "elicitation/create")),
        ServerRequest::ListRootsRequest(r) => Ok((InputRequest::ListRoots(r), "roots/list")),
        other => Err(McpError::invalid_request(
            format!("fedgate cannot ask a stateless-era client for {other:?}"),
            None,
        )),
    }
}

/// A server must not ask for input the client did not declare it can give.
fn declared(caps: Option<&ClientCapabilities>, input: &InputRequest) -> bool {
    let Some(c) = caps else { return false };
    match input {
        InputRequest::CreateMessage(_) => c.sampling.is_some(),
        InputRequest::Elicitation(_) => c.elicitation.is_some(),
        InputRequest::ListRoots(_) => c.roots.is_some(),
        _ => false,
    }
}

/// The caller's `inputResponses` entry as the result type the upstream awaits.
fn client_result(method: &str, value: serde_json::Value) -> Result<ClientResult, McpError> {
    let bad = |e: serde_json::Error| {
        McpError::invalid_params(
            format!("the client's answer to {method} is malformed: {e}"),
            None,
        )
    };
    Ok(match method {
        "sampling/createMessage" => {
            ClientResult::CreateMessageResult(Box::new(serde_json::from_value(value).map_err(bad)?))
        }
        "elicitation/create" => {
            ClientResult::ElicitResult(serde_json::from_value(value).map_err(bad)?)
        }
        _ => ClientResult::ListRootsResult(serde_json::from_value(value).map_err(bad)?),
    })
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
        // Asked outside any one client's call (servers that learn their workspace at startup):
        // fedgate has no roots of its own to give, so the answer is the empty list, not an
        // error the server logs as a failure.
        if self.downstream(&ctx).is_err() {
            tracing::debug!(upstream = %self.upstream, "roots/list outside a client call: answered with no roots");
            return Ok(ListRootsResult::default());
        }
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
