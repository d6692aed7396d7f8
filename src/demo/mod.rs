//! The demo upstream MCP server that fedgate builds and its shipped config runs.
//!
//! It exercises what a gateway must forward: read-only and writing tools, progress, a slow tool
//! that honours cancellation, elicitation (request in the handshake era, input-required result
//! in the stateless era), a tool list that changes at runtime, prompts with completion,
//! resources and a template. Flags make it start slowly, fail to start or crash on demand.
#![allow(deprecated)] // resources/subscribe is legacy-only but still served

mod sse;

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use parking_lot::Mutex;
use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler, ServiceExt,
    model::*,
    service::{Peer, RequestContext},
};
use serde_json::{Value, json};

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Serve Streamable HTTP on this address instead of stdio.
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Serve the legacy HTTP+SSE protocol on this address (GET /sse, POST /message).
    #[arg(long)]
    sse: Option<SocketAddr>,
    /// Name reported in serverInfo.
    #[arg(long, default_value = "fedgate-demo")]
    name: String,
    /// URI scheme of its resources (default: the name).
    #[arg(long)]
    scheme: Option<String>,
    /// Wait this long before serving (a slow upstream).
    #[arg(long, default_value_t = 0)]
    start_delay_ms: u64,
    /// Exit with an error instead of serving (an upstream that fails to start).
    #[arg(long)]
    fail_start: bool,
    /// HTTP only: answer 401 unless `Authorization: Bearer <content of this file>`.
    #[arg(long)]
    require_bearer_file: Option<std::path::PathBuf>,
    /// Start with the changed ("v2") definition of `echo`.
    #[arg(long)]
    evolved: bool,
    /// Exit after this many tool calls (crash on demand).
    #[arg(long)]
    crash_after: Option<u64>,
}

#[derive(Debug, Default)]
struct State {
    notes: Mutex<BTreeMap<String, String>>,
    extra: AtomicBool,
    evolved: AtomicBool,
    calls: AtomicU64,
    cancelled: AtomicU64,
    crash_after: Option<u64>,
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// Open subscriptions/listen streams (stateless era).
    sinks: Mutex<Vec<rmcp::service::SubscriptionSink>>,
}

#[derive(Debug, Clone)]
struct Demo {
    name: String,
    scheme: String,
    state: Arc<State>,
}

pub async fn run(args: DemoArgs) -> Result<ExitCode, String> {
    if args.start_delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(args.start_delay_ms)).await;
    }
    if args.fail_start {
        eprintln!("demo upstream: failing to start as asked (--fail-start)");
        return Ok(ExitCode::from(2));
    }
    let demo = Demo {
        name: args.name.clone(),
        scheme: args.scheme.clone().unwrap_or_else(|| args.name.clone()),
        state: Arc::new(State {
            crash_after: args.crash_after,
            evolved: AtomicBool::new(args.evolved),
            ..Default::default()
        }),
    };
    if let Some(addr) = args.http {
        return serve_http(addr, demo, args.require_bearer_file.clone()).await;
    }
    if let Some(addr) = args.sse {
        return sse::serve(addr, demo).await;
    }
    let running = demo
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("demo upstream: {e}"))?;
    let _ = running.waiting().await;
    Ok(ExitCode::SUCCESS)
}

async fn serve_http(
    addr: SocketAddr,
    demo: Demo,
    require_bearer: Option<std::path::PathBuf>,
) -> Result<ExitCode, String> {
    use rmcp::transport::{
        StreamableHttpServerConfig, StreamableHttpService,
        streamable_http_server::session::local::LocalSessionManager,
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("demo upstream: cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let service = StreamableHttpService::new(
        move || Ok(demo.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    println!("demo upstream listening on http://{local}/mcp");
    // `--require-bearer-file`: only `Authorization: Bearer <file content>` gets through, read
    // per request, so a test can rotate the accepted token.
    let gate = require_bearer.map(|path| -> crate::server::http::Gate {
        Arc::new(move |headers: &http::HeaderMap| {
            let want = std::fs::read_to_string(&path).unwrap_or_default();
            headers
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v == format!("Bearer {}", want.trim()))
        })
    });
    crate::server::http::serve_plain(listener, service, gate)
        .await
        .map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

fn schema(v: Value) -> Arc<JsonObject> {
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

fn tool(name: &'static str, desc: &'static str, props: Value, read_only: bool) -> Tool {
    Tool::new(
        name,
        desc,
        schema(json!({"type": "object", "properties": props})),
    )
    .with_annotations(
        ToolAnnotations::new()
            .read_only(read_only)
            .destructive(false),
    )
}

fn text(s: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s.into())])
}

fn arg_str(args: &Option<JsonObject>, key: &str) -> Option<String> {
    args.as_ref()?.get(key)?.as_str().map(str::to_owned)
}

fn arg_u64(args: &Option<JsonObject>, key: &str) -> Option<u64> {
    args.as_ref()?.get(key)?.as_u64()
}

impl Demo {
    /// Tells every session (both eras) that the tool list changed.
    async fn tools_changed(&self) {
        let peers = self.state.peers.lock().clone();
        for p in peers {
            let _ = p.notify_tool_list_changed().await;
        }
        let sinks = self.state.sinks.lock().clone();
        for s in sinks {
            let _ = s.notify_tool_list_changed().await;
        }
    }

    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            tool(
                "echo",
                if self.state.evolved.load(Ordering::SeqCst) {
                    "Echo the text back, and remember it (v2)."
                } else {
                    "Echo the text back."
                },
                json!({"text": {"type": "string"}}),
                true,
            ),
            tool(
                "fail",
                "Always answer with an isError result.",
                json!({}),
                true,
            ),
            tool(
                "error",
                "Always answer with a JSON-RPC error.",
                json!({}),
                true,
            ),
            tool(
                "whoami",
                "The credential this server received.",
                json!({}),
                true,
            ),
            tool(
                "traceparent",
                "The W3C trace context this request arrived with: HTTP header and _meta.",
                json!({}),
                true,
            ),
            tool(
                "evolve",
                "Change the definition of `echo` (a server changing what a tool does).",
                json!({}),
                false,
            ),
            tool(
                "add",
                "Add two numbers.",
                json!({"a": {"type": "number"}, "b": {"type": "number"}}),
                true,
            ),
            tool(
                "write_note",
                "Store a note under a key (readable as <name>://notes/{key}).",
                json!({"key": {"type": "string"}, "value": {"type": "string"}}),
                false,
            ),
            tool(
                "progress",
                "Send `steps` progress notifications, then finish.",
                json!({"steps": {"type": "integer"}}),
                true,
            ),
            tool(
                "slow",
                "Wait `ms` milliseconds; stops early when cancelled.",
                json!({"ms": {"type": "integer"}}),
                true,
            ),
            tool(
                "ask",
                "Ask the user for their name (elicitation) and greet them.",
                json!({}),
                true,
            ),
            tool(
                "toggle_extra",
                "Add or remove the tool `extra` (the tool list changes).",
                json!({}),
                false,
            ),
            tool("stats", "Counters: calls, cancellations.", json!({}), true),
            tool("pid", "This server's process id.", json!({}), true),
            tool(
                "headers",
                "The MCP routing headers this request arrived with (Mcp-Method, Mcp-Name, \
                 Mcp-Param-Region), and the `region` argument.",
                json!({"region": {"type": "string", "x-mcp-header": "Region"}}),
                true,
            ),
            tool(
                "sample",
                "Ask the client's model to say hi (sampling) and return what it said.",
                json!({}),
                true,
            ),
            tool(
                "log",
                "Send three log messages (debug, info, warning) during the call.",
                json!({}),
                true,
            ),
            tool(
                "roots",
                "Ask the client for its roots and list them.",
                json!({}),
                true,
            ),
            tool(
                "crash",
                "Exit the process immediately, without answering.",
                json!({}),
                false,
            ),
        ];
        if self.state.extra.load(Ordering::SeqCst) {
            tools.push(tool(
                "extra",
                "Appears after toggle_extra.",
                json!({}),
                true,
            ));
        }
        tools
    }

    async fn ask(
        &self,
        req: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let legacy = ctx.protocol_version().is_none_or(|v| v.has_initialize());
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
        if legacy {
            let params: ElicitRequestParams = serde_json::from_value(json!({
                "mode": "form", "message": "What is your name?", "requestedSchema": schema
            }))
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
            let answer =
                ctx.peer.create_elicitation(params).await.map_err(|e| {
                    McpError::internal_error(format!("elicitation failed: {e}"), None)
                })?;
            return Ok(CallToolResponse::Complete(greet(
                answer.action,
                answer.content.as_ref(),
            )));
        }
        // Stateless era: ask with an input-required result; the retry carries the answer.
        if let Some(answer) = req.input_responses.as_ref().and_then(|r| r.get("name")) {
            let action: ElicitationAction =
                serde_json::from_value(answer.get("action").cloned().unwrap_or(Value::Null))
                    .unwrap_or(ElicitationAction::Cancel);
            return Ok(CallToolResponse::Complete(greet(
                action,
                answer.get("content"),
            )));
        }
        let ir: InputRequiredResult = serde_json::from_value(json!({
            "resultType": "input_required",
            "inputRequests": {"name": {"method": "elicitation/create", "params": {
                "mode": "form", "message": "What is your name?", "requestedSchema": schema}}},
            "requestState": "ask-1"
        }))
        .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(CallToolResponse::InputRequired(ir))
    }
}

/// A client's answer to one request, or the input-required result that asks for it.
enum Input {
    Answer(Value),
    Ask(InputRequiredResult),
}

/// Asks the client for input the way its era does: a request in the handshake era, an
/// input-required result (answered by the retry's `inputResponses[key]`) in the stateless era.
async fn input(
    req: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    key: &str,
    ask: Value,
) -> Result<Input, McpError> {
    let internal = |e: String| McpError::internal_error(e, None);
    if ctx.protocol_version().is_none_or(|v| v.has_initialize()) {
        let request: ServerRequest =
            serde_json::from_value(ask).map_err(|e| internal(e.to_string()))?;
        let answer = ctx
            .peer
            .send_request(request)
            .await
            .map_err(|e| internal(format!("the client did not answer: {e}")))?;
        return serde_json::to_value(answer)
            .map(Input::Answer)
            .map_err(|e| internal(e.to_string()));
    }
    if let Some(a) = req.input_responses.as_ref().and_then(|r| r.get(key)) {
        return Ok(Input::Answer(a.clone()));
    }
    let ir = serde_json::from_value(json!({
        "resultType": "input_required",
        "inputRequests": {key: ask},
    }))
    .map_err(|e| internal(e.to_string()))?;
    Ok(Input::Ask(ir))
}

fn greet(action: ElicitationAction, content: Option<&Value>) -> CallToolResult {
    match action {
        ElicitationAction::Accept => {
            let name = content
                .and_then(|c| c.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("stranger");
            text(format!("hello {name}"))
        }
        _ => text("the user declined"),
    }
}

impl ServerHandler for Demo {
    fn get_info(&self) -> ServerConfig {
        let caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_completions()
            .enable_logging()
            .build();
        ServerConfig::new(caps).with_server_info(Implementation::new(
            self.name.clone(),
            env!("CARGO_PKG_VERSION"),
        ))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, ctx: rmcp::service::SubscriptionContext) -> Result<(), McpError> {
        self.state.sinks.lock().push(ctx.sink().clone());
        ctx.cancelled().await;
        let id = ctx.sink().id().clone();
        self.state.sinks.lock().retain(|s| *s.id() != id);
        Ok(())
    }

    async fn on_initialized(&self, ctx: rmcp::service::NotificationContext<RoleServer>) {
        self.state.peers.lock().push(ctx.peer);
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let n = self.state.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if self.state.crash_after.is_some_and(|limit| n > limit) {
            std::process::exit(3);
        }
        let args = &req.arguments;
        let result = match req.name.as_ref() {
            "echo" => text(format!(
                "echo: {}",
                arg_str(args, "text").unwrap_or_default()
            )),
            "add" => {
                let get = |k| {
                    args.as_ref()
                        .and_then(|a| a.get(k))
                        .and_then(Value::as_f64)
                        .unwrap_or(0.0)
                };
                let sum = get("a") + get("b");
                let mut r = text(sum.to_string());
                r.structured_content = Some(json!({"sum": sum}));
                r
            }
            "write_note" => {
                let key = arg_str(args, "key").unwrap_or_default();
                let value = arg_str(args, "value").unwrap_or_default();
                self.state.notes.lock().insert(key.clone(), value);
                let uri = format!("{}://notes/{key}", self.scheme);
                for p in self.state.peers.lock().iter() {
                    let (p, uri) = (p.clone(), uri.clone());
                    tokio::spawn(async move {
                        let _ = p
                            .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                            .await;
                    });
                }
                // Stateless-era listeners: each sink drops URIs it did not subscribe to.
                for s in self.state.sinks.lock().iter() {
                    let (s, uri) = (s.clone(), uri.clone());
                    tokio::spawn(async move {
                        let _ = s.notify_resource_updated(uri).await;
                    });
                }
                text(format!("stored {key}"))
            }
            "progress" => {
                let steps = arg_u64(args, "steps").unwrap_or(3);
                if let Some(token) = ctx.meta.get_progress_token() {
                    for i in 1..=steps {
                        let p = ProgressNotificationParam::new(token.clone(), i as f64)
                            .with_total(steps as f64)
                            .with_message(format!("step {i}"));
                        let _ = ctx.peer.notify_progress(p).await;
                    }
                }
                text(format!("done {steps}"))
            }
            "slow" => {
                let ms = arg_u64(args, "ms").unwrap_or(1000);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => text(format!("slept {ms}")),
                    _ = ctx.ct.cancelled() => {
                        self.state.cancelled.fetch_add(1, Ordering::SeqCst);
                        eprintln!("demo upstream: slow call cancelled");
                        text("cancelled")
                    }
                }
            }
            "ask" => return self.ask(&req, &ctx).await,
            "toggle_extra" => {
                let now = !self.state.extra.fetch_xor(true, Ordering::SeqCst);
                self.tools_changed().await;
                text(format!("extra is {}", if now { "on" } else { "off" }))
            }
            "evolve" => {
                self.state.evolved.store(true, Ordering::SeqCst);
                self.tools_changed().await;
                text("echo evolved")
            }
            "extra" if self.state.extra.load(Ordering::SeqCst) => text("extra!"),
            "stats" => {
                let v = json!({
                    "calls": self.state.calls.load(Ordering::SeqCst),
                    "cancelled": self.state.cancelled.load(Ordering::SeqCst),
                });
                let mut r = text(v.to_string());
                r.structured_content = Some(v);
                r
            }
            "pid" => text(std::process::id().to_string()),
            "log" => {
                // The level filter is the client's (or gateway's) business: all three go out.
                for (level, data) in [
                    (LoggingLevel::Debug, "log-debug"),
                    (LoggingLevel::Info, "log-info"),
                    (LoggingLevel::Warning, "log-warning"),
                ] {
                    let _ = ctx
                        .peer
                        .notify_logging_message(
                            LoggingMessageNotificationParam::new(level, json!(data))
                                .with_logger(self.name.clone()),
                        )
                        .await;
                }
                text("logged")
            }
            // What reached this server: the Authorization header (HTTP) or MCP_TOKEN (stdio).
            "whoami" => {
                let header = ctx
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(|p| p.headers.get(http::header::AUTHORIZATION))
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let env = std::env::var("MCP_TOKEN").ok();
                text(
                    header
                        .or(env.map(|e| format!("env {e}")))
                        .unwrap_or_else(|| "nobody".into()),
                )
            }
            "headers" => {
                let h = |name: &str| {
                    ctx.extensions
                        .get::<http::request::Parts>()
                        .and_then(|p| p.headers.get(name))
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                };
                text(
                    json!({
                        "mcp-method": h("mcp-method"),
                        "mcp-name": h("mcp-name"),
                        "mcp-param-region": h("mcp-param-region"),
                        "region": arg_str(args, "region"),
                    })
                    .to_string(),
                )
            }
            "traceparent" => {
                let header = ctx
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(|p| p.headers.get("traceparent"))
                    .and_then(|v| v.to_str().ok());
                let meta = ctx.meta.get("traceparent").and_then(|v| v.as_str());
                text(json!({"header": header, "meta": meta}).to_string())
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("this tool always fails")]),
            "error" => return Err(McpError::internal_error("deliberate JSON-RPC error", None)),
            "roots" => {
                let ask = json!({"method": "roots/list", "params": {}});
                let answer = match input(&req, &ctx, "roots", ask).await? {
                    Input::Answer(a) => a,
                    Input::Ask(ir) => return Ok(CallToolResponse::InputRequired(ir)),
                };
                let uris: Vec<&str> = answer["roots"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["uri"].as_str())
                    .collect();
                text(uris.join(","))
            }
            "sample" => {
                let ask = json!({"method": "sampling/createMessage", "params": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": "Say hi"}}],
                    "maxTokens": 20}});
                let answer = match input(&req, &ctx, "sample", ask).await? {
                    Input::Answer(a) => a,
                    Input::Ask(ir) => return Ok(CallToolResponse::InputRequired(ir)),
                };
                text(format!(
                    "sampled: {}",
                    answer["content"]["text"].as_str().unwrap_or("")
                ))
            }
            "crash" => std::process::exit(3),
            other => {
                return Err(McpError::invalid_params(
                    format!("unknown tool {other}"),
                    None,
                ));
            }
        };
        Ok(CallToolResponse::Complete(result))
    }

    async fn list_prompts(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let arg = PromptArgument::new("name")
            .with_description("Who to greet")
            .with_required(true);
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "greeting",
            Some("Greet someone"),
            Some(vec![arg]),
        )]))
    }

    async fn get_prompt(
        &self,
        req: GetPromptRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if req.name != "greeting" {
            return Err(McpError::invalid_params(
                format!("unknown prompt {}", req.name),
                None,
            ));
        }
        let name = req
            .arguments
            .as_ref()
            .and_then(|a| a.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("world");
        let r = GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            format!("Please greet {name} warmly."),
        )]);
        Ok(GetPromptResponse::Complete(r))
    }

    async fn list_resources(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new(format!("{}://readme", self.scheme), "readme")
                .with_mime_type("text/plain"),
        ]))
    }

    async fn list_resource_templates(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(format!("{}://notes/{{key}}", self.scheme), "note")
                .with_mime_type("text/plain"),
        ]))
    }

    async fn read_resource(
        &self,
        req: ReadResourceRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let scheme = format!("{}://", self.scheme);
        let path = req.uri.strip_prefix(&scheme).unwrap_or_default();
        let text = if path == "readme" {
            format!("{} is the fedgate demo upstream.", self.name)
        } else if let Some(key) = path.strip_prefix("notes/") {
            match self.state.notes.lock().get(key) {
                Some(v) => v.clone(),
                None => return Err(McpError::resource_not_found(format!("no note {key}"), None)),
            }
        } else {
            return Err(McpError::resource_not_found(
                format!("no resource {}", req.uri),
                None,
            ));
        };
        Ok(ReadResourceResponse::Complete(ReadResourceResult::new(
            vec![ResourceContents::text(text, req.uri)],
        )))
    }

    /// Accepted, not acted on: `log` sends all its levels and leaves filtering to the client.
    async fn set_level(
        &self,
        _r: SetLevelRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Ok(())
    }

    async fn subscribe(
        &self,
        _r: SubscribeRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Ok(())
    }

    async fn unsubscribe(
        &self,
        _r: UnsubscribeRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Ok(())
    }

    async fn complete(
        &self,
        req: CompleteRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let prefix = req.argument.value.clone();
        let values: Vec<String> = ["alice", "bob", "carol"]
            .iter()
            .filter(|v| v.starts_with(&prefix))
            .map(|v| (*v).to_owned())
            .collect();
        let info = CompletionInfo::with_all_values(values)
            .map_err(|e| McpError::internal_error(e, None))?;
        Ok(CompleteResult::new(info))
    }
}
