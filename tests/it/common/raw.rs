//! Raw stateless-era JSON-RPC over HTTP (every header and `_meta` key is the test's own), and
//! the tasks extension's requests on top of it.

use serde_json::{Value, json};

pub const TASKS: &str = rmcp::model::TASKS_EXTENSION_ID;

pub fn sha(key: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(key.as_bytes()))
}

/// One stateless-era request as `token`; `tasks` declares the extension in its `_meta`.
/// `name` is the `Mcp-Name` header (tools/call and tasks/* need one). Returns the HTTP status
/// and the JSON-RPC message (the last event of an SSE answer).
pub async fn rpc(
    url: &str,
    token: Option<&str>,
    method: &str,
    name: Option<&str>,
    mut params: Value,
    tasks: bool,
) -> (u16, Value) {
    let caps = if tasks {
        json!({"extensions": {TASKS: {}}, "elicitation": {}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    let mut r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(n) = name {
        r = r.header("mcp-name", n);
    }
    if let Some(t) = token {
        r = r.header("authorization", format!("Bearer {t}"));
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let resp = r.json(&body).send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (status, last_message(&text))
}

/// The JSON body, or the last `data:` event of an SSE body.
pub fn last_message(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter(|d| !d.trim().is_empty())
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .next_back()
            .unwrap_or(Value::Null)
    })
}

pub fn code(v: &Value) -> i64 {
    v["error"]["code"].as_i64().unwrap_or_default()
}

pub async fn raw_call(url: &str, token: &str, tool: &str, args: Value) -> Value {
    let (_, v) = rpc(
        url,
        Some(token),
        "tools/call",
        Some(tool),
        json!({"name": tool, "arguments": args}),
        true,
    )
    .await;
    v
}

/// A `tasks/*` request for `handle` (`Mcp-Name` as given); the JSON-RPC answer.
pub async fn on_task(
    url: &str,
    token: Option<&str>,
    method: &str,
    name: Option<&str>,
    handle: &str,
    tasks: bool,
) -> Value {
    rpc(url, token, method, name, json!({"taskId": handle}), tasks)
        .await
        .1
}

pub async fn task_get(url: &str, token: &str, handle: &str) -> Value {
    on_task(url, Some(token), "tasks/get", Some(handle), handle, true).await
}

/// Polls `tasks/get` (the protocol's own way to learn a task's state) until `until` holds,
/// for at most ten seconds.
pub async fn task_poll(
    url: &str,
    token: &str,
    handle: &str,
    until: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let v = task_get(url, token, handle).await;
        if until(&v["result"]) || tokio::time::Instant::now() > deadline {
            return v["result"].clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
