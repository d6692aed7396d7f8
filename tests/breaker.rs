//! The per-upstream circuit breaker through a real fedgate (the state machine itself, with
//! half-open probes and the ratio trigger, is tested on paused time in src/policy/breaker.rs).

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn breaker_opens_on_failures_and_fails_fast() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}{}",
        stdio_upstream(
            "flaky",
            &[],
            "breaker = { consecutive_failures = 2, cooldown_ms = 600000, count_is_error = true }"
        ),
        stdio_upstream("steady", &[], "")
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    for _ in 0..2 {
        let r = call(&client, "flaky.fail", serde_json::json!({}))
            .await
            .unwrap();
        assert_eq!(
            r.is_error,
            Some(true),
            "the isError result itself reaches the client"
        );
    }
    let err = call(&client, "flaky.echo", serde_json::json!({"text": "x"}))
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
    let r = call(&client, "steady.echo", serde_json::json!({"text": "ok"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: ok");
    client.cancel().await.unwrap();
}
