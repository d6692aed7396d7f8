//! What `/mcp` checks of a request before anything reads its session: `Host` and `Origin`
//! (DNS rebinding), the HTTP method, `Accept` and `Content-Type`, and — for a body the direct
//! path did not take — whether it is a JSON-RPC message at all. The rules are rmcp's
//! transport's, read the same way (its host and origin matching, `:*` ports, weighted `Accept`
//! ranges with quoted parameters), so a request refused here is one rmcp refused; the answers
//! are fedgate's wire errors (a JSON-RPC error object with the status rmcp chose). Once a request
//! passed, nothing downstream needs to look at these headers again.

use http::{HeaderMap, Method, Uri, header, request::Parts};
use rmcp::model::ClientJsonRpcMessage;

use crate::server::wire_error::WireError;

/// The methods `/mcp` serves (both eras: sessions are GET streams and DELETE).
pub(in crate::server) const ALLOWED_METHODS: &str = "GET, POST, DELETE";

/// `Host` and `Origin` values `/mcp` answers, parsed once.
#[derive(Debug)]
pub(in crate::server) struct Gate {
    hosts: Vec<Authority>,
    origins: Vec<AllowedOrigin>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    Null,
    Tuple {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AllowedPort {
    /// `scheme://host:*`
    Any,
    /// No port written: any port (rmcp's reading, which it warns will narrow).
    Unspecified,
    Exact(u16),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum AllowedOrigin {
    Null,
    Tuple {
        scheme: String,
        host: String,
        port: AllowedPort,
    },
}

impl Gate {
    /// From the configured `Host` names (with or without port) and origins (`:*` for any port);
    /// entries that parse as neither are ignored, as rmcp ignores them.
    pub(in crate::server) fn new(hosts: &[String], origins: &[String]) -> Self {
        Self {
            hosts: hosts.iter().filter_map(|h| allowed_authority(h)).collect(),
            origins: origins.iter().filter_map(|o| allowed_origin(o)).collect(),
        }
    }

    /// The header checks, in rmcp's order: `Host`, `Origin`, method, then the media types a
    /// POST or GET must name.
    pub(in crate::server) fn check(&self, parts: &Parts) -> Result<(), WireError> {
        self.check_host(&parts.uri, &parts.headers)?;
        self.check_origin(&parts.headers)?;
        let h = &parts.headers;
        match parts.method {
            Method::POST => {
                let (mut json, mut sse) = (false, false);
                for essence in accepted_media_types(h) {
                    json |= essence.eq_ignore_ascii_case("application/json");
                    sse |= essence.eq_ignore_ascii_case("text/event-stream");
                }
                if !json || !sse {
                    return Err(WireError::NotAcceptable {
                        needs: "both application/json and text/event-stream",
                    });
                }
                if !json_content(h) {
                    return Err(WireError::NotJsonContent);
                }
            }
            Method::GET => {
                if !accepted_media_types(h).any(|e| e.eq_ignore_ascii_case("text/event-stream")) {
                    return Err(WireError::NotAcceptable {
                        needs: "text/event-stream",
                    });
                }
            }
            Method::DELETE => {}
            _ => return Err(WireError::MethodNotAllowed),
        }
        Ok(())
    }

    fn check_host(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), WireError> {
        let host = match headers.get(header::HOST) {
            Some(v) => {
                let text = v.to_str().map_err(|_| WireError::BadHost {
                    why: "not valid text",
                })?;
                let a = http::uri::Authority::try_from(text).map_err(|_| WireError::BadHost {
                    why: "not a host name with an optional port",
                })?;
                authority(a.host(), a.port_u16())
            }
            None => {
                let a = uri
                    .authority()
                    .ok_or(WireError::BadHost { why: "missing" })?;
                authority(a.host(), a.port_u16())
            }
        };
        let allowed = self
            .hosts
            .iter()
            .any(|a| a.host == host.host && a.port.is_none_or(|port| host.port == Some(port)));
        if allowed {
            Ok(())
        } else {
            Err(WireError::HostNotAllowed)
        }
    }

    fn check_origin(&self, headers: &HeaderMap) -> Result<(), WireError> {
        let Some(value) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = value
            .to_str()
            .ok()
            .and_then(origin)
            .ok_or(WireError::OriginNotAllowed { malformed: true })?;
        let allowed = self.origins.iter().any(|a| match (a, &origin) {
            (AllowedOrigin::Null, Origin::Null) => true,
            (
                AllowedOrigin::Tuple { scheme, host, port },
                Origin::Tuple {
                    scheme: s,
                    host: h,
                    port: p,
                },
            ) => {
                scheme == s
                    && host == h
                    && match port {
                        AllowedPort::Any | AllowedPort::Unspecified => true,
                        AllowedPort::Exact(a) => p.or_else(|| default_port(s)) == Some(*a),
                    }
            }
            _ => false,
        });
        if allowed {
            Ok(())
        } else {
            Err(WireError::OriginNotAllowed { malformed: false })
        }
    }
}

/// Whether a body the direct path did not take is a JSON-RPC message rmcp can read; if not, the
/// refusal: -32700 for a body that is not JSON, -32600 for JSON that is no JSON-RPC 2.0
/// message (a batch, a bare value, a wrong `jsonrpc`). Read with rmcp's own message type, so
/// what passes is exactly what its transport accepts.
pub(in crate::server) fn decodable(body: &[u8]) -> Result<(), WireError> {
    let Err(e) = serde_json::from_slice::<ClientJsonRpcMessage>(body) else {
        return Ok(());
    };
    let why = e.to_string();
    if why.contains("unrecognized JSON-RPC message") {
        Err(WireError::NotJsonRpc)
    } else {
        Err(WireError::Parse { why })
    }
}

/// Whether `Content-Type` names JSON (parameters such as a charset aside).
fn json_content(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| {
            let essence = c.split_once(';').map_or(c, |(e, _)| e);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// The media ranges of every `Accept` header, without those weighted zero.
fn accepted_media_types(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| split_unquoted(v, ','))
        .filter_map(|range| {
            let mut params = split_unquoted(range, ';');
            let essence = params.next()?.trim();
            params.all(acceptable_weight).then_some(essence)
        })
}

/// Splits at `delimiter` outside quoted strings (a quoted-pair does not end one).
fn split_unquoted(value: &str, delimiter: char) -> impl Iterator<Item = &str> {
    let (mut quoted, mut escaped) = (false, false);
    value.split(move |c| {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if !quoted && c == delimiter {
            return true;
        }
        false
    })
}

/// Whether an `Accept` range parameter leaves the range accepted: anything but a `q` of zero (a
/// weight that is not RFC 9110's grammar is ignored, so the range stays).
fn acceptable_weight(param: &str) -> bool {
    let Some((name, value)) = param.split_once('=') else {
        return true;
    };
    if !name.trim().eq_ignore_ascii_case("q") {
        return true;
    }
    let value = value.trim();
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|d| d.is_ascii_digit()) {
        return true;
    }
    whole != "0" || fraction.bytes().any(|d| d != b'0')
}

fn authority(host: &str, port: Option<u16>) -> Authority {
    Authority {
        host: host.trim_matches(['[', ']']).to_ascii_lowercase(),
        port,
    }
}

fn allowed_authority(allowed: &str) -> Option<Authority> {
    let allowed = allowed.trim();
    if allowed.is_empty() {
        return None;
    }
    Some(match http::uri::Authority::try_from(allowed) {
        Ok(a) => authority(a.host(), a.port_u16()),
        Err(_) => authority(allowed, None),
    })
}

fn origin(value: &str) -> Option<Origin> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.eq_ignore_ascii_case("null") {
        return Some(Origin::Null);
    }
    let uri = Uri::try_from(value).ok()?;
    let a = uri.authority()?;
    let host = authority(a.host(), a.port_u16());
    Some(Origin::Tuple {
        scheme: uri.scheme_str()?.to_ascii_lowercase(),
        host: host.host,
        port: host.port,
    })
}

fn allowed_origin(value: &str) -> Option<AllowedOrigin> {
    let value = value.trim();
    if let Some(base) = value.strip_suffix(":*") {
        let Origin::Tuple {
            scheme,
            host,
            port: None,
        } = origin(base)?
        else {
            return None;
        };
        return Some(AllowedOrigin::Tuple {
            scheme,
            host,
            port: AllowedPort::Any,
        });
    }
    Some(match origin(value)? {
        Origin::Null => AllowedOrigin::Null,
        Origin::Tuple { scheme, host, port } => AllowedOrigin::Tuple {
            scheme,
            host,
            port: port.map_or(AllowedPort::Unspecified, AllowedPort::Exact),
        },
    })
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
