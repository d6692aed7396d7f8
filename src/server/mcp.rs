//! fedgate as an MCP server: lists come from the catalog, routed requests go through the stack.
#![allow(deprecated)] // logging and resources/subscribe are deprecated by SEP-2577 but served

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    ErrorData as McpError,
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
        request_of::{Incoming, request_span},
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
    pub(super) fn may_watch(&self, access: &Access, uri: &str) -> bool {
        let catalog = self.parts.pool.catalog();
        access.resource(uri) && self.reaches(access, &catalog, catalog.resource(uri))
    }

    /// Whether the caller's roles reach the trust tier of the upstream at `idx`.
    fn reaches(&self, access: &Access, catalog: &Catalog, idx: Option<usize>) -> bool {
        idx.and_then(|i| catalog.upstream(i))
            .is_some_and(|u| access.tier(u.spec().tier.rank))
    }

    /// The caller: set by the HTTP edge; over stdio it is the local operator.
    pub(super) fn identity(&self, req: &Incoming) -> Identity {
        req.identity.clone().unwrap_or_else(|| self.local.clone())
    }

    /// The lowest log level this caller wants: per request in the stateless era (none unless
    /// asked), per session in the handshake era (everything until `logging/setLevel`).
    fn log_level(&self, req: &Incoming) -> Option<LoggingLevel> {
        if req.stateless {
            req.meta.log_level()
        } else {
            Some(
                self.parts
                    .hub
                    .log_level(&req.session_key)
                    .unwrap_or(LoggingLevel::Debug),
            )
        }
    }

    pub(super) async fn run(&self, op: Op, req: &Incoming) -> Result<ServerResult, McpError> {
        self.run_with(op, req, req.ct.clone()).await
    }

    /// `run` with another cancellation token (cleanup after the request has ended).
    pub(super) async fn run_with(
        &self,
        op: Op,
        req: &Incoming,
        ct: tokio_util::sync::CancellationToken,
    ) -> Result<ServerResult, McpError> {
        let downstream = Downstream {
            client: req.client.clone(),
            request_id: req.id.clone(),
            log_level: self.log_level(req),
            capabilities: req.capabilities.clone(),
            modern: req.modern,
            session: req.session.clone(),
            workspace: req.workspace.clone(),
        };
        let mut call = Call::new(op, self.identity(req), 0).from_client(
            downstream,
            req.meta.clone(),
            ct,
            req.parent.clone(),
        );
        call.progress_token = req.meta.get_progress_token();
        self.stack.clone().oneshot(call).await
    }

    fn list_scope(&self) -> (Option<u64>, Option<CacheScope>) {
        // Upstreams that act as each person may list each person their own tools.
        let scope = if self.parts.auth.load().open && self.parts.credentials.is_none() {
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

/// The gateway's answers, whatever transport carried the request.
impl Gateway {
    /// What `initialize` answers: the capabilities, who fedgate is, how names read.
    pub(super) fn info(&self) -> ServerConfig {
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
    pub(super) fn accepted_filter(&self, requested: &SubscriptionFilter) -> SubscriptionFilter {
        let mut accepted = requested.clone();
        let catalog = self.parts.pool.catalog();
        accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
            uris.iter()
                .filter(|u| catalog.resource(u).is_some())
                .cloned()
                .collect()
        });
        accepted
    }

    /// A handshake-era session sent `notifications/initialized`: it hears list changes from now.
    pub(super) fn initialized(&self, session_key: &str, client: crate::to_client::ToClient) {
        self.parts.hub.register(session_key, client);
        // A new session is a moment to let go of what closed ones left behind.
        for uri in self.parts.hub.take_released() {
            self.parts.pool.release_subscription(&uri);
        }
    }

    pub(super) async fn logging_set_level(
        &self,
        request: SetLevelRequestParams,
        req: &Incoming,
    ) -> Result<(), McpError> {
        // Upstream connections are shared by all sessions, so the level is applied by fedgate
        // when it relays messages, not forwarded.
        self.parts
            .hub
            .set_log_level(&req.session_key.clone(), request.level);
        Ok(())
    }

    pub(super) async fn tools_list(
        &self,
        request: Option<PaginatedRequestParams>,
        req: &Incoming,
    ) -> Result<ListToolsResult, McpError> {
        let _span = request_span("tools/list", req);
        let who = self.identity(req);
        if let Some(creds) = &self.parts.credentials {
            crate::pipeline::personal::open_stored(&self.parts.pool, creds, &who).await;
        }
        let catalog = self.parts.pool.catalog_for(&who);
        let access = who.access.clone();
        let session = req.session.clone();
        let standing = match &self.parts.stages {
            Some(stages) => Some(
                stages
                    .standing(session.as_deref(), req.workspace.as_deref())
                    .await
                    .map_err(|r| to_wire(&CallError::Staged(r), req.modern))?,
            ),
            None => None,
        };
        // What the caller may call now, before search narrows it: its threshold counts those.
        let items = visible(
            &catalog.tools,
            access.sees_all() && standing.is_none(),
            |x| {
                crate::pipeline::may_call_now(&self.parts.pool, &access, standing.as_ref(), &x.name)
            },
        );
        let items = self.parts.search.listed(&access, session.as_deref(), items);
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

    pub(super) async fn prompts_list(
        &self,
        request: Option<PaginatedRequestParams>,
        req: &Incoming,
    ) -> Result<ListPromptsResult, McpError> {
        let _span = request_span("prompts/list", req);
        let catalog = self.parts.pool.catalog();
        let who = self.identity(req);
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

    pub(super) async fn resources_list(
        &self,
        request: Option<PaginatedRequestParams>,
        req: &Incoming,
    ) -> Result<ListResourcesResult, McpError> {
        let _span = request_span("resources/list", req);
        let catalog = self.parts.pool.catalog();
        let who = self.identity(req);
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

    pub(super) async fn templates_list(
        &self,
        request: Option<PaginatedRequestParams>,
        req: &Incoming,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let _span = request_span("resources/templates/list", req);
        let catalog = self.parts.pool.catalog();
        let who = self.identity(req);
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

    pub(super) async fn tools_call(
        &self,
        request: CallToolRequestParams,
        req: &Incoming,
    ) -> Result<CallToolResponse, McpError> {
        let tool = request.name.to_string();
        match self.run(Op::CallTool(request), req).await? {
            ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
            ServerResult::CreateTaskResult(r) => {
                Ok(CallToolResponse::Task(self.expose_task(r, &tool, req)?))
            }
            other => Err(unrouted::unexpected("tools/call", &other)),
        }
    }

    pub(super) async fn prompts_get(
        &self,
        request: GetPromptRequestParams,
        req: &Incoming,
    ) -> Result<GetPromptResponse, McpError> {
        match self.run(Op::GetPrompt(request), req).await? {
            ServerResult::GetPromptResult(r) => Ok(GetPromptResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(GetPromptResponse::InputRequired(r)),
            other => Err(unrouted::unexpected("prompts/get", &other)),
        }
    }

    pub(super) async fn resources_read(
        &self,
        request: ReadResourceRequestParams,
        req: &Incoming,
    ) -> Result<ReadResourceResponse, McpError> {
        match self.run(Op::ReadResource(request), req).await? {
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

    pub(super) async fn completion(
        &self,
        request: CompleteRequestParams,
        req: &Incoming,
    ) -> Result<CompleteResult, McpError> {
        match self.run(Op::Complete(request), req).await? {
            ServerResult::CompleteResult(r) => Ok(r),
            other => Err(unrouted::unexpected("completion/complete", &other)),
        }
    }

    pub(super) async fn tasks_get(
        &self,
        request: GetTaskParams,
        req: &Incoming,
    ) -> Result<GetTaskResult, McpError> {
        self.get_task_for(request.task_id, req).await
    }

    pub(super) async fn tasks_update(
        &self,
        request: UpdateTaskParams,
        req: &Incoming,
    ) -> Result<(), McpError> {
        let answers = TaskRequest::Update(request.input_responses);
        self.ack_task_for(request.task_id, answers, req).await
    }

    pub(super) async fn tasks_cancel(
        &self,
        request: CancelTaskParams,
        req: &Incoming,
    ) -> Result<(), McpError> {
        self.ack_task_for(request.task_id, TaskRequest::Cancel, req)
            .await
    }

    pub(super) async fn resources_subscribe(
        &self,
        request: SubscribeRequestParams,
        req: &Incoming,
    ) -> Result<(), McpError> {
        let key = req.session_key.clone();
        // Every subscriber is authorized, not only the first (which alone reaches upstream).
        if !self.may_watch(&self.identity(req).access, &request.uri) {
            let unknown = CallError::UnknownResource {
                uri: request.uri.clone(),
            };
            return Err(to_wire(&unknown, req.modern));
        }
        self.parts.hub.register(&key, req.client.clone());
        if self.parts.hub.subscribe(&key, &request.uri) {
            let uri = request.uri.clone();
            if let Err(e) = self.run(Op::Subscribe(request), req).await {
                self.parts.hub.unsubscribe(&key, &uri);
                return Err(e);
            }
        }
        Ok(())
    }

    pub(super) async fn resources_unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        req: &Incoming,
    ) -> Result<(), McpError> {
        let key = req.session_key.clone();
        if self.parts.hub.unsubscribe(&key, &request.uri) {
            self.run(Op::Unsubscribe(request), req).await?;
        }
        Ok(())
    }
}
