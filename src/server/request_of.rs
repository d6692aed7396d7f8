//! What a downstream request says about itself beyond its params: its era, its session, the
//! workspace it names, its trace context.

use rmcp::{RoleServer, service::RequestContext};

use crate::telemetry::traces;

/// Session key used when the transport has no `Mcp-Session-Id` (stdio, stateless requests).
const LOCAL_SESSION: &str = "local";

/// Whether a request speaks the stateless era (its `_meta` carries the protocol version).
pub(super) fn is_modern(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.meta
        .contains_key("io.modelcontextprotocol/protocolVersion")
}

/// The caller's trace context: the request's `_meta`, else its HTTP headers.
pub(super) fn caller_context(ctx: &RequestContext<RoleServer>) -> opentelemetry::Context {
    traces::parent(
        &ctx.meta,
        ctx.extensions
            .get::<http::request::Parts>()
            .map(|p| &p.headers),
    )
}

/// A server span for a request answered by fedgate itself (lists); it ends when dropped.
/// Routed requests get theirs in the pipeline's `observe` step.
pub(super) fn request_span(
    method: &'static str,
    ctx: &RequestContext<RoleServer>,
) -> opentelemetry::Context {
    use traces::{KeyValue, SpanKind};
    let parent = caller_context(ctx);
    if !traces::enabled() {
        return parent;
    }
    traces::child(
        &parent,
        method,
        SpanKind::Server,
        vec![KeyValue::new("mcp.method.name", method)],
    )
}

/// The `Mcp-Session-Id` of the HTTP request behind a message, if any.
pub(super) fn session_key(ext: &rmcp::model::Extensions) -> String {
    ext.get::<http::request::Parts>()
        .and_then(|p| p.headers.get("mcp-session-id"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or(LOCAL_SESSION)
        .to_owned()
}

/// The session a request belongs to: its `Mcp-Session-Id` over HTTP (none for stateless
/// requests), the one local session over stdio.
pub(super) fn session_of(ext: &rmcp::model::Extensions) -> Option<String> {
    match ext.get::<http::request::Parts>() {
        None => Some(LOCAL_SESSION.to_owned()),
        Some(p) => p
            .headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    }
}

/// The `Fedgate-Workspace` header of the HTTP request behind a message (unreadable bytes
/// count as a workspace the gate refuses, not as none).
pub(super) fn workspace_of(ext: &rmcp::model::Extensions) -> Option<String> {
    ext.get::<http::request::Parts>()
        .and_then(|p| p.headers.get(crate::stages::WORKSPACE_HEADER))
        .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned())
}
