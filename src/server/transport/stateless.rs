//! The stateless era's requests (2026-07-28): no session, every request naming its version,
//! client and capabilities in `_meta` and its method (and name) in headers. Those the direct
//! path decodes are answered as calls; the others are checked in the order rmcp's transport
//! checks them — `_meta` against the version header, the standard headers against the body
//! (`mcp_headers`), `_meta`'s required keys — and refused as it refused them. A notification
//! is accepted (the era acts on none outside a listen stream), a response refused. What passes
//! every check and is still not the direct path's stays rmcp's to serve.

use bytes::Bytes;
use http::{Response, request::Parts};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, GetMeta, ProtocolVersion};
use serde_json::Value;

use super::{
    Call, Direct, STATELESS, era_check,
    http_answers::accepted,
    mcp_headers,
    message::{self, Era, Message, Request},
    shape::names_a_header,
};
use crate::server::{http::Body, wire_error::WireError};

impl Direct {
    /// Answers a stateless-era POST (its `MCP-Protocol-Version` is that era's), or `None`:
    /// it is not one, or `rare` answers it.
    pub(in crate::server) async fn answer_stateless(
        &self,
        parts: &Parts,
        body: &Bytes,
    ) -> Option<Response<Body>> {
        // rmcp reads the first version header.
        let version = parts.headers.get("mcp-protocol-version")?;
        if version.as_bytes() != STATELESS.as_bytes() {
            return None;
        }
        let text = |name: &str| era_check::header_text(parts, name);
        // `Mcp-Name` in either of SEP-2243's forms: as is, or Base64 (`=?base64?…?=`) for a
        // name that is not plain ASCII; one that does not decode is refused below.
        let name = match text("mcp-name") {
            Some(Some(n)) => mcp_headers::decode(n).map(Some),
            Some(None) => Some(None),
            None => None,
        };
        let decoded = match (text("mcp-method"), name) {
            (Some(method), Some(name)) => {
                message::decode(body, method, name.as_deref(), Era::Stateless(STATELESS))
            }
            // Repeated or not text: refused below.
            _ => None,
        };
        let Some(Message::Request { id, request, meta }) = decoded else {
            return self.refuse_stateless(parts, body);
        };
        // A tool whose arguments are mirrored in `Mcp-Param-*` headers: they must agree.
        if let Request::CallTool(p) = &request {
            let catalog = self.gateway.parts.pool.catalog();
            let schema = catalog.tool_def(&p.name).map(|t| t.input_schema.clone());
            let sent = parts
                .headers
                .keys()
                .any(|k| k.as_str().starts_with("mcp-param-"));
            if sent || schema.as_deref().is_some_and(names_a_header) {
                let json: Value = serde_json::from_slice(body).ok()?;
                if let Err(refused) = mcp_headers::check(&parts.headers, &json, schema.as_deref()) {
                    return Some(refused.response_to(Some(&id)));
                }
            }
        }
        let capabilities = meta.client_capabilities();
        let call = Call {
            id,
            request,
            meta,
            capabilities,
            session: None,
            client: None,
        };
        Some(self.call(parts, call).await)
    }

    /// What rmcp's transport answers a stateless-era POST the direct path did not take, where
    /// it refuses it; `None` where it serves it (or the body is no JSON-RPC message, which the
    /// edge refuses next).
    fn refuse_stateless(&self, parts: &Parts, body: &[u8]) -> Option<Response<Body>> {
        let message = serde_json::from_slice::<ClientJsonRpcMessage>(body).ok()?;
        let request = match &message {
            // `initialize` is the handshake's, whatever its headers (see `handshake`).
            ClientJsonRpcMessage::Request(r)
                if matches!(r.request, ClientRequest::InitializeRequest(_)) =>
            {
                return None;
            }
            ClientJsonRpcMessage::Request(r) => Some(r),
            _ => None,
        };
        let id = request.map(|r| &r.id);
        let refused = |e: WireError| Some(e.response_to(id));
        // `_meta` names this era's version, as the header does.
        if let Some(r) = request {
            let meta = r.request.get_meta();
            match meta.protocol_version() {
                None => {
                    return refused(missing(
                        meta.missing_required_keys(&ProtocolVersion::V_2026_07_28),
                    ));
                }
                Some(v) if v.as_str() != STATELESS => {
                    return refused(WireError::HeaderMismatch {
                        why: format!(
                            "MCP-Protocol-Version header ({STATELESS}) does not match request \
                             _meta protocolVersion ({v})"
                        ),
                    });
                }
                Some(_) => {}
            }
        }
        let json: Value = serde_json::from_slice(body).ok()?;
        let catalog = self.gateway.parts.pool.catalog();
        let schema = json
            .get("params")
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .filter(|_| json.get("method").and_then(Value::as_str) == Some("tools/call"))
            .and_then(|name| catalog.tool_def(name))
            .map(|t| t.input_schema.clone());
        if let Err(e) = mcp_headers::check(&parts.headers, &json, schema.as_deref()) {
            return refused(e);
        }
        match &message {
            ClientJsonRpcMessage::Notification(_) => Some(accepted()),
            ClientJsonRpcMessage::Response(_) | ClientJsonRpcMessage::Error(_) => {
                Some(WireError::UnexpectedResponse.response())
            }
            ClientJsonRpcMessage::Request(r) => {
                let missing_keys = r
                    .request
                    .get_meta()
                    .missing_required_keys(&ProtocolVersion::V_2026_07_28);
                if !missing_keys.is_empty() {
                    return refused(missing(missing_keys));
                }
                None
            }
        }
    }
}

fn missing(keys: Vec<&str>) -> WireError {
    WireError::MetaMissing {
        missing: keys.join(", "),
    }
}
