//! `--user-tokens FILE`: an upstream that acts as a person, like a SaaS MCP server with personal
//! tokens. FILE holds `person=token` lines, read per request (a test revokes a token at the
//! "provider" by rewriting it). Requests without `Authorization` pass (discovery: initialize,
//! lists); a bearer that is not in the file gets 401; `whoami` answers whose token came.

use std::path::{Path, PathBuf};

use rmcp::model::{CallToolResult, Tool};
use serde_json::json;

use super::tools::{text, tool};

pub(super) const TOOLS: [&str; 1] = ["whoami"];

pub(super) fn tools() -> Vec<Tool> {
    vec![tool(
        "whoami",
        "Who this server acts as: the person whose personal token came with the call",
        json!({}),
        true,
    )]
}

fn person_of(file: &Path, authorization: Option<&str>) -> Option<String> {
    let token = authorization?.strip_prefix("Bearer ")?.trim();
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .find(|(_, t)| t.trim() == token)
        .map(|(p, _)| p.trim().to_owned())
}

/// The gate: no credential, or one the file names.
pub(super) fn gate(file: PathBuf) -> crate::server::http::Gate {
    std::sync::Arc::new(move |headers: &http::HeaderMap| {
        match headers.get(http::header::AUTHORIZATION) {
            None => true,
            Some(v) => person_of(&file, v.to_str().ok()).is_some(),
        }
    })
}

pub(super) fn whoami(file: &Path, parts: Option<&http::request::Parts>) -> CallToolResult {
    let auth = parts
        .and_then(|p| p.headers.get(http::header::AUTHORIZATION))
        .and_then(|v| v.to_str().ok());
    match person_of(file, auth) {
        Some(p) => text(format!("acting as {p}")),
        None => {
            let mut r = text("no personal token came with this call");
            r.is_error = Some(true);
            r
        }
    }
}
