//! The per-upstream and per-tool circuit breakers through a real fedgate (the state machine itself, with
//! half-open probes and the ratio trigger, is tested on paused time in src/policy/breaker.rs).

use crate::common;

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn breaker_opens_on_failures_and_fails_fast() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}{}",
        stdio_upstream(
            "flaky",
            &[],
            "call_timeout_ms = 200\nbreaker = { consecutive_failures = 2, cooldown_ms = 600000, count_is_error = true }"
        ),
        stdio_upstream("steady", &[], "")
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    // A tool's own isError results (counted here) open that tool's breaker.
    for _ in 0..2 {
        let r = call(&client, "flaky__fail", serde_json::json!({}))
            .await
            .unwrap();
        assert_eq!(
            r.is_error,
            Some(true),
            "the isError result itself reaches the client"
        );
    }
    let err = call(&client, "flaky__fail", serde_json::json!({}))
        .await
        .refused();
    assert!(err.contains("\"code\":\"breaker_open\""), "{err}");
    // Timeouts say the upstream itself does not answer: its breaker opens, for every tool.
    for _ in 0..2 {
        let e = call(&client, "flaky__slow", serde_json::json!({"ms": 5000}))
            .refused_now()
            .await;
        assert!(e.contains("timeout"), "{e}");
    }
    let err = call(&client, "flaky__echo", serde_json::json!({"text": "x"}))
        .await
        .refused();
    assert!(err.contains("\"code\":\"breaker_open\""), "{err}");
    assert!(err.contains("circuit breaker is open"), "{err}");
    let (_, ready) = gw.readyz().await;
    let b = &ready["upstreams"]["flaky"]["breaker"];
    assert_eq!(b["state"], "open", "{ready}");
    assert!(b["retry_in_ms"].as_u64().unwrap() > 500_000, "{ready}");
    assert_eq!(ready["upstreams"]["steady"]["breaker"]["state"], "closed");
    // The other upstream is unaffected.
    let r = call(&client, "steady__echo", serde_json::json!({"text": "ok"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: ok");
    client.cancel().await.unwrap();
}

/// Only what says the upstream is unhealthy counts: a request at fault (invalid params) or a
/// tool's own `isError` leaves the breaker closed; server errors open it; the classes are
/// configurable; `/readyz` says `degraded` while a breaker is open.
#[tokio::test(flavor = "multi_thread")]
async fn only_what_says_the_upstream_is_unhealthy_opens_its_breaker_and_a_failing_tool_opens_its_own()
 {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}{}{}",
        stdio_upstream(
            "u",
            &[],
            "breaker = { consecutive_failures = 2, cooldown_ms = 600000, count = [\"transport\", \"timeout\", \"server_error\"] }"
        ),
        stdio_upstream(
            "w",
            &[],
            "breaker = { consecutive_failures = 2, cooldown_ms = 600000 }"
        ),
        stdio_upstream(
            "v",
            &[],
            "breaker = { consecutive_failures = 1, cooldown_ms = 600000, count = [\"transport\", \"timeout\"] }"
        ),
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    for _ in 0..5 {
        let e = call(&client, "u__reject", serde_json::json!({}))
            .refused_now()
            .await;
        assert!(e.contains("rejects these arguments"), "{e}");
        let r = call(&client, "u__fail", serde_json::json!({}))
            .await
            .unwrap();
        assert_eq!(r.is_error, Some(true));
    }
    let (_, ready) = gw.readyz().await;
    assert_eq!(
        ready["upstreams"]["u"]["breaker"]["state"], "closed",
        "{ready}"
    );
    assert_eq!(ready["status"], "ready");
    // A tool's internal errors open that tool's breaker, not the upstream's: its neighbours
    // answer, the tool fails fast, and readiness and the metrics say which tool.
    for _ in 0..2 {
        let e = call(&client, "w__error", serde_json::json!({}))
            .refused_now()
            .await;
        assert!(!e.contains("breaker_open"), "{e}");
    }
    let blocked = call(&client, "w__error", serde_json::json!({}))
        .refused_now()
        .await;
    assert!(
        blocked.contains("\"code\":\"breaker_open\"")
            && blocked.contains("tool `error` of upstream `w`"),
        "{blocked}"
    );
    let r = call(&client, "w__echo", serde_json::json!({"text": "still"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: still");
    let (status, ready) = gw.readyz().await;
    assert_eq!(
        (status, &ready["status"]),
        (200, &serde_json::json!("degraded"))
    );
    assert_eq!(
        ready["open_breakers"],
        serde_json::json!(["w/error"]),
        "{ready}"
    );
    assert_eq!(ready["upstreams"]["w"]["breaker"]["state"], "closed");
    assert_eq!(
        ready["upstreams"]["w"]["tool_breakers"]["error"]["state"], "open",
        "{ready}"
    );
    let metrics = reqwest::get(format!("{}/metrics", gw.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"fedgate_tool_breaker_state{tool="error",upstream="w"} 2"#),
        "{metrics}"
    );
    // `v` counts only transport failures and timeouts: its tool keeps being tried.
    for _ in 0..3 {
        let e = call(&client, "v__error", serde_json::json!({}))
            .refused_now()
            .await;
        assert!(!e.contains("breaker_open"), "{e}");
    }
    let r = call(&client, "v__echo", serde_json::json!({"text": "ok"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: ok");
    client.cancel().await.unwrap();
}

/// Retries of a read stay within its deadline: a read that used up its whole timeout is not
/// tried again.
#[tokio::test(flavor = "multi_thread")]
async fn retries_stay_within_the_calls_deadline() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream(
            "r",
            &[],
            "call_timeout_ms = 400\nretry = { attempts = 3, base_ms = 10, max_ms = 20, jitter_ms = 0 }"
        ),
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let calls =
        |r: rmcp::model::CallToolResult| r.structured_content.unwrap()["calls"].as_u64().unwrap();
    let before = calls(
        call(&client, "r__stats", serde_json::json!({}))
            .await
            .unwrap(),
    );
    let e = call(&client, "r__slow", serde_json::json!({"ms": 5000}))
        .refused_now()
        .await;
    assert!(e.contains("\"code\":\"timeout\""), "{e}");
    let after = calls(
        call(&client, "r__stats", serde_json::json!({}))
            .await
            .unwrap(),
    );
    assert_eq!(
        after - before,
        2,
        "one attempt of slow, then this stats call"
    );
    client.cancel().await.unwrap();
}
