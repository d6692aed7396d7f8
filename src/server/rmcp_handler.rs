//! rmcp's server carries `/mcp` (both eras) and `fedgate stdio`: its handler trait, adapted to
//! the gateway's answers (`mcp.rs`). Only this file and `request_of` see rmcp's request context.
#![allow(deprecated)] // logging and resources/subscribe are deprecated by SEP-2577 but served

use std::sync::Arc;

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
        CompleteResult, GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult,
        ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
        PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerConfig,
        SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, Tool,
        UnsubscribeRequestParams, UpdateTaskParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
};

use super::{
    mcp::Gateway,
    request_of::{Incoming, is_modern, session_key},
    sessions::{Hub, Negotiated},
    unrouted,
};
use crate::pipeline::Op;

impl ServerHandler for Gateway {
    /// rmcp hands over a request of a known method whose params it could not decode (missing,
    /// `arguments` not an object, `name` not a string …) as a custom request; that is invalid
    /// params (-32602), not an unknown method.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
        Err(unrouted::custom_request(&request.method, is_modern(&ctx)))
    }

    fn get_info(&self) -> ServerConfig {
        self.info()
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(self.accepted_filter(requested))
    }

    /// One stream, one merged acknowledgement: list changes come from the hub; each resource
    /// subscription is made upstream (`resources/subscribe` on a handshake-era upstream, the
    /// listen filter of a stateless-era one) by the first subscriber and dropped by the last.
    async fn listen(&self, ctx: SubscriptionContext) -> Result<(), McpError> {
        let hub = &self.parts.hub;
        let id = hub.add_listener(ctx.sink().clone());
        let key = Hub::listener_key(id);
        let rctx = &Incoming::of(ctx.request_context());
        let access = self.identity(rctx).access;
        let mut held = Vec::new();
        for uri in ctx.accepted().resource_subscriptions.iter().flatten() {
            if !self.may_watch(&access, uri) {
                continue;
            }
            if hub.subscribe(&key, uri) {
                let op = Op::Subscribe(SubscribeRequestParams::new(uri.clone()));
                if let Err(e) = self.run(op, rctx).await {
                    tracing::info!(uri, "resource subscription failed upstream: {}", e.message);
                    hub.unsubscribe(&key, uri);
                    continue;
                }
            }
            held.push(uri.clone());
        }
        ctx.cancelled().await;
        for uri in held {
            if hub.unsubscribe(&key, &uri) {
                // The stream's own token is cancelled by now.
                let op = Op::Unsubscribe(UnsubscribeRequestParams::new(uri));
                let _ = self.run_with(op, rctx, Default::default()).await;
            }
        }
        hub.remove_listener(id);
        Ok(())
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        // rmcp checks `Mcp-Param-*` headers against the tool's input schema.
        self.parts.pool.catalog().tool_def(name).cloned()
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.logging_set_level(request, &Incoming::of(&ctx)).await
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        let key = session_key(&ctx.extensions);
        self.initialized(&key, Arc::new(ctx.peer.clone()));
        // What the edge needs to answer this session's calls itself (see `direct`).
        if let Some(info) = ctx.peer.peer_info()
            && ctx.extensions.get::<http::request::Parts>().is_some()
        {
            self.parts.hub.negotiated(
                &key,
                Negotiated::new(info.capabilities.clone(), info.protocol_version.to_string()),
            );
        }
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.tools_list(request, &Incoming::of(&ctx)).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.prompts_list(request, &Incoming::of(&ctx)).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.resources_list(request, &Incoming::of(&ctx)).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.templates_list(request, &Incoming::of(&ctx)).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.tools_call(request, &Incoming::of(&ctx)).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        self.prompts_get(request, &Incoming::of(&ctx)).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.resources_read(request, &Incoming::of(&ctx)).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        self.completion(request, &Incoming::of(&ctx)).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.tasks_get(request, &Incoming::of(&ctx)).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks_update(request, &Incoming::of(&ctx)).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks_cancel(request, &Incoming::of(&ctx)).await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.resources_subscribe(request, &Incoming::of(&ctx)).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.resources_unsubscribe(request, &Incoming::of(&ctx))
            .await
    }
}
