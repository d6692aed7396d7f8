//! `/readyz`: whether the gateway serves, and each upstream's state in detail.

use http::{Response, StatusCode};

use super::{http::Body, responses::json};
use crate::upstream::pool::Pool;

/// `/metrics`: the registry in Prometheus' text format.
pub(super) fn metrics(gauges: &super::parts::Gauges) -> Response<Body> {
    use http_body_util::BodyExt;
    let mut resp =
        Response::new(http_body_util::Full::new(bytes::Bytes::from(gauges.render())).boxed());
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    resp
}

/// Readiness with per-upstream detail; 200 while at least one upstream serves.
pub(super) fn readyz(pool: &Pool, redacted: bool) -> Response<Body> {
    let upstreams: serde_json::Map<String, serde_json::Value> = pool
        .upstreams()
        .iter()
        .map(|u| {
            let mut status = serde_json::to_value(u.status()).unwrap_or_default();
            let lists = u.lists();
            if let (Some(obj), false) = (status.as_object_mut(), lists.broken_schemas.is_empty()) {
                // Tools served without argument checks, and why.
                obj.insert(
                    "unchecked_tools".into(),
                    lists
                        .broken_schemas
                        .iter()
                        .map(|(tool, why)| serde_json::json!({ "tool": tool, "reason": why }))
                        .collect(),
                );
            }
            if redacted && let Some(obj) = status.as_object_mut() {
                for internal in ["last_error", "server", "unchecked_tools", "person_sessions"] {
                    obj.remove(internal);
                }
            }
            (u.name().to_owned(), status)
        })
        .collect();
    let catalog = pool.catalog();
    let ready = pool.ready();
    // Serving, but some upstream (or one of its tools, `upstream/tool`) fails fast behind its
    // open breaker.
    let mut open_breakers: Vec<String> = Vec::new();
    for (name, s) in &upstreams {
        if s["breaker"]["state"] == "open" {
            open_breakers.push(name.clone());
        }
        for (tool, b) in s["tool_breakers"].as_object().into_iter().flatten() {
            if b["state"] == "open" {
                open_breakers.push(format!("{name}/{tool}"));
            }
        }
    }
    let status = match (ready, open_breakers.is_empty()) {
        (false, _) => "not_ready",
        (true, true) => "ready",
        (true, false) => "degraded",
    };
    let body = serde_json::json!({
        "status": status,
        "open_breakers": open_breakers,
        "upstreams": upstreams,
        "tools": catalog.tools.len(),
        "conflicts": catalog.conflicts,
        "screened": catalog.screened,
        "portable_forms": catalog.portable_forms.iter()
            .map(|(original, name)| serde_json::json!({"name": name, "original": original}))
            .collect::<Vec<_>>(),
    });
    json(
        if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        &body,
    )
}

/// Whether the request's `Host` is one this gateway answers to: absent, an IP literal (no DNS
/// name an attacker controls), or a configured name; any port.
pub(super) fn host_allowed<B>(req: &http::Request<B>, allowed: &[String]) -> bool {
    let Some(host) = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
    else {
        return true;
    };
    if host.starts_with('[') {
        return host
            .split(']')
            .next()
            .is_some_and(|h| h[1..].parse::<std::net::Ipv6Addr>().is_ok());
    }
    let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || allowed
            .iter()
            .any(|a| a.eq_ignore_ascii_case(name) || a.eq_ignore_ascii_case(host))
}
