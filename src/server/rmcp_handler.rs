//! rmcp's server carries `fedgate stdio` (`/mcp` is the edge's own, see `direct`): its handler
//! trait, adapted to the gateway's answers (`mcp.rs`). Only this file and `request_of` see rmcp's request context.
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
    unrouted,
};

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

    /// One stream, one merged acknowledgement (see `listen`).
    async fn listen(&self, ctx: SubscriptionContext) -> Result<(), McpError> {
        let sink = Arc::new(ctx.sink().clone());
        let rctx = &Incoming::of(ctx.request_context());
        self.hold_listen(sink, ctx.accepted(), rctx, ctx.cancelled())
            .await;
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
