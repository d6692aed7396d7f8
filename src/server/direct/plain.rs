//! Which requests the direct path takes: those whose headers are the plain ones every
//! well-behaved client sends. Any other goes to rmcp's transport, which checks it — `Host`,
//! `Origin`, `Accept`, content type, duplicated or mismatched `Mcp-*` headers — and answers its
//! refusals as before.

use http::{header, request::Parts};

use super::{Direct, STATELESS};
use crate::server::sessions::Negotiated;

impl Direct {
    /// Whether the request's headers are the plain ones every well-behaved client sends; any
    /// other goes to rmcp, which checks it (and answers its refusals) as before.
    pub(super) fn plain(&self, parts: &Parts, negotiated: &Negotiated) -> bool {
        let h = &parts.headers;
        self.plain_media(parts)
            && h.get("mcp-protocol-version").and_then(|v| v.to_str().ok())
                == Some(negotiated.version.as_str())
            && negotiated.version.as_str() < STATELESS
            && !h.keys().any(|k| k.as_str().starts_with("mcp-param-"))
    }

    /// `plain_host`, and a JSON body from a client that takes JSON and SSE answers.
    pub(super) fn plain_media(&self, parts: &Parts) -> bool {
        let h = &parts.headers;
        // Media ranges as listed; any parameter (a weight among them) leaves the choice to rmcp.
        let (mut json, mut sse, mut other_params) = (false, false, false);
        for range in h
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
        {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim();
            other_params |= parts.next().is_some();
            json |= media.eq_ignore_ascii_case("application/json");
            sse |= media.eq_ignore_ascii_case("text/event-stream");
        }
        let json_body = h
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| {
                c.split(';')
                    .next()
                    .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json"))
            });
        self.plain_host(parts) && json && sse && !other_params && json_body
    }

    /// Whether `Host` is one `/mcp` answers and no browser `Origin` came with the request.
    pub(super) fn plain_host(&self, parts: &Parts) -> bool {
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(strip_port);
        !parts.headers.contains_key(header::ORIGIN)
            && host.is_some_and(|host| self.hosts.iter().any(|a| a.eq_ignore_ascii_case(host)))
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

/// `host[:port]` → `host` (IPv6 literals keep their brackets stripped too).
pub(super) fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_lose_their_port() {
        assert_eq!(strip_port("localhost:8080"), "localhost");
        assert_eq!(strip_port("127.0.0.1"), "127.0.0.1");
        assert_eq!(strip_port("[::1]:9"), "::1");
        assert_eq!(strip_port("gw.example"), "gw.example");
    }
}
