//! Which requests of a session the direct path takes, once the gate passed their `Host`,
//! `Origin` and media types: those that speak the session's version (or name none, as older
//! SDKs do). Any other (a version header repeated, not text, or not the session's) goes to
//! rmcp's transport, which checks it and answers its refusals. The handshake era's requests
//! carry no `Mcp-Method`, `Mcp-Name` or `Mcp-Param-*` headers; rmcp ignores them there, and
//! so does the edge.

use http::request::Parts;

use super::{Direct, STATELESS};
use crate::server::sessions::Negotiated;

impl Direct {
    /// Whether a session's request speaks the session's version; any other goes to rmcp, which
    /// checks it (and answers its refusals).
    pub(super) fn plain(&self, parts: &Parts, negotiated: &Negotiated) -> bool {
        // A client that sends no version header speaks the session's (as rmcp reads it).
        let version = match header_text(parts, "mcp-protocol-version") {
            Some(v) => v.is_none_or(|v| v == negotiated.version),
            None => false,
        };
        version && negotiated.version.as_str() < STATELESS
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
