//! `fedgate tools` and `fedgate call`: run the upstreams in-process and look at them.

use super::CliError;
use std::{path::Path, process::ExitCode};

use rmcp::model::{CallToolRequestParams, JsonObject, ServerResult};
use tower::ServiceExt;

use super::serve::{load, settle_bound, stop};
use crate::{
    pipeline::{self, Call, Op},
    policy::identity::{Identity, IdentityKind},
    server::core::Core,
};

/// Longest description shown in the table.
const DESCRIPTION_CHARS: usize = 60;

pub async fn tools(path: &Path, json: bool) -> Result<ExitCode, CliError> {
    let snapshot = load(path)?;
    let core = Core::new(&snapshot).await?;
    core.start();
    let pool = core.pool();
    pool.wait_settled(settle_bound(&snapshot)).await;
    let catalog = pool.catalog();
    let not_ready: Vec<(String, crate::upstream::Status)> = pool
        .upstreams()
        .iter()
        .filter(|u| u.connection().is_none())
        .map(|u| (u.name().to_owned(), u.status()))
        .collect();
    let rows: Vec<(String, String, &'static str, String)> = catalog
        .tools
        .iter()
        .map(|t| {
            let route = catalog.tool(&t.name);
            let upstream = route
                .and_then(|r| r.member())
                .and_then(|i| catalog.upstream(i))
                .map(|u| u.name().to_owned())
                .unwrap_or_else(|| crate::names::OWN_NAMESPACE.to_owned());
            // What the tier will do with it, not what the server claims.
            let access = pipeline::verdict(pool, &t.name).unwrap_or("gateway");
            (
                t.name.to_string(),
                upstream,
                access,
                t.description.as_deref().unwrap_or("").to_owned(),
            )
        })
        .collect();
    if json {
        let tools: Vec<_> = rows
            .iter()
            .map(|(n, u, rw, d)| {
                let schema = catalog.tool_def(n).map(|t| t.input_schema.clone());
                serde_json::json!({
                    "name": n, "upstream": u, "access": rw, "description": d,
                    "input_schema": schema,
                    // Accepted by the function-calling APIs clients pass names to unchanged.
                    "portable": crate::names::unportable(n).is_none(),
                })
            })
            .collect();
        let failed: Vec<_> = not_ready
            .iter()
            .map(|(name, s)| {
                serde_json::json!({"upstream": name, "phase": s.phase, "last_error": s.last_error})
            })
            .collect();
        let forms: Vec<_> = catalog
            .portable_forms
            .iter()
            .map(|(original, exposed)| serde_json::json!({"name": exposed, "original": original}))
            .collect();
        let v = serde_json::json!({"tools": tools, "not_ready": failed, "portable_forms": forms});
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(4).max(4);
        let wu = rows.iter().map(|r| r.1.len()).max().unwrap_or(8).max(8);
        println!(
            "{:<w$}  {:<wu$}  {:<21}  DESCRIPTION",
            "NAME", "UPSTREAM", "ACCESS"
        );
        for (n, u, rw, d) in &rows {
            let d: String = d
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(DESCRIPTION_CHARS)
                .collect();
            println!("{n:<w$}  {u:<wu$}  {rw:<21}  {d}");
        }
    }
    // Names the portable rule changed, so the operator can tell which tool is which.
    for (original, exposed) in &catalog.portable_forms {
        eprintln!("note: `{original}` is exposed as `{exposed}` (portable names)");
    }
    let unportable: Vec<&str> = rows
        .iter()
        .map(|r| r.0.as_str())
        .filter(|n| crate::names::unportable(n).is_some())
        .collect();
    if let Some(first) = unportable.first() {
        eprintln!(
            "warning: {} of {} tool names (e.g. `{first}`) are refused by function-calling APIs \
             that accept only ^[a-zA-Z0-9_-]{{1,64}}$ (OpenAI, Anthropic); README, \"Names and \
             clients\", says which setting to use",
            unportable.len(),
            rows.len()
        );
    }
    for (name, s) in &not_ready {
        eprintln!(
            "upstream `{name}` not ready ({:?}): {}",
            s.phase,
            s.last_error.as_deref().unwrap_or_default()
        );
    }
    stop(pool).await;
    // A table that silently lacks an upstream's tools is not a success.
    Ok(if not_ready.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub async fn call(
    path: &Path,
    tool: &str,
    args: &str,
    bearer: Option<&str>,
) -> Result<ExitCode, CliError> {
    let args: JsonObject =
        serde_json::from_str(args).map_err(|e| format!("--args is not a JSON object: {e}"))?;
    let snapshot = load(path)?;
    let identity = match bearer {
        None => Identity::unrestricted("local", IdentityKind::Local),
        Some(token) => {
            let mut headers = http::HeaderMap::new();
            let value = http::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| "--bearer is not a valid header value".to_owned())?;
            headers.insert(http::header::AUTHORIZATION, value);
            snapshot
                .auth
                .authenticate(&headers)
                .map_err(CliError::from)?
        }
    };
    let core = Core::new(&snapshot).await?;
    core.start();
    let pool = core.pool();
    pool.wait_settled(settle_bound(&snapshot)).await;
    let stack = core.stack(None);
    let call = Call::without_session(
        Op::CallTool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args)),
        identity,
        0,
    );
    let result = stack.oneshot(call).await;
    stop(pool).await;
    match result {
        Ok(ServerResult::CallToolResult(r)) => {
            println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            // For the human at the terminal: what the plan says happened, and what to do.
            if let Some(plan) = r
                .meta
                .as_ref()
                .and_then(|m| m.0.get(crate::envelope::META_KEY))
                .filter(|_| r.is_error == Some(true))
            {
                eprintln!(
                    "fedgate: {}",
                    plan["instruction"]
                        .as_str()
                        .unwrap_or("the call was refused")
                );
                for hint in plan["errors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e["hint"].as_str())
                {
                    eprintln!("  hint: {hint}");
                }
            }
            Ok(if r.is_error == Some(true) {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Ok(other) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&other).unwrap_or_default()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(e.message.into_owned().into()),
    }
}
