//! What a downstream request says about itself beyond its params — its era, its session, the
//! workspace it names, its trace context, who sent it — read once into an [`Incoming`], so the
//! handler answers requests whatever transport carried them.

use std::sync::Arc;

use rmcp::{
    RoleServer,
    model::{ClientCapabilities, RequestId, RequestMetaObject},
    service::RequestContext,
};
use tokio_util::sync::CancellationToken;

use crate::{policy::identity::Identity, telemetry::traces, to_client::ToClient};

/// A downstream request as the handler sees it.
#[derive(Debug, Clone)]
pub(super) struct Incoming {
    pub id: RequestId,
    pub meta: RequestMetaObject,
    /// Cancelled when the client cancels the request (or its session ends).
    pub ct: CancellationToken,
    /// Whom notifications and input requests of this request go to.
    pub client: ToClient,
    /// The caller, as the HTTP edge authenticated it; `None` over stdio (the local operator).
    pub identity: Option<Identity>,
    /// The session it belongs to (see [`session_of`]), and its key in the hub.
    pub session: Option<String>,
    pub session_key: String,
    /// Its `Fedgate-Workspace` header (see [`workspace_of`]).
    pub workspace: Option<String>,
    /// The caller's trace context.
    pub parent: opentelemetry::Context,
    /// It speaks the stateless era (its `_meta` carries the protocol version).
    pub modern: bool,
    /// Its protocol version has no `initialize` (per-request log levels, no session state).
    pub stateless: bool,
    /// What the caller declared it can do.
    pub capabilities: Option<ClientCapabilities>,
}

impl Incoming {
    /// A request as rmcp's server hands it over.
    pub fn of(ctx: &RequestContext<RoleServer>) -> Self {
        Self {
            id: ctx.id.clone(),
            meta: ctx.meta.clone(),
            ct: ctx.ct.clone(),
            client: Arc::new(ctx.peer.clone()),
            identity: ctx
                .extensions
                .get::<http::request::Parts>()
                .and_then(|p| p.extensions.get::<Identity>())
                .cloned(),
            session: session_of(&ctx.extensions),
            session_key: session_key(&ctx.extensions),
            workspace: workspace_of(&ctx.extensions),
            parent: caller_context(ctx),
            modern: is_modern(ctx),
            stateless: ctx.protocol_version().is_some_and(|v| !v.has_initialize()),
            capabilities: ctx.client_capabilities(),
        }
    }
}

/// Session key used when the transport has no `Mcp-Session-Id` (stdio, stateless requests).
pub(super) const LOCAL_SESSION: &str = "local";

/// Whether a request speaks the stateless era (its `_meta` carries the protocol version).
pub(super) fn is_modern(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.meta
        .contains_key("io.modelcontextprotocol/protocolVersion")
}

/// The caller's trace context: the request's `_meta`, else its HTTP headers.
fn caller_context(ctx: &RequestContext<RoleServer>) -> opentelemetry::Context {
    traces::parent(
        &ctx.meta,
        ctx.extensions
            .get::<http::request::Parts>()
            .map(|p| &p.headers),
    )
}

/// A server span for a request answered by fedgate itself (lists); it ends when dropped.
/// Routed requests get theirs in the pipeline's `observe` step.
pub(super) fn request_span(method: &'static str, r: &Incoming) -> opentelemetry::Context {
    use traces::{KeyValue, SpanKind};
    if !traces::enabled() {
        return r.parent.clone();
    }
    traces::child(
        &r.parent,
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
fn session_of(ext: &rmcp::model::Extensions) -> Option<String> {
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
fn workspace_of(ext: &rmcp::model::Extensions) -> Option<String> {
    ext.get::<http::request::Parts>()
        .and_then(|p| p.headers.get(crate::stages::WORKSPACE_HEADER))
        .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned())
}
