//! An upstream that acts as a person, like a SaaS MCP server: `--user-tokens FILE` takes
//! personal tokens (`person=token` lines, read per request, so a test revokes a token at the
//! "provider" by rewriting it); `--oauth-issuer URL` takes OAuth access tokens of that
//! authorization server, checked at its userinfo endpoint per request, and publishes RFC 9728
//! protected-resource metadata naming it. Requests without `Authorization` pass (discovery:
//! initialize, lists); a bearer nobody vouches for gets 401; `whoami` answers whose it was.

use super::DemoError;
use std::{path::PathBuf, sync::Arc, time::Duration};

use rmcp::model::{CallToolResult, Tool};
use serde_json::json;

use super::tools::{text, tool};
use crate::server::http::{Gate, PERSON_HEADER, Verdict};

pub(super) const TOOLS: [&str; 1] = ["whoami"];

pub(super) fn tools() -> Vec<Tool> {
    vec![tool(
        "whoami",
        "Who this server acts as: the person whose personal token came with the call",
        json!({}),
        true,
    )]
}

fn bearer(headers: &http::HeaderMap) -> Option<Option<String>> {
    let v = headers.get(http::header::AUTHORIZATION)?;
    Some(
        v.to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| t.trim().to_owned()),
    )
}

/// The gate of `--user-tokens`: no credential, or one the file names.
pub(super) fn token_gate(file: PathBuf) -> Gate {
    Arc::new(move |headers: &http::HeaderMap| {
        let verdict = match bearer(headers) {
            None => Verdict::Pass,
            Some(token) => std::fs::read_to_string(&file)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.split_once('='))
                .find(|(_, t)| Some(t.trim()) == token.as_deref())
                .map_or(Verdict::Refuse, |(p, _)| Verdict::As(p.trim().to_owned())),
        };
        Box::pin(async move { verdict })
    })
}

/// `--oauth-issuer`: the userinfo endpoint from the issuer's OpenID metadata, and the gate
/// that asks it whose each bearer is (and, with `profile`, whether it was granted the
/// `profile` scope: its userinfo then has the person's `name`).
pub(super) async fn oauth_gate(issuer: &str, profile: bool) -> Result<Gate, DemoError> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let meta: serde_json::Value = http
        .get(format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        ))
        .send()
        .await
        .map_err(|e| format!("demo upstream: the issuer is unreachable: {e}"))?
        .json()
        .await
        .map_err(|e| format!("demo upstream: the issuer's metadata: {e}"))?;
    let userinfo = meta["userinfo_endpoint"]
        .as_str()
        .ok_or("demo upstream: the issuer has no userinfo endpoint")?
        .to_owned();
    Ok(Arc::new(move |headers: &http::HeaderMap| {
        let token = bearer(headers);
        let http = http.clone();
        let userinfo = userinfo.clone();
        Box::pin(async move {
            let Some(token) = token else {
                return Verdict::Pass;
            };
            let Some(token) = token else {
                return Verdict::Refuse;
            };
            let Ok(resp) = http.get(&userinfo).bearer_auth(token).send().await else {
                return Verdict::Refuse;
            };
            if !resp.status().is_success() {
                return Verdict::Refuse;
            }
            let Ok(info) = resp.json::<serde_json::Value>().await else {
                return Verdict::Refuse;
            };
            if profile && info["name"].as_str().is_none() {
                return Verdict::NeedsScope("openid profile".into());
            }
            info["sub"]
                .as_str()
                .map(str::to_owned)
                .map_or(Verdict::Refuse, Verdict::As)
        })
    }))
}

/// RFC 9728 metadata for the server at `local` (its URL and document).
pub(super) fn resource_metadata(
    local: std::net::SocketAddr,
    issuer: &str,
) -> (String, serde_json::Value) {
    (
        format!("http://{local}/.well-known/oauth-protected-resource/mcp"),
        json!({
            "resource": format!("http://{local}/mcp"),
            "authorization_servers": [issuer.trim_end_matches('/')],
            "bearer_methods_supported": ["header"],
        }),
    )
}

pub(super) fn whoami(parts: Option<&http::request::Parts>) -> CallToolResult {
    let person = parts
        .and_then(|p| p.headers.get(PERSON_HEADER))
        .and_then(|v| v.to_str().ok());
    match person {
        Some(p) => text(format!("acting as {p}")),
        None => {
            let mut r = text("no personal token came with this call");
            r.is_error = Some(true);
            r
        }
    }
}
