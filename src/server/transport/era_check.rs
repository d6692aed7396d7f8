//! Which requests of a session the direct path takes, once the gate passed their `Host`,
//! `Origin` and media types: those that speak the handshake era (or name no version, as older
//! SDKs do). Any other (a version header that is not text, unknown, or the stateless era's)
//! goes to `stateless` or `rare`, which check it and answer its refusals as rmcp did. The handshake era's requests
//! carry no `Mcp-Method`, `Mcp-Name` or `Mcp-Param-*` headers; they are ignored there.

use http::request::Parts;
use rmcp::{
    ServerHandler,
    model::{ClientJsonRpcMessage, GetMeta, ProtocolVersion},
};

use super::{Direct, STATELESS};
use crate::server::wire_error::WireError;

/// Whether a session's request speaks the handshake era: no `Mcp-Protocol-Version` (older
/// SDKs send none: the session's version), or one of that era's known versions — rmcp reads
/// the first value and serves the session whichever known version it names. Anything else
/// (no text, unknown, the stateless era's) is rmcp's to check and refuse.
pub(super) fn speaks_handshake(headers: &http::HeaderMap) -> bool {
    match headers.get("mcp-protocol-version") {
        None => true,
        Some(v) => v.to_str().is_ok_and(|v| {
            v < STATELESS
                && ProtocolVersion::KNOWN_VERSIONS
                    .iter()
                    .any(|k| k.as_str() == v)
        }),
    }
}

/// Whether a request carries at most one `name` header (rmcp refuses duplicates).
pub(super) fn single(parts: &Parts, name: &str) -> bool {
    parts.headers.get_all(name).iter().count() <= 1
}

/// A header the direct path reads: `Some(None)` when absent, `Some(Some(text))` when sent once
/// as text, `None` (leave the request to rmcp, which refuses it) when repeated or not text.
pub(super) fn header_text<'a>(parts: &'a Parts, name: &str) -> Option<Option<&'a str>> {
    match parts.headers.get(name) {
        None => Some(None),
        Some(_) if !single(parts, name) => None,
        Some(v) => v.to_str().ok().map(Some),
    }
}

/// The version a version header names when rmcp does not know it (`(not text)` for one that
/// is not text); `None` when there is no header or rmcp knows its version.
fn unknown_version(headers: &http::HeaderMap) -> Option<String> {
    let v = headers.get("mcp-protocol-version")?;
    let Ok(v) = v.to_str() else {
        return Some("(not text)".to_owned());
    };
    (!ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .any(|k| k.as_str() == v))
    .then(|| v.to_owned())
}

impl Direct {
    /// A version header rmcp does not know is refused (400), unless a request names its
    /// version in `_meta` (rmcp then lets `_meta` speak); `body` is `None` for a GET or DELETE.
    pub(in crate::server) fn check_version(
        &self,
        headers: &http::HeaderMap,
        body: Option<&[u8]>,
    ) -> Result<(), WireError> {
        let Some(requested) = unknown_version(headers) else {
            return Ok(());
        };
        let per_request = body
            .and_then(|b| serde_json::from_slice::<ClientJsonRpcMessage>(b).ok())
            .is_some_and(|m| {
                matches!(m, ClientJsonRpcMessage::Request(r)
                    if r.request.get_meta().protocol_version().is_some())
            });
        if per_request {
            return Ok(());
        }
        Err(WireError::UnsupportedVersion {
            requested,
            supported: self
                .gateway
                .supported_protocol_versions()
                .iter()
                .map(ToString::to_string)
                .collect(),
        })
    }
}
