//! Which requests the direct path takes: those whose headers are the plain ones well-behaved
//! clients send (a configured `Origin` and weighted `Accept` ranges among them). Any other goes
//! to rmcp's transport, which checks it — `Host`, `Origin`, `Accept`, content type, duplicated
//! or mismatched `Mcp-*` headers — and answers its refusals as before.

use http::{header, request::Parts};

use super::{Direct, STATELESS};
use crate::server::sessions::Negotiated;

impl Direct {
    /// Whether the request's headers are the plain ones every well-behaved client sends; any
    /// other goes to rmcp, which checks it (and answers its refusals) as before.
    pub(super) fn plain(&self, parts: &Parts, negotiated: &Negotiated) -> bool {
        let h = &parts.headers;
        // A client that sends no version header speaks the session's (as rmcp reads it).
        let version = match header_text(parts, "mcp-protocol-version") {
            Some(v) => v.is_none_or(|v| v == negotiated.version),
            None => false,
        };
        self.plain_media(parts)
            && version
            && negotiated.version.as_str() < STATELESS
            && !h.keys().any(|k| k.as_str().starts_with("mcp-param-"))
    }

    /// `plain_host`, and a JSON body from a client that takes JSON and SSE answers.
    pub(super) fn plain_media(&self, parts: &Parts) -> bool {
        let h = &parts.headers;
        let (mut json, mut sse) = (false, false);
        for value in h.get_all(header::ACCEPT) {
            // Quoted parameters, or a value that is not text: rmcp parses those.
            let Some(value) = value.to_str().ok().filter(|v| !v.contains('"')) else {
                return false;
            };
            for range in value.split(',') {
                let mut parts = range.split(';');
                let media = parts.next().unwrap_or_default().trim();
                // A range weighted zero is not accepted (as rmcp reads it).
                if parts.all(acceptable_weight) {
                    json |= media.eq_ignore_ascii_case("application/json");
                    sse |= media.eq_ignore_ascii_case("text/event-stream");
                }
            }
        }
        let json_body = h
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| {
                c.split(';')
                    .next()
                    .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json"))
            });
        self.plain_host(parts) && json && sse && json_body
    }

    /// Whether `Host` is one `/mcp` answers, and an `Origin` (a browser's) is absent or one of
    /// those configured, exactly; any other goes to rmcp, which checks it.
    pub(super) fn plain_host(&self, parts: &Parts) -> bool {
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(strip_port);
        let origin = match header_text(parts, header::ORIGIN.as_str()) {
            Some(None) => true,
            Some(Some(o)) => self.origins.iter().any(|a| a.eq_ignore_ascii_case(o)),
            None => false,
        };
        origin && host.is_some_and(|host| self.hosts.iter().any(|a| a.eq_ignore_ascii_case(host)))
    }
}

/// Whether an `Accept` range parameter leaves the range accepted: anything but a `q` of zero.
fn acceptable_weight(param: &str) -> bool {
    let Some((name, value)) = param.split_once('=') else {
        return true;
    };
    if !name.trim().eq_ignore_ascii_case("q") {
        return true;
    }
    let (whole, fraction) = value.trim().split_once('.').unwrap_or((value.trim(), ""));
    if fraction.len() > 3 || !fraction.bytes().all(|d| d.is_ascii_digit()) {
        return true;
    }
    whole != "0" || fraction.bytes().any(|d| d != b'0')
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
    fn ranges_weighted_zero_are_not_accepted() {
        for (param, ok) in [
            ("q=1", true),
            ("q=0.5", true),
            (" q = 0.001", true),
            ("level=1", true),
            ("q=0", false),
            ("q=0.", false),
            ("Q=0.000", false),
            // not a weight rmcp reads as zero
            ("q=0.0000", true),
        ] {
            assert_eq!(acceptable_weight(param), ok, "{param}");
        }
    }

    #[test]
    fn hosts_lose_their_port() {
        assert_eq!(strip_port("localhost:8080"), "localhost");
        assert_eq!(strip_port("127.0.0.1"), "127.0.0.1");
        assert_eq!(strip_port("[::1]:9"), "::1");
        assert_eq!(strip_port("gw.example"), "gw.example");
    }
}
