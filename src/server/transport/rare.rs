//! What no other path of the edge took: the rare requests of both eras, answered in the order
//! and with the decisions rmcp's transport made (`is_legacy_request`, then its session or
//! stateless branch) — a session's request naming its version in `_meta`, `initialize` inside
//! a session, the stateless era's methods the gateway does not serve (`ping`, `skills/*`),
//! `server/discover` beside a handshake-era header, a stateless GET or DELETE. Every request
//! gets an answer here: nothing is left for another transport.

use bytes::Bytes;
use http::{Response, StatusCode, request::Parts};
use rmcp::{
    ServerHandler,
    model::{
        ClientJsonRpcMessage, ClientRequest, GetMeta, JsonRpcRequest, ProtocolVersion, RequestId,
        ServerJsonRpcMessage, ServerResult,
    },
};
use serde_json::Value;

use super::{
    Call, Direct, STATELESS,
    http_answers::{accepted, json, stateless_status},
    mcp_headers,
    message::{self, Era, Message},
};
use crate::server::{http::Body, wire_error::WireError};

impl Direct {
    /// Answers a POST the other paths declined; `session` is the open session it names (the
    /// stateless era ignores it).
    pub(in crate::server) async fn remaining(
        &self,
        parts: &Parts,
        body: &Bytes,
        session: Option<&str>,
    ) -> Response<Body> {
        let Ok(message) = serde_json::from_slice::<ClientJsonRpcMessage>(body) else {
            return WireError::NotJsonRpc.response();
        };
        let header = parts
            .headers
            .get("mcp-protocol-version")
            .map(|v| v.to_str().unwrap_or("(not text)"));
        let request = match &message {
            ClientJsonRpcMessage::Request(r) => Some(r),
            _ => None,
        };
        if let Some(r) = request
            && let Err(refused) = versions_agree(r, header)
        {
            return refused.response_to(Some(&r.id));
        }
        if !handshake_era(request, header) {
            return self.remaining_stateless(parts, body, &message).await;
        }
        let Some(r) = request else {
            // A notification or a client's answer: a session takes it (nothing waits for it
            // here); without a session there is nothing it could belong to.
            return match session {
                Some(_) => accepted(),
                None => WireError::SessionRequired.response(),
            };
        };
        let method = r.request.method().to_owned();
        let Some(session) = session else {
            return match &r.request {
                // The edge's `initialize` declined it: headers that disagree with it refuse it
                // (a handshake-era client sends none, so an absent `Mcp-Method` is no fault),
                // else the sessions are full (requests raced past the edge's first refusal).
                ClientRequest::InitializeRequest(_) => {
                    let refused = serde_json::from_slice::<Value>(body)
                        .ok()
                        .filter(|_| parts.headers.contains_key("mcp-method"))
                        .and_then(|json| mcp_headers::check(&parts.headers, &json, None).err());
                    refused
                        .unwrap_or(WireError::TooManySessions {
                            max: self.shared.sessions.max(),
                        })
                        .response_to(Some(&r.id))
                }
                // Its `_meta` lacks what the stateless era requires (`versions_agree`
                // refused one naming no version).
                ClientRequest::DiscoverRequest(_) => missing_keys(r).response_to(Some(&r.id)),
                _ => WireError::SessionRequired.response(),
            };
        };
        let negotiated = match self.negotiation(session).await {
            Ok(n) => n,
            Err(answer) => return answer,
        };
        match &r.request {
            // A second `initialize` in a session is answered as the first was; the session
            // keeps what it negotiated.
            ClientRequest::InitializeRequest(init) => {
                match ServerHandler::negotiate_initialize(&self.gateway, &init.params) {
                    Ok(result) => session_answer(ServerJsonRpcMessage::response(
                        ServerResult::InitializeResult(result),
                        r.id.clone(),
                    )),
                    Err(e) => session_answer(ServerJsonRpcMessage::error(e, Some(r.id.clone()))),
                }
            }
            // A request naming its version in `_meta` (the header names the same one).
            _ => match message::decode(body, None, None, Era::Named) {
                Some(Message::Request { id, request, meta }) => {
                    let call = Call::in_session(id, request, meta, (session, negotiated), None);
                    self.call(parts, call).await
                }
                // `subscriptions/listen` (the stateless era's), `skills/*` (not served).
                _ => session_answer(unknown(&method, r.id.clone())),
            },
        }
    }

    /// The stateless era's request that passed the checks the direct path made and that it
    /// does not serve: `server/discover` in an unusual shape is answered, any other method is
    /// unknown to this era (its `ping`, `skills/*`).
    async fn remaining_stateless(
        &self,
        parts: &Parts,
        body: &[u8],
        message: &ClientJsonRpcMessage,
    ) -> Response<Body> {
        let r = match message {
            ClientJsonRpcMessage::Request(r) => r,
            ClientJsonRpcMessage::Notification(_) => return accepted(),
            _ => return WireError::UnexpectedResponse.response(),
        };
        let refused = |e: WireError| e.response_to(Some(&r.id));
        if let Ok(json) = serde_json::from_slice::<Value>(body)
            && let Err(e) = mcp_headers::check(&parts.headers, &json, None)
        {
            return refused(e);
        }
        let meta = r.request.get_meta();
        if !meta
            .missing_required_keys(&ProtocolVersion::V_2026_07_28)
            .is_empty()
        {
            return refused(missing_keys(r));
        }
        // Per-request negotiation is the stateless era's: an older version named in `_meta`
        // has a session to speak in.
        if meta
            .protocol_version()
            .is_some_and(|v| v.as_str() != STATELESS)
        {
            return refused(WireError::UnsupportedVersion {
                requested: meta
                    .protocol_version()
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
                supported: vec![STATELESS.to_owned()],
            });
        }
        let answer = match &r.request {
            ClientRequest::DiscoverRequest(_) => {
                let call = Call {
                    id: r.id.clone(),
                    request: message::Request::Discover,
                    meta: meta.clone(),
                    capabilities: meta.client_capabilities(),
                    session: None,
                    client: None,
                };
                return self.call(parts, call).await;
            }
            // A method this era serves whose params did not decode (a string for `arguments`):
            // invalid params, as rmcp's handler answers it; any other is unknown to the era.
            ClientRequest::CustomRequest(c) => ServerJsonRpcMessage::error(
                crate::server::unrouted::custom_request(&c.method, true),
                Some(r.id.clone()),
            ),
            _ => unknown(r.request.method(), r.id.clone()),
        };
        json(stateless_status(&answer), &answer)
    }

    /// A GET or DELETE no other path took: the stateless era has no streams (405 with `Allow:
    /// POST`, as rmcp answers it); a handshake-era one without a session id needs one (400).
    pub(in crate::server) fn remaining_stream(&self, headers: &http::HeaderMap) -> Response<Body> {
        let stateless = headers
            .get("mcp-protocol-version")
            .is_some_and(|v| v.as_bytes() >= STATELESS.as_bytes());
        match stateless {
            true => WireError::NoStatelessStream.response(),
            false => WireError::SessionRequired.response(),
        }
    }
}

/// rmcp's first checks of any request: an `initialize`'s version header names the version its
/// params ask for; a request naming its version in `_meta` sends the same in the header; one
/// naming none where the stateless era requires it (`server/discover`, that era's header)
/// lacks required keys.
fn versions_agree(
    r: &JsonRpcRequest<ClientRequest>,
    header: Option<&str>,
) -> Result<(), WireError> {
    let meta = r.request.get_meta();
    if let ClientRequest::InitializeRequest(init) = &r.request {
        let body = init.params.protocol_version.as_str();
        return match header {
            Some(h) if h != body => Err(WireError::InitializeMismatch {
                header: h.to_owned(),
                body: body.to_owned(),
            }),
            _ => Ok(()),
        };
    }
    match (meta.protocol_version(), header) {
        (Some(_), None) => Err(WireError::HeaderMismatch {
            why: "request _meta protocolVersion requires MCP-Protocol-Version header".to_owned(),
        }),
        (Some(v), Some(h)) if h != v.as_str() => Err(WireError::HeaderMismatch {
            why: format!(
                "MCP-Protocol-Version header ({h}) does not match request _meta protocolVersion ({v})"
            ),
        }),
        (None, h)
            if matches!(r.request, ClientRequest::DiscoverRequest(_))
                || h.is_some_and(|h| h >= STATELESS) =>
        {
            Err(missing_keys(r))
        }
        _ => Ok(()),
    }
}

/// Whether a request speaks the handshake era, as rmcp's `is_legacy_request` decides: an
/// `initialize` always does; otherwise unless `_meta` carries all the stateless era requires,
/// the version named (`_meta`, else the header, else 2025-03-26) decides.
fn handshake_era(request: Option<&JsonRpcRequest<ClientRequest>>, header: Option<&str>) -> bool {
    let Some(r) = request else {
        return header.is_none_or(|h| h < STATELESS);
    };
    if matches!(r.request, ClientRequest::InitializeRequest(_)) {
        return true;
    }
    let meta = r.request.get_meta();
    let complete = meta
        .missing_required_keys(&ProtocolVersion::V_2026_07_28)
        .is_empty();
    let version = meta.protocol_version().map(|v| v.to_string());
    let version = version.as_deref().or(header);
    !complete && version.is_none_or(|v| v < STATELESS)
}

fn missing_keys(r: &JsonRpcRequest<ClientRequest>) -> WireError {
    WireError::MetaMissing {
        missing: r
            .request
            .get_meta()
            .missing_required_keys(&ProtocolVersion::V_2026_07_28)
            .join(", "),
    }
}

/// The answer to a method the era does not serve (-32601), as rmcp's handler gives it.
fn unknown(method: &str, id: RequestId) -> ServerJsonRpcMessage {
    let error = WireError::UnknownMethod {
        method: method.to_owned(),
    };
    ServerJsonRpcMessage::error(error.to_mcp(), Some(id))
}

/// A session's answer: one JSON body, 200 (its errors travel in the JSON-RPC message).
fn session_answer(m: ServerJsonRpcMessage) -> Response<Body> {
    json(StatusCode::OK, &m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: &str) -> JsonRpcRequest<ClientRequest> {
        match serde_json::from_str::<ClientJsonRpcMessage>(body) {
            Ok(ClientJsonRpcMessage::Request(r)) => r,
            other => panic!("not a request: {other:?}"),
        }
    }

    const FULL: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

    #[test]
    fn the_era_is_chosen_as_rmcp_chooses_it() {
        let init = request(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2026-07-28","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        );
        // `initialize` is the handshake's whatever it names.
        assert!(handshake_era(Some(&init), Some("2026-07-28")));
        let plain = request(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        assert!(handshake_era(Some(&plain), None));
        assert!(handshake_era(Some(&plain), Some("2025-06-18")));
        assert!(!handshake_era(Some(&plain), Some("2026-07-28")));
        // Every key the stateless era requires: stateless, whatever the header.
        let full = request(&format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{{FULL}}}}}"#
        ));
        assert!(!handshake_era(Some(&full), Some("2025-11-25")));
        // A version in `_meta` alone decides by the version.
        let named = request(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}"#,
        );
        assert!(handshake_era(Some(&named), Some("2026-07-28")));
        // Notifications and answers follow the header.
        assert!(handshake_era(None, None));
        assert!(!handshake_era(None, Some("2026-07-28")));
    }

    #[test]
    fn versions_must_agree_where_rmcp_compares_them() {
        let init = request(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        );
        assert!(versions_agree(&init, None).is_ok());
        assert!(versions_agree(&init, Some("2025-11-25")).is_ok());
        assert!(matches!(
            versions_agree(&init, Some("2025-06-18")),
            Err(WireError::InitializeMismatch { .. })
        ));
        let named = request(&format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{{FULL}}}}}"#
        ));
        assert!(matches!(
            versions_agree(&named, None),
            Err(WireError::HeaderMismatch { .. })
        ));
        assert!(matches!(
            versions_agree(&named, Some("2025-11-25")),
            Err(WireError::HeaderMismatch { .. })
        ));
        assert!(versions_agree(&named, Some("2026-07-28")).is_ok());
        let discover =
            request(r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}"#);
        assert!(matches!(
            versions_agree(&discover, None),
            Err(WireError::MetaMissing { .. })
        ));
        let plain = request(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        assert!(versions_agree(&plain, Some("2025-11-25")).is_ok());
        assert!(matches!(
            versions_agree(&plain, Some("2026-07-28")),
            Err(WireError::MetaMissing { .. })
        ));
    }
}
