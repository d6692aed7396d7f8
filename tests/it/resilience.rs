//! Timeouts, retries and idempotency (F9) through a real fedgate and a demo upstream that
//! counts its calls and crashes on demand.

use crate::common;

use common::*;
use rmcp::model::{CallToolRequestParams, MetaObject, RequestMetaObject};

fn with_key(tool: &str, args: serde_json::Value, key: &str) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(tool.to_owned()).with_arguments(common::args(args));
    let mut meta = serde_json::Map::new();
    meta.insert("idempotencyKey".into(), key.into());
    p.meta = Some(RequestMetaObject(MetaObject(meta)));
    p
}

async fn calls(client: &Client) -> u64 {
    let r = call(client, "demo__stats", serde_json::json!({}))
        .await
        .unwrap();
    r.structured_content.unwrap()["calls"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_are_retried_writes_are_not_and_are_reported_uncertain() {
    // Every demo process serves one tool call, then crashes on the next.
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream(
            "demo",
            &["--crash-after", "1"],
            "era = \"legacy\"\nrestart = { base_ms = 10, max_ms = 20, max_restarts = 50 }\n\
             retry = { attempts = 6, base_ms = 100, max_ms = 400, jitter_ms = 20 }"
        )
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let first = call(&client, "demo__pid", serde_json::json!({}))
        .await
        .unwrap();
    // The next read crashes that process; fedgate retries it on the restarted one.
    let second = call(&client, "demo__pid", serde_json::json!({}))
        .await
        .unwrap();
    assert_ne!(
        first_text(&first),
        first_text(&second),
        "answered by a new process after a retry"
    );
    // That process has served its one call: a write now crashes it and is not retried.
    let err = call(
        &client,
        "demo__write_note",
        serde_json::json!({"key": "k", "value": "v"}),
    )
    .await
    .refused();
    assert!(
        err.contains("\"code\":\"outcome_uncertain\"")
            && err.contains("\"recoverable\":false")
            && err.contains("check its effect"),
        "{err}"
    );
    assert!(
        gw.stderr()
            .matches("retrying a call that is safe to repeat")
            .count()
            >= 1
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repeated_idempotency_key_returns_the_recorded_result() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}{}",
        stdio_upstream("demo", &[], ""),
        stdio_upstream("other", &[], "")
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let before = calls(&client).await;
    let args = serde_json::json!({"key": "order-1", "value": "paid"});
    let a = client
        .peer()
        .call_tool(with_key("demo__write_note", args.clone(), "idem-1"))
        .await
        .unwrap();
    let b = client
        .peer()
        .call_tool(with_key("demo__write_note", args.clone(), "idem-1"))
        .await
        .unwrap();
    assert_eq!(first_text(&a), "stored order-1");
    assert_eq!(first_text(&a), first_text(&b));
    let after = calls(&client).await;
    // The upstream saw: stats, one write_note, stats.
    assert_eq!(
        after - before,
        2,
        "the repeated write never reached the upstream"
    );
    let conflict = client
        .peer()
        .call_tool(with_key(
            "demo__write_note",
            serde_json::json!({"key": "order-1", "value": "refunded"}),
            "idem-1",
        ))
        .await
        .refused();
    assert!(conflict.contains("idempotency_conflict"), "{conflict}");
    // The same key for the same tool name on another upstream is another call.
    let elsewhere = client
        .peer()
        .call_tool(with_key("other__write_note", args.clone(), "idem-1"))
        .await
        .unwrap();
    assert_eq!(first_text(&elsewhere), "stored order-1");
    let stats = client
        .peer()
        .call_tool(rmcp::model::CallToolRequestParams::new("other__stats"))
        .await
        .unwrap();
    assert_eq!(
        stats.structured_content.unwrap()["calls"],
        2,
        "other__write_note ran on its own upstream"
    );
    // A new key is a new call.
    client
        .peer()
        .call_tool(with_key("demo__write_note", args, "idem-2"))
        .await
        .unwrap();
    assert_eq!(calls(&client).await - after, 2);
    client.cancel().await.unwrap();
}

/// Duplicates with one idempotency key that arrive together run once: the second waits for the
/// first's answer.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_duplicates_of_a_key_run_once() {
    let gw = Gateway::start(&format!("[gateway]\n{}", stdio_upstream("demo", &[], "")));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let before = calls(&client).await;
    let slow = || {
        client.peer().call_tool(with_key(
            "demo__slow",
            serde_json::json!({"ms": 400}),
            "dup-1",
        ))
    };
    let (a, b) = tokio::join!(slow(), slow());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(first_text(&a), first_text(&b));
    assert_eq!(calls(&client).await - before, 2, "stats, one slow, stats");
    client.cancel().await.unwrap();
}
