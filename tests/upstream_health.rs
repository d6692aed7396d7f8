//! Upstream health that tells the truth: a Streamable HTTP upstream that dies (a process
//! fedgate did not start, so no exit to see) is reported down, and calls to it are refused at
//! once as unavailable — not retried quietly into `upstream_failed`.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_http_upstream_is_reported_down_and_refused_at_once() {
    let demo = HttpDemo::start("web", "--http");
    let gw = Gateway::start(&format!(
        "[upstreams.web]\nkind = \"http\"\nurl = \"{}\"\nrestart = {{ base_ms = 60000, max_ms = 60000 }}\n",
        demo.url
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "web__echo", serde_json::json!({"text": "up"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: up");

    drop(demo); // SIGKILL: the server is gone, nothing closes fedgate's side
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let ready = loop {
        let (status, ready) = gw.readyz().await;
        if ready["upstreams"]["web"]["phase"] != "ready" {
            assert_eq!(status, 503, "no upstream is ready: {ready}");
            break ready;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still reported ready 20 s after its server died: {ready}\n{}",
            gw.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let last = ready["upstreams"]["web"]["last_error"]
        .as_str()
        .unwrap_or_default();
    assert!(last.contains("stopped answering"), "{ready}");
    assert!(!last.contains("::"), "no Rust type names: {last}");
    let refused = call(&client, "web__echo", serde_json::json!({"text": "down"})).await;
    let text = format!("{refused:?}");
    assert!(
        text.contains("upstream_unavailable") || text.contains("unknown tool `web__echo`"),
        "refused at once as unavailable (or no longer listed): {text}"
    );
    assert!(
        !gw.stderr().contains("tap::Tap"),
        "the log names no Rust types: {}",
        gw.stderr()
    );
    client.cancel().await.unwrap();
}
