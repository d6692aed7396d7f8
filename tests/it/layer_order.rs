//! The order of the policy layers, table-driven against a real fedgate: authentication before
//! everything (401), then resolve/authz (refusals look like unknown names), trust tier, rate
//! limit. Each row is a call made after the caller's rate budget is used up.

use crate::common;

use common::*;
use sha2::{Digest, Sha256};

const KEY: &str = "fgk_order_test_key";
const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");

fn config() -> String {
    format!(
        r#"[gateway]
tiers_dir = {TIERS:?}

[auth]
[[auth.api_keys]]
name = "agent"
sha256 = "{}"
roles = ["agent"]

[roles.agent]
tools = ["demo__echo", "demo__write_note", "demo__nothing"]

[[rate_limits]]
name = "per-identity"
by = ["identity"]
per_second = 1
burst = 2

{}"#,
        hex::encode(Sha256::digest(KEY.as_bytes())),
        stdio_upstream("demo", &[], "tier = \"medium\"")
    )
}

/// Status and body of a raw tools/call on an initialized session (or none without a key).
async fn raw_call(
    url: &str,
    key: Option<&str>,
    session: Option<&str>,
    tool: &str,
) -> (u16, String) {
    let mut rb = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .body(
            serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": tool, "arguments": {"key": "k", "value": "v", "text": "t"}}})
            .to_string(),
        );
    if let Some(k) = key {
        rb = rb.header("authorization", format!("Bearer {k}"));
    }
    if let Some(s) = session {
        rb = rb.header("mcp-session-id", s);
    }
    let r = rb.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn policy_layers_answer_in_order() {
    let gw = Gateway::start(&config());
    let client = connect_with_token(&gw.url, KEY, TestClient::new())
        .await
        .unwrap();
    // Use up the budget (burst 2, 1 per second).
    for _ in 0..2 {
        call(&client, "demo__echo", serde_json::json!({"text": "x"}))
            .await
            .unwrap();
    }
    let limited = call(&client, "demo__echo", serde_json::json!({"text": "x"}))
        .await
        .refused();
    assert!(
        limited.contains("\"code\":\"rate_limited\"") && limited.contains("retry_after_ms"),
        "{limited}"
    );

    // Open a raw session with the same identity for the table below.
    let init = reqwest::Client::new()
        .post(&gw.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {KEY}"))
        .body(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#)
        .send()
        .await
        .unwrap();
    let session = init
        .headers()
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();

    // (case, credentials, tool, expected HTTP status, expected text in the answer)
    let table: &[(&str, Option<&str>, &str, u16, &str)] = &[
        (
            "unauthenticated and over the limit",
            None,
            "demo__echo",
            401,
            "authentication required",
        ),
        (
            "unknown key and over the limit",
            Some("fgk_nope"),
            "demo__echo",
            401,
            "invalid",
        ),
        (
            "unknown tool and over the limit",
            Some(KEY),
            "demo__nothing",
            200,
            "unknown tool `demo__nothing`",
        ),
        (
            "not granted and over the limit",
            Some(KEY),
            "demo__crash",
            200,
            "unknown tool `demo__crash`",
        ),
        (
            "tier refuses the write and over the limit",
            Some(KEY),
            "demo__write_note",
            200,
            "write_not_declared",
        ),
        (
            "allowed but over the limit",
            Some(KEY),
            "demo__echo",
            200,
            "rate_limited",
        ),
    ];
    for (case, key, tool, status, expect) in table {
        let (got, body) = raw_call(&gw.url, *key, key.map(|_| session.as_str()), tool).await;
        assert_eq!(got, *status, "{case}: {body}");
        assert!(
            body.contains(expect),
            "{case}: expected `{expect}` in {body}"
        );
    }
    // Refusals for unknown and for hidden tools are indistinguishable.
    let (_, unknown) = raw_call(&gw.url, Some(KEY), Some(&session), "demo__nothing").await;
    let (_, hidden) = raw_call(&gw.url, Some(KEY), Some(&session), "demo__crash").await;
    // Only the JSON-RPC answers are compared; SSE event ids differ per stream.
    let answer = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.starts_with("data: {"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        answer(&without_correlation_ids(&unknown.replace("nothing", "X"))),
        answer(&without_correlation_ids(&hidden.replace("crash", "X")))
    );
    client.cancel().await.unwrap();
}

/// Ending a session: a real one answers 204 once; a forged id, or one already ended, is 404.
#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_session_that_is_not_one_is_not_found() {
    let gw = Gateway::start(&stdio_upstream("demo", &[], ""));
    let http = reqwest::Client::new();
    let session = gw.raw_session().await;
    let delete = |id: String| {
        let http = http.clone();
        let url = gw.url.clone();
        async move {
            http.delete(url)
                .header("mcp-session-id", id)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(delete("forged-session-id".into()).await, 404);
    assert_eq!(delete(session.clone()).await, 204);
    assert_eq!(delete(session).await, 404, "already ended");
}
