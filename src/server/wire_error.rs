//! The one place where what the server refuses outside a call becomes a wire error: a
//! JSON-RPC error object (`id: null` when the request's id is unknown) with a stable code and
//! reason, the HTTP status that goes with it, and `Retry-After` where waiting helps. A call's
//! own failures become wire errors in `pipeline::to_wire`; everything else the server answers
//! is built here, so a code is chosen once.

use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};
use rmcp::{
    ErrorData as McpError,
    model::{ErrorCode, RequestId},
};
use serde_json::{Value, json};

use super::{http::Body, responses::json};

/// Why the server refused a request, or a part of one, before or beside a call.
#[derive(Debug, Clone)]
pub(crate) enum WireError {
    /// The body is not JSON.
    Parse {
        why: String,
    },
    /// JSON, but no JSON-RPC 2.0 request, notification or response.
    NotJsonRpc,
    BodyTooLarge {
        max: usize,
    },
    InitializeTooLarge {
        max: usize,
    },
    BodyBroken {
        why: String,
    },
    BodyLate {
        timeout: Duration,
    },
    BodySlow {
        rate: u64,
        grace: Duration,
    },
    TooManySessions {
        max: usize,
    },
    TooManyConnections,
    /// A session id that is no session of this caller's (forged, someone else's, ended).
    NoSuchSession,
    /// A handshake-era request other than `initialize` without a session id.
    SessionRequired,
    /// A stateless-era header that disagrees with the body, is missing or is sent twice
    /// (SEP-2243: `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`, `MCP-Protocol-Version`).
    HeaderMismatch {
        why: String,
    },
    /// A stateless-era request whose `_meta` lacks what that era requires.
    MetaMissing {
        missing: String,
    },
    /// A protocol version (header or `_meta`) the gateway does not speak.
    UnsupportedVersion {
        requested: String,
        supported: Vec<String>,
    },
    /// A JSON-RPC response sent where no request of the server's waits for one.
    UnexpectedResponse,
    /// A `Last-Event-ID` this session cannot resume from.
    CannotResume {
        why: String,
        gone: bool,
    },
    /// `Host` not among `allowed_hosts` (DNS rebinding).
    HostNotAllowed,
    /// A `Host` header that cannot be read, or none at all.
    BadHost {
        why: &'static str,
    },
    /// A browser's `Origin` not among those configured (or not an origin at all).
    OriginNotAllowed {
        malformed: bool,
    },
    /// An HTTP method `/mcp` does not serve.
    MethodNotAllowed,
    /// A GET or DELETE speaking the stateless era, which has no session streams.
    NoStatelessStream,
    /// An `initialize` whose version header is not the version its params ask for.
    InitializeMismatch {
        header: String,
        body: String,
    },
    /// An `Accept` header without the media types the answer may take.
    NotAcceptable {
        needs: &'static str,
    },
    /// A POST body not declared as JSON.
    NotJsonContent,
    /// A path the listener does not serve.
    NotFound,
    /// A known method whose params could not be decoded.
    MalformedParams {
        method: String,
    },
    UnknownMethod {
        method: String,
    },
    /// What went wrong is ours or an upstream's, not the request's.
    Internal {
        message: String,
    },
}

impl WireError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::Parse { .. } | Self::NotJsonRpc | Self::BodyBroken { .. } => {
                StatusCode::BAD_REQUEST
            }
            Self::BodyTooLarge { .. } | Self::InitializeTooLarge { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Self::BodyLate { .. } | Self::BodySlow { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::TooManySessions { .. } | Self::TooManyConnections => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::NoSuchSession | Self::NotFound | Self::UnknownMethod { .. } => {
                StatusCode::NOT_FOUND
            }
            Self::CannotResume { gone: true, .. } => StatusCode::GONE,
            Self::CannotResume { gone: false, .. } => StatusCode::NOT_FOUND,
            Self::HostNotAllowed | Self::OriginNotAllowed { .. } => StatusCode::FORBIDDEN,
            Self::BadHost { .. }
            | Self::SessionRequired
            | Self::HeaderMismatch { .. }
            | Self::MetaMissing { .. }
            | Self::UnsupportedVersion { .. }
            | Self::InitializeMismatch { .. }
            | Self::UnexpectedResponse => StatusCode::BAD_REQUEST,
            Self::MethodNotAllowed | Self::NoStatelessStream => StatusCode::METHOD_NOT_ALLOWED,
            Self::NotAcceptable { .. } => StatusCode::NOT_ACCEPTABLE,
            Self::NotJsonContent => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::MalformedParams { .. } => StatusCode::BAD_REQUEST,
            Self::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn code(&self) -> ErrorCode {
        match self {
            Self::Parse { .. } => ErrorCode::PARSE_ERROR,
            Self::MalformedParams { .. } | Self::MetaMissing { .. } => ErrorCode::INVALID_PARAMS,
            Self::HeaderMismatch { .. } => ErrorCode::HEADER_MISMATCH,
            Self::UnsupportedVersion { .. } => ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
            Self::UnknownMethod { .. } => ErrorCode::METHOD_NOT_FOUND,
            Self::Internal { .. } => ErrorCode::INTERNAL_ERROR,
            // The server-defined range: a request that may succeed later or elsewhere.
            Self::TooManySessions { .. } | Self::TooManyConnections | Self::NoSuchSession => {
                ErrorCode(-32000)
            }
            _ => ErrorCode::INVALID_REQUEST,
        }
    }

    /// A stable word for what happened, in `error.data.reason`.
    fn reason(&self) -> Option<&'static str> {
        Some(match self {
            Self::TooManySessions { .. } => "too_many_sessions",
            Self::TooManyConnections => "too_many_connections",
            Self::NoSuchSession => "no_such_session",
            Self::SessionRequired => "session_required",
            Self::BodyTooLarge { .. } | Self::InitializeTooLarge { .. } => "too_large",
            Self::BodyLate { .. } | Self::BodySlow { .. } => "too_slow",
            Self::CannotResume { .. } => "cannot_resume",
            Self::HostNotAllowed | Self::BadHost { .. } => "host_not_allowed",
            Self::OriginNotAllowed { .. } => "origin_not_allowed",
            Self::MethodNotAllowed | Self::NoStatelessStream => "method_not_allowed",
            Self::NotAcceptable { .. } | Self::NotJsonContent => "media_type",
            _ => return None,
        })
    }

    pub(crate) fn message(&self) -> String {
        match self {
            Self::Parse { why } => format!("parse error: the body is not valid JSON ({why})"),
            Self::NotJsonRpc => {
                "invalid request: the body is not a JSON-RPC 2.0 request, notification or response"
                    .to_owned()
            }
            Self::BodyTooLarge { max } => format!("request body larger than {max} bytes"),
            Self::InitializeTooLarge { max } => format!(
                "initialize parameters larger than {max} bytes; send a smaller clientInfo and capabilities"
            ),
            Self::BodyBroken { why } => format!("the request body could not be read: {why}"),
            Self::BodyLate { timeout } => {
                format!("the request body did not arrive within {timeout:?}")
            }
            Self::BodySlow { rate, grace } => format!(
                "the request body arrives slower than {rate} bytes/s (after {}s)",
                grace.as_secs()
            ),
            Self::TooManySessions { max } => format!(
                "too many sessions open (max_sessions = {max}); retry later, or end sessions you no longer use"
            ),
            Self::TooManyConnections => "too many connections: try again shortly".to_owned(),
            Self::NoSuchSession => {
                "no such session: it ended, expired or is not yours; start a new one".to_owned()
            }
            Self::HeaderMismatch { why } => why.clone(),
            Self::MetaMissing { missing } => {
                format!("request _meta is missing or has malformed required fields: {missing}")
            }
            Self::UnsupportedVersion { .. } => "Unsupported protocol version".to_owned(),
            Self::UnexpectedResponse => {
                "stateless server does not accept JSON-RPC responses".to_owned()
            }
            Self::SessionRequired => "a session id is required: send `initialize` first, then its \
                 Mcp-Session-Id with every request (or speak the stateless era, 2026-07-28)"
                .to_owned(),
            Self::CannotResume { why, .. } => why.clone(),
            Self::HostNotAllowed => {
                "Host not allowed; add it to [gateway] allowed_hosts".to_owned()
            }
            Self::BadHost { why } => format!("the Host header is {why}"),
            Self::OriginNotAllowed { malformed: true } => {
                "the Origin header is not an origin (scheme://host[:port] or null)".to_owned()
            }
            Self::OriginNotAllowed { malformed: false } => {
                "Origin not allowed; add it to [gateway] allowed_origins".to_owned()
            }
            Self::MethodNotAllowed => {
                "method not allowed: /mcp serves POST, GET (a session's stream) and DELETE"
                    .to_owned()
            }
            Self::NoStatelessStream => "method not allowed: the stateless era (2026-07-28) has no \
                 session streams; POST `subscriptions/listen` to receive notifications"
                .to_owned(),
            Self::InitializeMismatch { header, body } => format!(
                "Invalid Request: MCP-Protocol-Version header ({header}) does not match initialize \
                 params.protocolVersion ({body})"
            ),
            Self::NotAcceptable { needs } => {
                format!("not acceptable: the Accept header must name {needs}")
            }
            Self::NotJsonContent => {
                "unsupported media type: Content-Type must be application/json".to_owned()
            }
            Self::NotFound => "not found; the MCP endpoint is /mcp".to_owned(),
            Self::MalformedParams { method } => format!(
                "params of `{}` are missing or malformed; see the MCP schema for this method",
                crate::names::shown(method)
            ),
            Self::UnknownMethod { method } => {
                format!("unknown method `{}`", crate::names::shown(method))
            }
            Self::Internal { message } => message.clone(),
        }
    }

    fn retry_after(&self) -> Option<&'static str> {
        match self {
            Self::TooManySessions { .. } => Some("5"),
            Self::TooManyConnections => Some("1"),
            _ => None,
        }
    }

    fn data(&self) -> Option<Value> {
        if let Self::UnsupportedVersion {
            requested,
            supported,
        } = self
        {
            return Some(json!({"requested": requested, "supported": supported}));
        }
        let reason = self.reason()?;
        Some(match self {
            Self::TooManySessions { max } => json!({"reason": reason, "max_sessions": max}),
            _ => json!({"reason": reason}),
        })
    }

    /// As the error of a JSON-RPC response (inside a session's answer stream).
    pub(crate) fn to_mcp(&self) -> McpError {
        McpError::new(self.code(), self.message(), self.data())
    }

    /// The whole JSON-RPC error message, for a request whose id is unknown here.
    pub(crate) fn object(&self) -> Value {
        self.object_for(None)
    }

    /// The whole JSON-RPC error message answering request `id` (`null` when unknown).
    pub(crate) fn object_for(&self, id: Option<&RequestId>) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "error": self.to_mcp()})
    }

    /// An HTTP answer carrying the JSON-RPC error (every answer on `/mcp`).
    pub(crate) fn response(&self) -> Response<Body> {
        self.response_to(None)
    }

    /// An HTTP answer carrying the JSON-RPC error, answering request `id`.
    pub(crate) fn response_to(&self, id: Option<&RequestId>) -> Response<Body> {
        self.with_headers(json(self.status(), &self.object_for(id)))
    }

    /// An HTTP answer `{"error": …}` (the probes' and the admin API's shape).
    pub(crate) fn plain(&self) -> Response<Body> {
        self.with_headers(json(self.status(), &json!({"error": self.message()})))
    }

    /// The raw HTTP/1.1 answer, for a connection refused before hyper serves it.
    pub(crate) fn raw_http1(&self) -> String {
        let body = self.object().to_string();
        let status = self.status();
        let retry = self
            .retry_after()
            .map(|s| format!("retry-after: {s}\r\n"))
            .unwrap_or_default();
        format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\n{retry}connection: close\r\n\
             content-length: {}\r\n\r\n{body}",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            body.len()
        )
    }

    fn with_headers(&self, mut resp: Response<Body>) -> Response<Body> {
        if let Some(s) = self.retry_after() {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(s));
        }
        let allow = match self {
            Self::MethodNotAllowed => Some(super::transport::ALLOWED_METHODS),
            Self::NoStatelessStream => Some("POST"),
            _ => None,
        };
        if let Some(allow) = allow {
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        // Past the session cap the connection is shed too, and the client is told so (hyper
        // closes a connection whose answer says `close`).
        if matches!(self, Self::TooManySessions { .. }) {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_is_a_json_rpc_error_with_id_null_and_a_status_to_match() {
        let all = [
            WireError::Parse { why: "x".into() },
            WireError::NotJsonRpc,
            WireError::BodyTooLarge { max: 10 },
            WireError::BodyLate {
                timeout: Duration::from_millis(300),
            },
            WireError::TooManySessions { max: 3 },
            WireError::TooManyConnections,
            WireError::NoSuchSession,
            WireError::UnknownMethod { method: "x".into() },
        ];
        for e in all {
            let v = e.object();
            assert_eq!(v["jsonrpc"], "2.0");
            assert_eq!(v["id"], Value::Null);
            assert!(v["error"]["code"].as_i64().is_some_and(|c| c < 0), "{v}");
            assert!(!e.message().is_empty());
            assert!(e.status().is_client_error() || e.status().is_server_error());
        }
    }

    #[test]
    fn the_raw_answer_is_http_with_its_length_and_retry_after() {
        let raw = WireError::TooManyConnections.raw_http1();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable"),
            "{head}"
        );
        assert!(head.contains("retry-after: 1"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["data"]["reason"], "too_many_connections");
    }
}
