//! fedgate as an MCP server: lists come from the catalog, routed requests go through the stack.
#![allow(deprecated)] // logging and resources/subscribe are deprecated by SEP-2577 but served

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CacheScope, CallToolRequestParams, CallToolResponse, CancelTaskParams,
        CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
        GetTaskParams, GetTaskResult, Implementation, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
        PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
        ServerCapabilities, ServerConfig, ServerResult, SetLevelRequestParams,
        SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams,
        UpdateTaskParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
};
use tower::ServiceExt;

use crate::{
    pipeline::TaskRequest,
    pipeline::{Call, CallError, CallStack, Op, to_wire},
    policy::{
        authz::Access,
        identity::{Identity, IdentityKind},
    },
    router::cursor::BadCursor,
    server::{
        parts::McpParts,
        request_of::{
            caller_context, is_modern, request_span, session_key, session_of, workspace_of,
        },
        sessions::Hub,
        unrouted,
    },
    upstream::{Catalog, inflight::Downstream},
};

#[derive(Debug, Clone)]
pub struct Gateway {
    pub(super) parts: McpParts,
    stack: CallStack,
    page_size: usize,
    local: Identity,
}

impl Gateway {
    pub fn new(parts: McpParts, stack: CallStack, page_size: usize) -> Self {
        Self {
            parts,
            stack,
            page_size,
            local: Identity::unrestricted("local", IdentityKind::Local),
        }
    }

    /// The local operator (stdio) comes through `scope` (`fedgate stdio --view`).
    pub fn through(mut self, scope: Arc<crate::policy::view::Scope>) -> Self {
        self.local = self.local.through(scope);
        self
    }

    /// Whether the caller may get updates of a resource: its roles allow the URI and reach the
    /// trust tier of the upstream serving it.
    fn may_watch(&self, access: &Access, uri: &str) -> bool {
        let catalog = self.parts.pool.catalog();
        access.resource(uri) && self.reaches(access, &catalog, catalog.resource(uri))
    }

    /// Whether the caller's roles reach the trust tier of the upstream at `idx`.
    fn reaches(&self, access: &Access, catalog: &Catalog, idx: Option<usize>) -> bool {
        idx.and_then(|i| catalog.upstream(i))
            .is_some_and(|u| access.tier(u.spec().tier.rank))
    }

    /// The caller: set by the HTTP edge; over stdio it is the local operator.
    pub(super) fn identity(&self, ctx: &RequestContext<RoleServer>) -> Identity {
        ctx.extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Identity>())
            .cloned()
            .unwrap_or_else(|| self.local.clone())
    }

    /// The lowest log level this caller wants: per request in the stateless era (none unless
    /// asked), per session in the handshake era (everything until `logging/setLevel`).
    fn log_level(&self, ctx: &RequestContext<RoleServer>) -> Option<LoggingLevel> {
        let stateless = ctx.protocol_version().is_some_and(|v| !v.has_initialize());
        if stateless {
            ctx.meta.log_level()
        } else {
            Some(
                self.parts
                    .hub
                    .log_level(&session_key(&ctx.extensions))
                    .unwrap_or(LoggingLevel::Debug),
            )
        }
    }

    pub(super) async fn run(
        &self,
        op: Op,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, McpError> {
        self.run_with(op, ctx, ctx.ct.clone()).await
    }

    /// `run` with another cancellation token (cleanup after the request has ended).
    async fn run_with(
        &self,
        op: Op,
        ctx: &RequestContext<RoleServer>,
        ct: tokio_util::sync::CancellationToken,
    ) -> Result<ServerResult, McpError> {
        let downstream = Downstream {
            client: Arc::new(ctx.peer.clone()),
            request_id: ctx.id.clone(),
            log_level: self.log_level(ctx),
            capabilities: ctx.client_capabilities(),
            modern: is_modern(ctx),
            session: session_of(&ctx.extensions),
            workspace: workspace_of(&ctx.extensions),
        };
        let mut call = Call::new(op, self.identity(ctx), 0).from_client(
            downstream,
            ctx.meta.clone(),
            ct,
            caller_context(ctx),
        );
        call.progress_token = ctx.meta.get_progress_token();
        self.stack.clone().oneshot(call).await
    }

    /// Cache hints of a list fedgate serves: filtered per caller unless `[auth]` is absent,
    /// so only then may a shared cache serve it to anyone (`public`). Lists change whenever
    /// an upstream's do, so they are not to be reused (`ttlMs: 0`).
    fn list_scope(&self) -> (Option<u64>, Option<CacheScope>) {
        let scope = if self.parts.auth.load().open {
            CacheScope::Public
        } else {
            CacheScope::Private
        };
        (Some(0), Some(scope))
    }
}

/// The items an identity may see; the whole list, unfiltered, for unrestricted callers.
fn visible<T: Clone>(items: &[T], all: bool, allow: impl Fn(&T) -> bool) -> Cow<'_, [T]> {
    if all {
        Cow::Borrowed(items)
    } else {
        Cow::Owned(items.iter().filter(|x| allow(x)).cloned().collect())
    }
}

fn bad_cursor(e: BadCursor) -> McpError {
    to_wire(&e.into(), false)
}

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
        let caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_completions()
            .enable_logging();
        let caps = if self.offers_tasks() {
            caps.enable_tasks().build()
        } else {
            caps.build()
        };
        ServerConfig::new(caps)
            .with_server_info(Implementation::new("fedgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "fedgate aggregates several MCP servers; tool and prompt names are \
                 namespaced as `<upstream>__<name>` (the configured separator).",
            )
    }

    /// Stateless-era clients learn about list changes and resource updates through
    /// `subscriptions/listen`. A resource subscription is accepted when the URI routes to an
    /// upstream (whether the caller may read it is checked in `listen`, which has its
    /// identity; updates it may not see are never delivered).
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        let catalog = self.parts.pool.catalog();
        accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
            uris.iter()
                .filter(|u| catalog.resource(u).is_some())
                .cloned()
                .collect()
        });
        Some(accepted)
    }

    /// One stream, one merged acknowledgement: list changes come from the hub; each resource
    /// subscription is made upstream (`resources/subscribe` on a handshake-era upstream, the
    /// listen filter of a stateless-era one) by the first subscriber and dropped by the last.
    async fn listen(&self, ctx: SubscriptionContext) -> Result<(), McpError> {
        let hub = &self.parts.hub;
        let id = hub.add_listener(ctx.sink().clone());
        let key = Hub::listener_key(id);
        let rctx = ctx.request_context();
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
        // Upstream connections are shared by all sessions, so the level is applied by fedgate
        // when it relays messages, not forwarded.
        self.parts
            .hub
            .set_log_level(&session_key(&ctx.extensions), request.level);
        Ok(())
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        let key = session_key(&ctx.extensions);
        self.parts.hub.register(&key, Arc::new(ctx.peer.clone()));
        // A new session is a moment to let go of what closed ones left behind.
        for uri in self.parts.hub.take_released() {
            self.parts.pool.release_subscription(&uri);
        }
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let _span = request_span("tools/list", &ctx);
        let catalog = self.parts.pool.catalog();
        let who = self.identity(&ctx);
        let access = who.access.clone();
        let items = visible(&catalog.tools, access.sees_all(), |x| {
            crate::pipeline::visible(&self.parts.pool, &access, &x.name)
        });
        let session = session_of(&ctx.extensions);
        let items = self.parts.search.listed(&access, session.as_deref(), items);
        let items = match &self.parts.stages {
            Some(stages) => stages
                .listed(
                    session.as_deref(),
                    workspace_of(&ctx.extensions).as_deref(),
                    items,
                )
                .await
                .map_err(|r| to_wire(&CallError::Staged(r), is_modern(&ctx)))?,
            None => items,
        };
        let c = request.as_ref().and_then(|r| r.cursor.as_deref());
        let (items, next) = self
            .parts
            .cursors
            .page(
                "tools",
                &who.name,
                &items,
                |t: &Tool| t.name.as_ref(),
                c,
                self.page_size,
            )
            .map_err(bad_cursor)?;
        let mut r = ListToolsResult::with_all_items(items);
        r.next_cursor = next;
        (r.ttl_ms, r.cache_scope) = self.list_scope();
        Ok(r)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let _span = request_span("prompts/list", &ctx);
        let catalog = self.parts.pool.catalog();
        let who = self.identity(&ctx);
        let access = who.access.clone();
        let items = visible(&catalog.prompts, access.sees_all(), |x| {
            access.prompt(&x.name)
                && self.reaches(
                    &access,
                    &catalog,
                    catalog.prompt(&x.name).and_then(|r| r.member()),
                )
        });
        let c = request.as_ref().and_then(|r| r.cursor.as_deref());
        let (items, next) = self
            .parts
            .cursors
            .page(
                "prompts",
                &who.name,
                &items,
                |p: &rmcp::model::Prompt| p.name.as_str(),
                c,
                self.page_size,
            )
            .map_err(bad_cursor)?;
        let mut r = ListPromptsResult::with_all_items(items);
        r.next_cursor = next;
        (r.ttl_ms, r.cache_scope) = self.list_scope();
        Ok(r)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let _span = request_span("resources/list", &ctx);
        let catalog = self.parts.pool.catalog();
        let who = self.identity(&ctx);
        let access = who.access.clone();
        let items = visible(&catalog.resources, access.sees_all(), |x| {
            access.resource(&x.uri) && self.reaches(&access, &catalog, catalog.resource(&x.uri))
        });
        let c = request.as_ref().and_then(|r| r.cursor.as_deref());
        let (items, next) = self
            .parts
            .cursors
            .page(
                "resources",
                &who.name,
                &items,
                |r: &rmcp::model::Resource| r.uri.as_str(),
                c,
                self.page_size,
            )
            .map_err(bad_cursor)?;
        let mut r = ListResourcesResult::with_all_items(items);
        r.next_cursor = next;
        (r.ttl_ms, r.cache_scope) = self.list_scope();
        Ok(r)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let _span = request_span("resources/templates/list", &ctx);
        let catalog = self.parts.pool.catalog();
        let who = self.identity(&ctx);
        let access = who.access.clone();
        let items = visible(&catalog.templates, access.sees_all(), |x| {
            access.resource(&x.uri_template)
                && self.reaches(&access, &catalog, catalog.template(&x.uri_template))
        });
        let c = request.as_ref().and_then(|r| r.cursor.as_deref());
        let (items, next) = self
            .parts
            .cursors
            .page(
                "resource_templates",
                &who.name,
                &items,
                |t: &rmcp::model::ResourceTemplate| t.uri_template.as_str(),
                c,
                self.page_size,
            )
            .map_err(bad_cursor)?;
        let mut r = ListResourceTemplatesResult::with_all_items(items);
        r.next_cursor = next;
        (r.ttl_ms, r.cache_scope) = self.list_scope();
        Ok(r)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tool = request.name.to_string();
        match self.run(Op::CallTool(request), &ctx).await? {
            ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
            ServerResult::CreateTaskResult(r) => {
                Ok(CallToolResponse::Task(self.expose_task(r, &tool, &ctx)?))
            }
            other => Err(unrouted::unexpected("tools/call", &other)),
        }
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        match self.run(Op::GetPrompt(request), &ctx).await? {
            ServerResult::GetPromptResult(r) => Ok(GetPromptResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(GetPromptResponse::InputRequired(r)),
            other => Err(unrouted::unexpected("prompts/get", &other)),
        }
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        match self.run(Op::ReadResource(request), &ctx).await? {
            ServerResult::ReadResourceResult(mut r) => {
                // Reads pass fedgate's authorization: with `[auth]`, a shared cache must not
                // hand one caller's answer to another.
                if !self.parts.auth.load().open {
                    r.cache_scope = Some(CacheScope::Private);
                }
                Ok(ReadResourceResponse::Complete(r))
            }
            ServerResult::InputRequiredResult(r) => Ok(ReadResourceResponse::InputRequired(r)),
            other => Err(unrouted::unexpected("resources/read", &other)),
        }
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        match self.run(Op::Complete(request), &ctx).await? {
            ServerResult::CompleteResult(r) => Ok(r),
            other => Err(unrouted::unexpected("completion/complete", &other)),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.get_task_for(request.task_id, &ctx).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let answers = TaskRequest::Update(request.input_responses);
        self.ack_task_for(request.task_id, answers, &ctx).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.ack_task_for(request.task_id, TaskRequest::Cancel, &ctx)
            .await
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let key = session_key(&ctx.extensions);
        // Every subscriber is authorized, not only the first (which alone reaches upstream).
        if !self.may_watch(&self.identity(&ctx).access, &request.uri) {
            let unknown = CallError::UnknownResource {
                uri: request.uri.clone(),
            };
            return Err(to_wire(&unknown, is_modern(&ctx)));
        }
        self.parts.hub.register(&key, Arc::new(ctx.peer.clone()));
        if self.parts.hub.subscribe(&key, &request.uri) {
            let uri = request.uri.clone();
            if let Err(e) = self.run(Op::Subscribe(request), &ctx).await {
                self.parts.hub.unsubscribe(&key, &uri);
                return Err(e);
            }
        }
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let key = session_key(&ctx.extensions);
        if self.parts.hub.unsubscribe(&key, &request.uri) {
            self.run(Op::Unsubscribe(request), &ctx).await?;
        }
        Ok(())
    }
}
