//! Request bodies at the HTTP edge: read bounded in size and time, and rmcp's plain-text
//! refusals of bodies it cannot decode turned into JSON-RPC error objects.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use super::{http::Body, responses::json};

/// The largest `initialize` request accepted (real clients send well under 4 KiB).
const MAX_INITIALIZE_BYTES: usize = 16 * 1024;

/// A stateless-era POST without `Mcp-Method`. The spec requires the header on requests and
/// leaves notifications open; some SDKs send notifications without it (e.g. the TS SDK's
/// `notifications/cancelled` after closing a listen stream), which rmcp refuses.
fn needs_method_header(req: &Request<Incoming>) -> bool {
    req.method() == http::Method::POST
        && !req.headers().contains_key("mcp-method")
        && req
            .headers()
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v >= "2026-07-28")
}

/// Reads a POST body, at most `max_body` bytes within `timeout`; a refusal is a JSON-RPC error
/// answer. A stateless-era notification without `Mcp-Method` gets it from its own `method`, so
/// rmcp accepts it (requests stay as they are: rmcp answers them with its header error).
pub(super) async fn read_body(
    req: Request<Incoming>,
    max_body: usize,
    timeout: Duration,
) -> Result<Request<Full<Bytes>>, Response<Body>> {
    let needs_method = needs_method_header(&req);
    let (mut parts, body) = req.into_parts();
    let refuse = |status: StatusCode, message: String| {
        json(
            status,
            &serde_json::json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32600, "message": message}}),
        )
    };
    let bytes = match tokio::time::timeout(
        timeout,
        http_body_util::Limited::new(body, max_body).collect(),
    )
    .await
    {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body larger than {max_body} bytes"),
            ));
        }
        Ok(Err(e)) => {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                format!("the request body could not be read: {e}"),
            ));
        }
        Err(_) => {
            return Err(refuse(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {timeout:?}"),
            ));
        }
    };
    // The session id seals what `initialize` carried: a client that sends more than any real
    // client does is refused clearly, rather than handed an id no client can send back.
    if bytes.len() > MAX_INITIALIZE_BYTES
        && serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .is_some_and(|v| v.get("method").and_then(|m| m.as_str()) == Some("initialize"))
    {
        return Err(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "initialize parameters larger than {MAX_INITIALIZE_BYTES} bytes; send a smaller clientInfo and capabilities"
            ),
        ));
    }
    if needs_method {
        let method = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .filter(|v| v.get("id").is_none())
            .and_then(|v| v.get("method").and_then(|m| m.as_str()).map(str::to_owned))
            .and_then(|m| http::HeaderValue::from_str(&m).ok());
        if let Some(m) = method {
            parts.headers.insert("mcp-method", m);
        }
    }
    Ok(Request::from_parts(parts, Full::new(bytes)))
}

/// rmcp refuses a body it cannot decode with a plain-text 415; a client gets a JSON-RPC error
/// object instead (`id: null`): -32700 for a body that is not JSON, -32600 for JSON that is no
/// JSON-RPC 2.0 message (with 400), or the same text as -32600 for a wrong Content-Type (415).
pub(super) async fn as_jsonrpc_error(r: Response<Body>) -> Response<Body> {
    let json_already = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if json_already {
        return r;
    }
    let (parts, body) = r.into_parts();
    let text = body
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    let (status, code, message) = match text.strip_prefix("fail to deserialize request body ") {
        Some(why) if why.contains("unrecognized JSON-RPC message") => (
            StatusCode::BAD_REQUEST,
            -32600,
            "invalid request: the body is not a JSON-RPC 2.0 request, notification or response"
                .to_owned(),
        ),
        Some(why) => (
            StatusCode::BAD_REQUEST,
            -32700,
            format!("parse error: the body is not valid JSON ({why})"),
        ),
        None => (parts.status, -32600, text),
    };
    json(
        status,
        &serde_json::json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": code, "message": message}}),
    )
}
