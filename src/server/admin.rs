//! The admin API (F15): its own port (served by the same listener component as `/mcp`) and
//! bearer token. Upstream states, breaker reset,
//! held-back tool definitions and their acceptance, the effective config with secrets redacted,
//! and `/metrics`.

use crate::server::api_error::ApiError;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    approval::{Decision, operator::Operator},
    config::Snapshot,
    server::{parts::AdminParts, reload::Reloader},
    telemetry::audit::Audit,
};

use super::{http::Body, responses::json};

/// Largest admin request body (a flow run's inputs).
const MAX_ADMIN_BODY_BYTES: usize = 1 << 20;

#[derive(Clone)]
struct Admin {
    parts: AdminParts,
    reloader: Arc<Reloader>,
    token: Arc<str>,
    /// Plan decisions are audited like the calls they decide.
    audit: Option<Audit>,
    /// Ends the console's live streams.
    shutdown: CancellationToken,
    /// `[gateway] body_read_timeout_ms`, bound at start.
    body_timeout: std::time::Duration,
}

/// Serves the admin API until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    parts: AdminParts,
    reloader: Arc<Reloader>,
    audit: Option<Audit>,
    shutdown: CancellationToken,
) {
    // The token and the listener's bounds are bound at start, like the listener.
    let snapshot = reloader.current();
    let gateway = &snapshot.gateway;
    let Some((token, max_connections)) = snapshot
        .admin
        .as_ref()
        .map(|a| (Arc::<str>::from(a.token.expose()), a.max_connections))
    else {
        return;
    };
    let admin = Admin {
        parts,
        reloader,
        token,
        audit,
        shutdown: shutdown.clone(),
        body_timeout: gateway.body_read_timeout,
    };
    let limits = super::listener::Limits {
        name: "admin",
        max_connections,
        header_timeout: gateway.header_read_timeout,
        tls: None,
        tls_timeout: gateway.tls_handshake_timeout,
        refused: admin.parts.metrics.refused_on("admin"),
    };
    let handle = move |req, _cert_names| {
        let admin = admin.clone();
        async move {
            let mut resp = admin.route(req).await;
            super::console::harden(resp.headers_mut());
            resp
        }
    };
    super::listener::serve(listener, limits, handle, shutdown.clone(), shutdown).await;
}

impl Admin {
    fn authorized(&self, req: &Request<Incoming>) -> bool {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        bool::from(given.as_bytes().ct_eq(self.token.as_bytes()))
    }

    async fn route(self, req: Request<Incoming>) -> Response<Body> {
        if self.parts.feed.is_some()
            && let Some(page) = super::console::asset(req.method(), req.uri().path())
        {
            return page;
        }
        if !self.authorized(&req) {
            let mut r = ApiError::new(StatusCode::UNAUTHORIZED, "admin token required").response();
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static(r#"Bearer realm="fedgate-admin""#),
            );
            return r;
        }
        let (head, body) = req.into_parts();
        // A POST's body is read here, bounded in size and time like `/mcp`'s.
        let body = if head.method == Method::POST {
            match super::body::read_plain(body, MAX_ADMIN_BODY_BYTES, self.body_timeout).await {
                Ok(b) => b,
                Err(refused) => return refused,
            }
        } else {
            Bytes::new()
        };
        let method = head.method;
        let path = head.uri.path();
        let Some(decoded) = segments(path) else {
            return ApiError::bad_request("a path segment is not percent-encoded UTF-8").response();
        };
        let parts: Vec<&str> = decoded.iter().map(String::as_str).collect();
        let query = head.uri.query().unwrap_or("");
        if let Some(r) = super::console::route(
            self.parts.feed.as_ref(),
            &method,
            &parts,
            query,
            &self.shutdown,
        ) {
            return r;
        }
        if parts.starts_with(&["admin", "tools"]) {
            return super::admin_tools::route(&self.parts, &method, &parts, query, &body)
                .await
                .unwrap_or_else(|| ApiError::not_found("unknown").response());
        }
        if parts.starts_with(&["admin", "credentials"]) {
            return super::admin_credentials::route(&self.parts, &method, &parts)
                .await
                .unwrap_or_else(|| ApiError::not_found("unknown").response());
        }
        if parts.starts_with(&["admin", "flows"]) {
            return super::admin_flows::route(&self.parts, &method, &parts, query, &body)
                .await
                .unwrap_or_else(|| ApiError::not_found("unknown").response());
        }
        match (method, parts.as_slice()) {
            (Method::GET, ["admin", "upstreams"]) => {
                let ups: serde_json::Map<String, Value> = self
                    .parts
                    .pool
                    .upstreams()
                    .iter()
                    .map(|u| {
                        (
                            u.name().to_owned(),
                            serde_json::to_value(u.status()).unwrap_or_default(),
                        )
                    })
                    .collect();
                json(StatusCode::OK, &Value::Object(ups))
            }
            (Method::POST, ["admin", "upstreams", name, "breaker", "reset"]) => {
                match self
                    .parts
                    .pool
                    .upstreams()
                    .iter()
                    .find(|u| u.name() == *name)
                {
                    Some(u) => {
                        u.breaker.reset();
                        u.tool_breakers.reset();
                        tracing::info!(upstream = %name, "breaker reset by the admin API");
                        json(
                            StatusCode::OK,
                            &json!({"upstream": name, "breaker": "closed"}),
                        )
                    }
                    None => ApiError::not_found(format!("no upstream `{name}`")).response(),
                }
            }
            (Method::GET, ["admin", "pins"]) => {
                let catalog = self.parts.pool.catalog();
                let held: Vec<_> = catalog
                    .conflicts
                    .iter()
                    .filter(|c| c.fingerprint.is_some())
                    .collect();
                json(
                    StatusCode::OK,
                    &serde_json::to_value(held).unwrap_or_default(),
                )
            }
            (Method::POST, ["admin", "pins", "accept"]) => self.accept_pin(&body),
            (Method::GET, ["admin", "views"]) => {
                json(StatusCode::OK, &super::admin_views::views(&self.parts))
            }
            (Method::GET, ["admin", "stages"]) => {
                let (ok, v) = super::admin_stages::stages(&self.parts).await;
                let status = if ok {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                json(status, &v)
            }
            (Method::GET, ["admin", "config"]) => {
                json(StatusCode::OK, &redacted(&self.reloader.current()))
            }
            (Method::POST, ["admin", "reload"]) => match self.reloader.reload("admin API").await {
                Ok(applied) => json(
                    StatusCode::OK,
                    &json!({"reloaded": serde_json::to_value(applied).unwrap_or_default()}),
                ),
                Err(why) => ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "the new config is invalid; the running config stays",
                )
                .with("diagnostics", why.to_string())
                .response(),
            },
            (Method::GET, ["admin", "plans"]) => {
                // Every replica's, when they share Redis (this replica's while it is down).
                let shared = match crate::approval::shared::of(&self.parts.cluster) {
                    Some(sh) => sh.pending().await.ok(),
                    None => None,
                };
                let plans = shared.unwrap_or_else(|| self.parts.plans.pending());
                json(
                    StatusCode::OK,
                    &serde_json::to_value(plans).unwrap_or_default(),
                )
            }
            (Method::POST, ["admin", "plans", id, verb @ ("approve" | "deny")]) => {
                self.decide_plan(id, verb).await
            }
            (Method::GET, ["metrics"]) => {
                self.parts.gauges.refresh();
                Response::new(Full::new(Bytes::from(self.parts.metrics.render())).boxed())
            }
            _ => ApiError::unknown_endpoint(
                "unknown admin endpoint",
                &[
                    "GET /admin/upstreams",
                    "POST /admin/upstreams/NAME/breaker/reset",
                    "GET /admin/pins",
                    "POST /admin/pins/accept",
                    "GET /admin/config",
                    "GET /admin/views",
                    "GET /admin/stages",
                    "GET /admin/credentials",
                    "DELETE /admin/credentials/PERSON[/UPSTREAM]",
                    "GET /admin/plans",
                    "POST /admin/plans/ID/approve",
                    "POST /admin/plans/ID/deny",
                    "POST /admin/reload",
                    "GET /metrics",
                    "GET /admin/flows (and below)",
                    "GET /admin/calls (and below)",
                    "GET /admin/latency",
                    "GET /console",
                    "GET /admin/tools/identities",
                    "GET /admin/tools?as=NAME",
                    "POST /admin/tools/call",
                ],
            )
            .response(),
        }
    }

    /// An operator approves or denies a plan that names approvers (plans the caller approves
    /// itself are not the admin's to decide).
    async fn decide_plan(&self, id: &str, verb: &str) -> Response<Body> {
        let decision = if verb == "approve" {
            Decision::Approve
        } else {
            Decision::Deny
        };
        let shared = crate::approval::shared::of(&self.parts.cluster);
        let own = crate::server::admin_flows::operator().key();
        let operator = Operator {
            name: crate::approval::operator::OPERATOR,
            plans: &self.parts.plans,
            shared: shared.as_ref(),
            approve_any: self
                .reloader
                .current()
                .admin
                .as_ref()
                .is_none_or(|a| a.approve_plans),
            own: &own,
            metrics: Some(&self.parts.metrics),
            audit: self.audit.as_ref(),
        };
        match operator.decide(id, decision).await {
            Ok(plan) => json(
                StatusCode::OK,
                &json!({"plan": plan.id, "decision": if decision == Decision::Approve { "approved" } else { "denied" },
                        "tool": plan.tool, "state": plan.state_label()}),
            ),
            Err(e) => {
                let state = self.parts.plans.get(id).map(|p| p.state_label());
                let status = if e.is_conflict() {
                    StatusCode::CONFLICT
                } else {
                    StatusCode::NOT_FOUND
                };
                ApiError::new(status, e.to_string())
                    .with("code", e.code())
                    .with("state", state)
                    .response()
            }
        }
    }

    fn accept_pin(&self, body: &Bytes) -> Response<Body> {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let (Some(upstream), Some(tool), Some(fingerprint)) =
            (field("upstream"), field("tool"), field("fingerprint"))
        else {
            return ApiError::bad_request(
                "send {\"upstream\": …, \"tool\": …, \"fingerprint\": …} (see GET /admin/pins)",
            )
            .response();
        };
        let catalog = self.parts.pool.catalog();
        let Some(held) = catalog.conflicts.iter().find(|c| {
            c.upstream == upstream
                && c.item == tool
                && c.fingerprint.as_deref() == Some(fingerprint.as_str())
        }) else {
            return ApiError::conflict(
                "no held-back definition with that fingerprint (GET /admin/pins)",
            )
            .response();
        };
        // A flagged definition (a rug pull among them) is accepted only with its flags seen.
        if !held.flags.is_empty() && v.get("accept_flags") != Some(&Value::Bool(true)) {
            return ApiError::conflict(format!(
                "this definition is flagged by the guardrails: {}; read it, then accept it \
                     with \"accept_flags\": true",
                crate::guard::definitions::describe(&held.flags)
            ))
            .with(
                "flags",
                serde_json::to_value(&held.flags).unwrap_or_default(),
            )
            .response();
        }
        self.parts.pool.accept_pin(&upstream, &tool, &fingerprint);
        tracing::warn!(upstream = %upstream, tool = %tool, fingerprint = %fingerprint, "tool definition accepted by the admin API");
        json(
            StatusCode::OK,
            &json!({"accepted": {"upstream": upstream, "tool": tool, "fingerprint": fingerprint}}),
        )
    }
}

/// The effective configuration without secrets: references and names only.
/// A settings value as JSON (plain data: nothing in it fails to serialize).
fn shown<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or_default()
}

fn redacted(s: &Snapshot) -> Value {
    // The gateway and upstream settings serialize themselves: every field shows unless its
    // type says how (a secret cannot show in clear; see `secret::Configured`).
    json!({
        "gateway": shown(&s.gateway),
        "auth": {
            "open": s.auth.open,
            "anonymous": s.auth.anonymous.is_some(),
            "api_keys": s.auth.api_keys.iter().map(|k| k.name.clone()).collect::<Vec<_>>(),
            "jwt": s.auth.jwt.is_some(),
            "client_certs": s.auth.client_certs.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            "roles": s.auth.roles.0.keys().collect::<Vec<_>>(),
        },
        "rate_limits": s.rate_limits.iter().map(|r| json!({"name": r.name, "per_second": r.per_second.get(), "burst": r.burst.get()})).collect::<Vec<_>>(),
        "audit": s.audit.as_ref().map(|a| a.path.display().to_string()),
        "cluster": {
            "redis": s.cluster.redis.as_ref().map(|u| crate::secret::redact_url(u.expose())),
            "postgres": s.cluster.postgres.as_ref().map(|u| crate::secret::redact_url(u.expose())),
            "fail": format!("{:?}", s.cluster.fail).to_lowercase(),
            "timeout_ms": s.cluster.timeout.as_millis() as u64,
            "lease_ms": s.cluster.lease.as_millis() as u64,
            "shared": s.cluster.describe(),
        },
        "upstreams": s.upstreams.iter().map(|u| shown(&**u)).collect::<Vec<_>>(),
    })
}

/// The path's segments, each percent-decoded once (the console's Revoke button sends a JWT
/// person `eve@example.com` as `eve%40example.com`), so every route matches names as they are;
/// `None` when a segment decodes to something that is not UTF-8.
fn segments(path: &str) -> Option<Vec<String>> {
    path.trim_matches('/')
        .split('/')
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .ok()
                .map(std::borrow::Cow::into_owned)
        })
        .collect()
}
