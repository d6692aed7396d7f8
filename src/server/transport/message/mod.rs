//! A session POST decoded once, by `method` and `id`, into what the direct path answers — or
//! `None`, and the body goes on unchanged to the paths that answer everything else
//! (`stateless`, `rare`), malformed bodies included.

#![allow(deprecated)] // logging/setLevel is deprecated by SEP-2577 but still served

use rmcp::model::{
    CallToolRequestParams, CancelTaskParams, ClientJsonRpcMessage, CompleteRequestParams,
    GetPromptRequestParams, GetTaskParams, InitializeRequestParams, PaginatedRequestParams,
    ReadResourceRequestParams, RequestId, RequestMetaObject, SetLevelRequestParams,
    SubscribeRequestParams, UnsubscribeRequestParams, UpdateTaskParams,
};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The members of a JSON-RPC message the choice needs; `params` stays raw until the method
/// says what it is.
#[derive(Deserialize)]
struct Envelope<'a> {
    jsonrpc: &'a str,
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(default, borrow)]
    method: Option<&'a str>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// A request the direct path answers.
#[derive(Debug)]
pub(super) enum Request {
    CallTool(CallToolRequestParams),
    ListTools(Option<PaginatedRequestParams>),
    ListPrompts(Option<PaginatedRequestParams>),
    GetPrompt(GetPromptRequestParams),
    ListResources(Option<PaginatedRequestParams>),
    ListTemplates(Option<PaginatedRequestParams>),
    ReadResource(ReadResourceRequestParams),
    Ping,
    SetLevel(SetLevelRequestParams),
    Complete(CompleteRequestParams),
    GetTask(GetTaskParams),
    UpdateTask(UpdateTaskParams),
    CancelTask(CancelTaskParams),
    /// A session's `resources/subscribe` (the stateless era listens instead).
    Subscribe(SubscribeRequestParams),
    Unsubscribe(UnsubscribeRequestParams),
    /// The stateless era's `server/discover`.
    Discover,
    /// A method rmcp does not know, or params it cannot decode (answered with its error).
    Custom(String),
}

/// `server/discover`'s params: nothing but `_meta` (rmcp refuses anything else).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscoverParams {
    #[serde(rename = "_meta")]
    meta: Option<RequestMetaObject>,
}

impl Request {
    /// `_meta` moves out of the params, as rmcp's decoding does.
    fn take_meta(&mut self) -> Option<RequestMetaObject> {
        match self {
            Request::CallTool(p) => p.meta.take(),
            Request::GetPrompt(p) => p.meta.take(),
            Request::ReadResource(p) => p.meta.take(),
            Request::ListTools(p)
            | Request::ListPrompts(p)
            | Request::ListResources(p)
            | Request::ListTemplates(p) => p.as_mut().and_then(|p| p.meta.take()),
            Request::Ping | Request::Discover | Request::Custom(_) => None,
            Request::SetLevel(p) => p.meta.take(),
            Request::Complete(p) => p.meta.take(),
            Request::GetTask(p) => p.meta.take(),
            Request::UpdateTask(p) => p.meta.take(),
            Request::CancelTask(p) => p.meta.take(),
            Request::Subscribe(p) => p.meta.take(),
            Request::Unsubscribe(p) => p.meta.take(),
        }
    }

    /// What `Mcp-Name` names for this request, if anything.
    fn name(&self) -> Option<&str> {
        match self {
            Request::CallTool(p) => Some(&p.name),
            Request::GetPrompt(p) => Some(&p.name),
            Request::ReadResource(p) => Some(&p.uri),
            Request::Subscribe(p) => Some(&p.uri),
            Request::Unsubscribe(p) => Some(&p.uri),
            Request::GetTask(p) => Some(&p.task_id),
            Request::UpdateTask(p) => Some(&p.task_id),
            Request::CancelTask(p) => Some(&p.task_id),
            _ => None,
        }
    }

    /// The method of a request the tasks extension gates.
    pub(super) fn task_method(&self) -> Option<&'static str> {
        match self {
            Request::GetTask(_) => Some("tasks/get"),
            Request::UpdateTask(_) => Some("tasks/update"),
            Request::CancelTask(_) => Some("tasks/cancel"),
            _ => None,
        }
    }
}

/// A POST body the direct path takes.
#[derive(Debug)]
pub(super) enum Message {
    Request {
        id: RequestId,
        request: Request,
        meta: RequestMetaObject,
    },
    /// The client's answer to a request the direct path sent (its id is one of ours).
    Answer(ClientJsonRpcMessage),
    /// `notifications/cancelled` for one of the session's requests.
    Cancelled(RequestId),
    /// `notifications/initialized`.
    Initialized,
    /// Another notification of a session (`notifications/roots/list_changed` …).
    Notification,
}

/// Ids of requests the direct path sends to a client start with this.
pub(super) const OUR_IDS: &str = "fedgate-direct-";

fn params<'de, T: Deserialize<'de>>(raw: Option<&'de RawValue>) -> Option<T> {
    serde_json::from_str(raw?.get()).ok()
}

fn optional<'de, T: Deserialize<'de>>(raw: Option<&'de RawValue>) -> Option<Option<T>> {
    match raw {
        None => Some(None),
        Some(r) => serde_json::from_str(r.get()).ok().map(Some),
    }
}

#[derive(Deserialize)]
struct CancelledParams {
    #[serde(rename = "requestId")]
    request_id: RequestId,
}

/// Which era a request must speak to be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Era {
    /// In a session: `_meta` names no protocol version.
    Handshake,
    /// In a session, `_meta` naming a version (the header names the same one: checked before).
    Named,
    /// `_meta` names this version, and `Mcp-Method` (and `Mcp-Name` where the method has a
    /// name) are present.
    Stateless(&'static str),
}

/// Decodes `body`; `mcp_method` / `mcp_name` are the request's `Mcp-Method` / `Mcp-Name`
/// headers, which must agree with the body (rmcp answers a disagreement or an absence).
pub(super) fn decode(
    body: &[u8],
    mcp_method: Option<&str>,
    mcp_name: Option<&str>,
    era: Era,
) -> Option<Message> {
    let e: Envelope<'_> = serde_json::from_slice(body).ok()?;
    if e.jsonrpc != "2.0" || mcp_method.is_some_and(|m| Some(m) != e.method) {
        return None;
    }
    let stateless = matches!(era, Era::Stateless(_));
    if stateless && (mcp_method.is_none() || e.id.is_none()) {
        return None;
    }
    match (e.id, e.method) {
        (Some(id), Some(method)) => {
            let typed = match method {
                "tools/call" => params(e.params).map(Request::CallTool),
                "tools/list" => optional(e.params).map(Request::ListTools),
                "prompts/list" => optional(e.params).map(Request::ListPrompts),
                "prompts/get" => params(e.params).map(Request::GetPrompt),
                "resources/list" => optional(e.params).map(Request::ListResources),
                "resources/templates/list" => optional(e.params).map(Request::ListTemplates),
                "resources/read" => params(e.params).map(Request::ReadResource),
                // A session's ping; one with params is read as rmcp reads it (below).
                "ping" if !stateless && e.params.is_none() => Some(Request::Ping),
                "logging/setLevel" if !stateless => params(e.params).map(Request::SetLevel),
                "completion/complete" => params(e.params).map(Request::Complete),
                "tasks/get" => params(e.params).map(Request::GetTask),
                "tasks/update" => params(e.params).map(Request::UpdateTask),
                "tasks/cancel" => params(e.params).map(Request::CancelTask),
                "resources/subscribe" if !stateless => params(e.params).map(Request::Subscribe),
                "resources/unsubscribe" if !stateless => params(e.params).map(Request::Unsubscribe),
                // Its `_meta` is all it carries (checked below like any stateless request's).
                "server/discover" if stateless && mcp_name.is_none() => {
                    let Some(p) = params::<DiscoverParams>(e.params) else {
                        return custom(body, id, mcp_name, era);
                    };
                    let meta = p.meta.unwrap_or_default();
                    return meta_fits(&meta, era).then_some(Message::Request {
                        id,
                        request: Request::Discover,
                        meta,
                    });
                }
                _ => None,
            };
            // A method rmcp does not know, or params it cannot decode: its custom request.
            let Some(mut request) = typed else {
                return custom(body, id, mcp_name, era);
            };
            let named = request.name();
            if mcp_name.is_some_and(|n| Some(n) != named)
                || (stateless && named.is_some() && mcp_name.is_none())
            {
                return None;
            }
            let meta = request.take_meta().unwrap_or_default();
            meta_fits(&meta, era).then_some(Message::Request { id, request, meta })
        }
        // A client's answer (to one of ours, or — in a session — to anything: the edge ignores
        // what no one waits for, as rmcp's worker does).
        (Some(RequestId::String(id)), None)
            if id.starts_with(OUR_IDS) && (e.result.is_some() || e.error.is_some()) =>
        {
            serde_json::from_slice(body).ok().map(Message::Answer)
        }
        (Some(_), None) if !stateless && (e.result.is_some() || e.error.is_some()) => {
            serde_json::from_slice(body).ok().map(Message::Answer)
        }
        (None, Some("notifications/cancelled")) => {
            let p: CancelledParams = params(e.params)?;
            Some(Message::Cancelled(p.request_id))
        }
        (None, Some("notifications/initialized")) if !stateless && e.params.is_none() => {
            Some(Message::Initialized)
        }
        // Any other notification of a session that rmcp reads as one (the gateway acts on
        // none of them, as rmcp's handler ignores them).
        (None, Some(_)) if !stateless => {
            let m = serde_json::from_slice::<ClientJsonRpcMessage>(body).ok()?;
            matches!(m, ClientJsonRpcMessage::Notification(_)).then_some(Message::Notification)
        }
        _ => None,
    }
}

/// Methods whose `Mcp-Name` rmcp checks in the stateless era (their custom requests are its).
const NAMED: [&str; 8] = [
    "tools/call",
    "prompts/get",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

/// A request rmcp decodes as custom — a method it does not know, or a known one whose params
/// it cannot decode — or a session's `ping` with params, taken with the `_meta` rmcp reads from
/// it; `None` for anything else (rmcp's), or when headers it checks come with it.
fn custom(body: &[u8], id: RequestId, mcp_name: Option<&str>, era: Era) -> Option<Message> {
    use rmcp::model::{ClientRequest, GetMeta};
    let Ok(ClientJsonRpcMessage::Request(r)) = serde_json::from_slice(body) else {
        return None;
    };
    let request = match &r.request {
        ClientRequest::CustomRequest(c) => {
            if mcp_name.is_some()
                || (matches!(era, Era::Stateless(_)) && NAMED.contains(&c.method.as_str()))
            {
                return None;
            }
            Request::Custom(c.method.clone())
        }
        // (The stateless era has no `ping`: rmcp's handler answers it -32601.)
        ClientRequest::PingRequest(_) if !matches!(era, Era::Stateless(_)) => Request::Ping,
        _ => return None,
    };
    let meta = r.request.get_meta().clone();
    meta_fits(&meta, era).then_some(Message::Request { id, request, meta })
}

/// Whether a request's `_meta` speaks `era`: none names a version in a session; a stateless
/// request names this one and carries every key that era requires.
fn meta_fits(meta: &RequestMetaObject, era: Era) -> bool {
    let version = meta.protocol_version();
    match era {
        Era::Handshake => version.is_none(),
        Era::Named => true,
        Era::Stateless(v) => {
            version.is_some_and(|m| m.as_str() == v)
                && meta
                    .missing_required_keys(&rmcp::model::ProtocolVersion::V_2026_07_28)
                    .is_empty()
        }
    }
}

/// Decodes an `initialize` request: its id and params.
pub(super) fn decode_initialize(body: &[u8]) -> Option<(RequestId, InitializeRequestParams)> {
    let e: Envelope<'_> = serde_json::from_slice(body).ok()?;
    if e.jsonrpc != "2.0" || e.method != Some("initialize") {
        return None;
    }
    Some((e.id?, params(e.params)?))
}

#[cfg(test)]
mod tests;
