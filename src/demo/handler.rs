//! The demo as an MCP server: lists, calls, prompts, resources, subscriptions.
#![allow(deprecated)] // resources/subscribe is legacy-only but still served

use std::{sync::atomic::Ordering, time::Duration};

use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, model::*, service::RequestContext};
use serde_json::{Value, json};

use super::{
    Demo,
    input::{Input, input},
    tools::*,
};

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
        if self.state.roots_at_start {
            // Like servers that learn their workspace at startup, before any call.
            let (peer, state) = (ctx.peer.clone(), self.state.clone());
            tokio::spawn(async move {
                let seen = match peer.list_roots().await {
                    Ok(r) => format!("{} roots", r.roots.len()),
                    Err(e) => format!("error: {e}"),
                };
                *state.startup_roots.lock() = Some(seen);
            });
        }
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
        if !self.serves(&req.name) {
            return Err(McpError::invalid_params(
                format!("unknown tool `{}`", crate::names::shown(&req.name)),
                None,
            ));
        }
        if self.state.filler_tools > 0 && req.name.starts_with("tool_") {
            return Ok(CallToolResponse::Complete(text(req.name.to_string())));
        }
        if self.state.people {
            let parts = ctx.extensions.get::<http::request::Parts>();
            return Ok(CallToolResponse::Complete(super::per_user::whoami(parts)));
        }
        if self.state.research
            && let Some(r) = super::research::call(&req.name, args)
        {
            return Ok(CallToolResponse::Complete(r));
        }
        if let Some(r) = super::schemas::call(&req.name, args) {
            return Ok(CallToolResponse::Complete(r));
        }
        if let Some(r) = super::flow_tools::call(&req.name, args, &ctx.meta).await {
            return Ok(CallToolResponse::Complete(r));
        }
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
            "read_note" => {
                let key = arg_str(args, "key").unwrap_or_default();
                match self.state.notes.lock().get(&key) {
                    Some(v) => text(v.clone()),
                    None => CallToolResult::error(vec![ContentBlock::text(format!(
                        "no note `{}`; list_notes shows the keys",
                        crate::names::shown(&key)
                    ))]),
                }
            }
            "list_notes" => {
                let keys: Vec<String> = self.state.notes.lock().keys().cloned().collect();
                let mut r = text(if keys.is_empty() {
                    "no notes yet".to_owned()
                } else {
                    keys.join(", ")
                });
                r.structured_content = Some(json!({"keys": keys}));
                r
            }
            "progress" => {
                let steps = arg_u64(args, "steps").unwrap_or(3);
                let pause =
                    Duration::from_millis(arg_u64(args, "delay_ms").unwrap_or(0).min(10_000));
                if let Some(token) = ctx.meta.get_progress_token() {
                    for i in 1..=steps {
                        if i > 1 && !pause.is_zero() {
                            tokio::time::sleep(pause).await;
                        }
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
            "fetch_page" if self.state.poisoned => text(format!(
                "<html>{}</html>",
                arg_str(args, "url").unwrap_or_default()
            )),
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
                    "subscriptions": self.state.subscriptions.load(Ordering::SeqCst),
                    "startup_roots": self.state.startup_roots.lock().clone(),
                });
                let mut r = text(v.to_string());
                r.structured_content = Some(v);
                r
            }
            "pid" => text(std::process::id().to_string()),
            // Names only: what a gateway passes on is the question, not the values.
            "environment" => {
                let mut names: Vec<String> = std::env::vars_os()
                    .filter_map(|(k, _)| k.into_string().ok())
                    .collect();
                names.sort();
                let mut r = text(names.join(" "));
                r.structured_content = Some(json!({"names": names}));
                r
            }
            "reach" => reach(args),
            "huge" => {
                let n = arg_u64(args, "bytes").unwrap_or(0).min(256 << 20) as usize;
                text("x".repeat(n))
            }
            "deep" => {
                // Bounded so building and writing it stays far from the stack's limit.
                let levels = arg_u64(args, "levels").unwrap_or(0).min(2000);
                let mut v = serde_json::json!("bottom");
                for _ in 0..levels {
                    v = serde_json::json!([v]);
                }
                let mut r = text("deep");
                r.structured_content = Some(v);
                r
            }
            "freeze" => {
                let ms = arg_u64(args, "ms").unwrap_or(0).min(600_000);
                // Deliberately blocking: the runtime thread, and with it the stdin reader, stops.
                eprintln!("demo upstream: frozen for {ms} ms");
                std::thread::sleep(Duration::from_millis(ms));
                text(format!("thawed after {ms} ms"))
            }
            "shout" => {
                use std::io::Write;
                let n = arg_u64(args, "bytes").unwrap_or(0).min(64 << 20) as usize;
                // Written without eprintln!, which would panic on a closed pipe: the error is
                // the answer, so a test sees whether the gateway still reads stderr.
                let mut err = std::io::stderr().lock();
                let wrote = err
                    .write_all(&vec![b'x'; n])
                    .and_then(|()| err.write_all(b"\ndemo upstream: shout done\n"))
                    .and_then(|()| err.flush());
                match wrote {
                    Ok(()) => text(format!("shouted {n} bytes")),
                    Err(e) => {
                        CallToolResult::error(vec![ContentBlock::text(format!("stderr: {e}"))])
                    }
                }
            }
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
            "error" => {
                let quoted =
                    arg_str(args, "note").and_then(|k| self.state.notes.lock().get(&k).cloned());
                return Err(match quoted {
                    Some(q) => McpError::internal_error(
                        format!("deliberate JSON-RPC error: authentication failed for {q}"),
                        Some(json!({"refused": q})),
                    ),
                    None => McpError::internal_error("deliberate JSON-RPC error", None),
                });
            }
            "reject" => {
                return Err(McpError::invalid_params(
                    "the demo rejects these arguments",
                    None,
                ));
            }
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
            "stray" => {
                // Notifications about requests that do not exist: a progress token no call
                // holds, a cancellation of a request id nobody sent, an update of a resource
                // nobody subscribed to.
                let token = ProgressToken(NumberOrString::String("no-such-call".into()));
                let _ = ctx
                    .peer
                    .notify_progress(ProgressNotificationParam::new(token, 1.0))
                    .await;
                let _ = ctx
                    .peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(NumberOrString::Number(987_654)),
                        Some("stray".into()),
                    ))
                    .await;
                let _ = ctx
                    .peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(format!(
                        "{}://nobody/subscribed",
                        self.scheme
                    )))
                    .await;
                text("strayed")
            }
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
        self.state.subscriptions.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        _r: UnsubscribeRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.state.subscriptions.fetch_sub(1, Ordering::SeqCst);
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

/// What this process could reach: each attempt's outcome, `"ok …"` or the OS's error.
fn reach(args: &Option<JsonObject>) -> CallToolResult {
    use std::io::Write;
    let said = |r: std::io::Result<String>| match r {
        Ok(s) => format!("ok {s}"),
        Err(e) => format!("error: {e}"),
    };
    let mut v = serde_json::Map::new();
    if let Some(path) = arg_str(args, "path") {
        let r = std::fs::read(&path).map(|b| format!("{} bytes", b.len()));
        v.insert("read".into(), json!(said(r)));
    }
    if let Some(path) = arg_str(args, "write") {
        let r = std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(b"escaped"))
            .map(|()| "written".to_owned());
        v.insert("write".into(), json!(said(r)));
    }
    if let Some(addr) = arg_str(args, "address") {
        let r = addr
            .parse::<std::net::SocketAddr>()
            .map_err(std::io::Error::other)
            .and_then(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)))
            .map(|_| "connected".to_owned());
        v.insert("connect".into(), json!(said(r)));
    }
    let v = serde_json::Value::Object(v);
    let mut r = text(v.to_string());
    r.structured_content = Some(v);
    r
}
