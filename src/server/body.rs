//! Request bodies at the HTTP edge: read bounded in size and time.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::{http::Body, wire_error::WireError};

/// The largest `initialize` request accepted (real clients send well under 4 KiB).
const MAX_INITIALIZE_BYTES: usize = 16 * 1024;

/// Slowest a body may arrive, in bytes per second, once [`MIN_RATE_GRACE`] has passed: a
/// client trickling its body a byte at a time holds a connection for seconds, not for the
/// whole `body_read_timeout_ms`. JSON-RPC bodies are small and sent at once; 1 KiB/s leaves a
/// megabyte body a slow link.
const MIN_BODY_RATE: u64 = 1024;
const MIN_RATE_GRACE: Duration = Duration::from_secs(1);

/// Why a body was not read.
pub(super) enum Unread {
    TooLarge,
    Broken(String),
    /// Not complete within the body timeout.
    Late,
    /// Below [`MIN_BODY_RATE`].
    Slow,
}

impl Unread {
    /// What a client is told.
    pub(super) fn refusal(self, max_body: usize, timeout: Duration) -> WireError {
        match self {
            Unread::TooLarge => WireError::BodyTooLarge { max: max_body },
            Unread::Broken(why) => WireError::BodyBroken { why },
            Unread::Late => WireError::BodyLate { timeout },
            Unread::Slow => WireError::BodySlow {
                rate: MIN_BODY_RATE,
                grace: MIN_RATE_GRACE,
            },
        }
    }
}

/// A body for the admin API, bounded like `/mcp`'s: a refusal is `{"error": …}` with the same
/// status.
pub(super) async fn read_plain(
    body: Incoming,
    max_body: usize,
    timeout: Duration,
) -> Result<Bytes, Response<Body>> {
    collect(body, max_body, timeout)
        .await
        .map_err(|why| why.refusal(max_body, timeout).plain())
}

/// The whole body, read frame by frame: at most `max_body` bytes, within `timeout`, and never
/// slower than [`MIN_BODY_RATE`] after the grace.
pub(super) async fn collect(
    mut body: Incoming,
    max_body: usize,
    timeout: Duration,
) -> Result<Bytes, Unread> {
    let start = tokio::time::Instant::now();
    let deadline = start + timeout;
    let mut got = bytes::BytesMut::new();
    loop {
        // The moment the bytes so far stop meeting the minimum rate.
        let owed = Duration::from_secs_f64(got.len() as f64 / MIN_BODY_RATE as f64);
        let too_slow = start + MIN_RATE_GRACE + owed;
        let frame = match tokio::time::timeout_at(deadline.min(too_slow), body.frame()).await {
            Ok(f) => f,
            Err(_) if too_slow < deadline => return Err(Unread::Slow),
            Err(_) => return Err(Unread::Late),
        };
        match frame {
            None => return Ok(got.freeze()),
            Some(Err(e)) => return Err(Unread::Broken(e.to_string())),
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    if got.len().saturating_add(data.len()) > max_body {
                        return Err(Unread::TooLarge);
                    }
                    got.extend_from_slice(&data);
                }
            }
        }
    }
}

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
) -> Result<(http::request::Parts, Bytes), Response<Body>> {
    let needs_method = needs_method_header(&req);
    let (mut parts, body) = req.into_parts();
    let bytes = match collect(body, max_body, timeout).await {
        Ok(b) => b,
        Err(why) => return Err(why.refusal(max_body, timeout).response()),
    };
    // The session id seals what `initialize` carried: a client that sends more than any real
    // client does is refused clearly, rather than handed an id no client can send back.
    if bytes.len() > MAX_INITIALIZE_BYTES
        && serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .is_some_and(|v| v.get("method").and_then(|m| m.as_str()) == Some("initialize"))
    {
        return Err(WireError::InitializeTooLarge {
            max: MAX_INITIALIZE_BYTES,
        }
        .response());
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
    Ok((parts, bytes))
}
