//! Two fedgate replicas behind a round-robin proxy that sends each HTTP request to the next
//! replica: stateless-era clients need no affinity, handshake-era sessions move between
//! replicas (sealed session ids, a shared `state_key`), and a parked input-required call is
//! refused with a clear message on the replica that does not hold it.

use crate::common;

use common::{round_robin::RoundRobin, *};
use rmcp::model::{CallToolRequestParams, CallToolResponse, InputResponses};

const KEY: &str = "replica-state-key-test-only-0123456789";

fn replica(key: &str) -> Gateway {
    Gateway::start_env(
        &format!(
            "[gateway]\nstate_key = \"env:FG_STATE_KEY\"\n\n{}",
            stdio_upstream("demo", &[], "era = \"legacy\"")
        ),
        &[("FG_STATE_KEY", key)],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn handshake_era_sessions_move_between_replicas() {
    let (a, b) = (replica(KEY), replica(KEY));
    let (rr, url) = RoundRobin::start(vec![a.base.clone(), b.base.clone()]).await;
    let client = connect_legacy(&url, TestClient::new()).await;
    for i in 0..6 {
        let r = call(
            &client,
            "demo__echo",
            serde_json::json!({"text": i.to_string()}),
        )
        .await
        .unwrap();
        assert_eq!(first_text(&r), format!("echo: {i}"));
    }
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "demo__echo"));
    let hits = rr.hits.lock().clone();
    assert!(
        hits.contains(&0) && hits.contains(&1),
        "both replicas served the session: {hits:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_id_opens_only_with_the_same_key_and_never_after_delete() {
    let (a, b, other) = (
        replica(KEY),
        replica(KEY),
        replica("another-key-test-only-0123456789abcdef"),
    );
    let http = reqwest::Client::new();
    let post = |base: &str, sid: Option<&str>, body: serde_json::Value| {
        let mut r = http
            .post(format!("{base}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(s) = sid {
            r = r.header("mcp-session-id", s);
        }
        r.json(&body).send()
    };
    let init = post(
        &a.base,
        None,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
    )
    .await
    .unwrap();
    assert_eq!(init.status(), 200);
    let sid = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let list = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    // The session was never on `b`: it is restored from the sealed id.
    let r = post(&b.base, Some(&sid), list.clone()).await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert!(r.text().await.unwrap().contains("demo__echo"));
    // A replica with another key cannot open it.
    let r = post(&other.base, Some(&sid), list.clone()).await.unwrap();
    assert_eq!(r.status(), 404);
    // Ended on `b`: refused there from now on.
    let r = http
        .delete(format!("{}/mcp", b.base))
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "SDKs expect 200 or 204 for a DELETE");
    let r = post(&b.base, Some(&sid), list).await.unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn stateless_clients_need_no_affinity_and_parked_calls_say_where_they_are() {
    let (a, b) = (replica(KEY), replica(KEY));
    let (rr, url) = RoundRobin::start(vec![a.base.clone(), b.base.clone()]).await;
    let client = connect_modern(&url, TestClient::new()).await;
    for i in 0..4 {
        let r = call(
            &client,
            "demo__echo",
            serde_json::json!({"text": i.to_string()}),
        )
        .await
        .unwrap();
        assert_eq!(first_text(&r), format!("echo: {i}"));
    }
    // The input-required round lands on one replica, the retry on the other.
    let first = client
        .peer()
        .call_tool_once(CallToolRequestParams::new("demo__ask"))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(ir) = first else {
        panic!("expected input_required, got {first:?}");
    };
    let before = rr.hits.lock().len();
    let mut answers = InputResponses::new();
    answers.insert(
        "fedgate-1".into(),
        serde_json::json!({"action": "accept", "content": {"name": "x"}}),
    );
    let err = client
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("demo__ask")
                .with_input_responses(answers)
                .with_request_state(ir.request_state.unwrap()),
        )
        .await
        .unwrap_err()
        .to_string();
    let hits = rr.hits.lock().clone();
    assert_ne!(
        hits[before - 1],
        hits[before],
        "the retry went to the other replica"
    );
    assert!(err.contains("another fedgate replica"), "{err}");
}
