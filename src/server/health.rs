//! `/readyz`: whether the gateway serves, and each upstream's state in detail.

use http::{Response, StatusCode};

use super::http::{Body, json};
use crate::upstream::pool::Pool;

/// Readiness with per-upstream detail; 200 while at least one upstream serves.
pub(super) fn readyz(pool: &Pool) -> Response<Body> {
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
            (u.name().to_owned(), status)
        })
        .collect();
    let catalog = pool.catalog();
    let ready = pool.ready();
    // Serving, but some upstream fails fast behind its open breaker.
    let open_breakers: Vec<&String> = upstreams
        .iter()
        .filter(|(_, s)| s["breaker"]["state"] == "open")
        .map(|(name, _)| name)
        .collect();
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
