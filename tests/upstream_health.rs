//! Upstream health that tells the truth: a Streamable HTTP upstream that dies (a process
//! fedgate did not start, so no exit to see) is reported down in either era — a stateless-era
//! one by its listen stream, a handshake-era one by its pings — and calls to it are refused at
//! once as unavailable, not retried quietly into `upstream_failed`.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_http_upstream_is_reported_down_and_refused_at_once() {
    dead_upstream_is_reported_down("auto").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_handshake_era_http_upstream_is_reported_down_and_refused_at_once() {
    dead_upstream_is_reported_down("legacy").await;
}

/// An HTTP upstream of `era` is killed: `/readyz`, `/admin/upstreams` (what the console shows)
/// and `fedgate_upstream_up` all say so, with the reason in plain words, and calls are refused
/// at once; started again on its address, it comes back by itself and answers.
async fn dead_upstream_is_reported_down(era: &str) {
    let listen = format!("127.0.0.1:{}", free_port());
    let start = || {
        UrlProcess::start(&[
            "demo-upstream",
            "--faults",
            "--name",
            "web",
            "--http",
            &listen,
        ])
    };
    let demo = start();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("admin.token"), "health-admin-token").expect("token");
    let gw = Gateway::start(&format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"file:{}/admin.token\"\n\n\
         [upstreams.web]\nkind = \"http\"\nurl = \"{}\"\nera = \"{era}\"\nhealth_interval_ms = 200\n\
         restart = {{ base_ms = 200, max_ms = 400 }}\n",
        dir.path().display(),
        demo.url
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "web__echo", serde_json::json!({"text": "up"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: up");
    let admin = |gw: &Gateway| {
        let url = format!("{}/admin/upstreams", gw.admin.as_deref().expect("admin"));
        async move {
            reqwest::Client::new()
                .get(url)
                .bearer_auth("health-admin-token")
                .send()
                .await
                .expect("admin")
                .json::<serde_json::Value>()
                .await
                .expect("json")
        }
    };
    let up_metric = |gw: &Gateway| {
        let url = format!("{}/metrics", gw.base);
        async move {
            let text = reqwest::get(url)
                .await
                .expect("metrics")
                .text()
                .await
                .expect("text");
            text.lines()
                .find(|l| l.starts_with(r#"fedgate_upstream_up{upstream="web"}"#))
                .map(|l| l.ends_with(" 1"))
        }
    };
    assert_eq!(up_metric(&gw).await, Some(true));

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
    assert!(
        last.contains("stopped answering") || last.contains("connect"),
        "{ready}"
    );
    assert!(!last.contains("::"), "no Rust type names: {last}");
    let refused = call(&client, "web__echo", serde_json::json!({"text": "down"})).await;
    let text = format!("{refused:?}");
    assert!(
        text.contains("upstream_unavailable") || text.contains("unknown tool `web__echo`"),
        "refused at once as unavailable (or no longer listed): {text}"
    );
    let listed = admin(&gw).await;
    let web = listed
        .as_array()
        .and_then(|a| a.iter().find(|u| u["name"] == "web"))
        .cloned()
        .unwrap_or_else(|| listed["web"].clone());
    assert_ne!(web["phase"], "ready", "the admin API agrees: {listed}");
    assert_eq!(up_metric(&gw).await, Some(false), "the metric agrees");

    // Back on its address: fedgate reconnects by itself.
    let _again = start();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, ready) = gw.readyz().await;
        if ready["upstreams"]["web"]["phase"] == "ready" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not back 20 s after its server returned: {ready}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let r = call(&client, "web__echo", serde_json::json!({"text": "back"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: back");
    assert_eq!(up_metric(&gw).await, Some(true));
    assert!(
        !gw.stderr().contains("tap::Tap"),
        "the log names no Rust types: {}",
        gw.stderr()
    );
    client.cancel().await.unwrap();
}
