//! Upstream faults: failing to start, crashing mid-call, and fedgate itself being killed.

use crate::common;

use std::{process::Command, time::Duration};

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_upstream_does_not_block_the_others() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}{}",
        stdio_upstream("good", &[], ""),
        stdio_upstream(
            "bad",
            &["--fail-start"],
            "restart = { max_restarts = 1, base_ms = 10, max_ms = 20 }"
        )
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "good__echo"));
    assert!(!tools.iter().any(|t| t.name.starts_with("bad.")));
    let (status, ready) = gw.readyz().await;
    assert_eq!(status, 200, "one ready upstream keeps the gateway ready");
    assert_eq!(ready["upstreams"]["good"]["phase"], "ready");
    let bad = &ready["upstreams"]["bad"];
    assert_ne!(bad["phase"], "ready", "{ready}");
    assert!(
        bad["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{ready}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_upstream_does_not_delay_the_others() {
    // The slow one needs 30 s but may take only 1 s: the gateway is ready long before 30 s.
    let started = tokio::time::Instant::now();
    let gw = Gateway::start(&format!(
        "[gateway]\n{}{}",
        stdio_upstream("fast", &[], ""),
        stdio_upstream(
            "slow",
            &["--start-delay-ms", "30000"],
            "startup_timeout_ms = 1000\nrestart = { max_restarts = 0 }"
        )
    ));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "ready line came after the slow upstream"
    );
    let (_, ready) = gw.readyz().await;
    assert_eq!(ready["upstreams"]["fast"]["phase"], "ready");
    assert_ne!(ready["upstreams"]["slow"]["phase"], "ready");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_mid_call_fails_fast_and_the_upstream_comes_back() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream(
            "demo",
            &[],
            "era = \"legacy\"\nrestart = { base_ms = 10, max_ms = 50 }"
        )
    ));
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    let pid_before = first_text(
        &call(&client, "demo__pid", serde_json::json!({}))
            .await
            .unwrap(),
    );
    let changes = *seen.tool_changes.lock();
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        call(&client, "demo__crash", serde_json::json!({})),
    )
    .await
    .expect("the caller gets an answer, not a hang")
    .refused();
    assert!(err.contains("upstream `demo`"), "{err}");
    // The tools vanish and come back: two list_changed notifications.
    wait_for(&seen.tools_changed, "tools to come back", || {
        *seen.tool_changes.lock() >= changes + 2
    })
    .await;
    let pid_after = first_text(
        &call(&client, "demo__pid", serde_json::json!({}))
            .await
            .unwrap(),
    );
    assert_ne!(pid_before, pid_after, "a new process serves");
    assert!(
        !alive(pid_before.parse().unwrap()),
        "the crashed child is reaped"
    );
    let (_, ready) = gw.readyz().await;
    assert!(ready["upstreams"]["demo"]["restarts"].as_u64().unwrap() >= 1);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_to_a_down_upstream_say_so() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}{}",
        stdio_upstream("demo", &[], ""),
        stdio_upstream(
            "gone",
            &["--crash-after", "0"],
            "restart = { max_restarts = 0 }"
        )
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let err = call(&client, "gone__echo", serde_json::json!({"text": "x"}))
        .await
        .refused();
    assert!(err.contains("upstream `gone`"), "{err}");
    // After it died it is no longer listed; the other still serves.
    let (_, ready) = gw.readyz().await;
    assert_eq!(ready["upstreams"]["gone"]["phase"], "failed", "{ready}");
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(!tools.iter().any(|t| t.name.starts_with("gone.")));
    let err = call(&client, "gone__echo", serde_json::json!({}))
        .await
        .refused();
    // Still its namespace: the caller learns which upstream is down and in what state, not
    // that the tool does not exist.
    assert!(
        err.contains("upstream `gone` is unavailable (Failed)"),
        "{err}"
    );
    assert_eq!(
        first_text(
            &call(&client, "demo__echo", serde_json::json!({"text": "ok"}))
                .await
                .unwrap()
        ),
        "echo: ok"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn no_child_survives_sigkill_of_fedgate() {
    let mut gw = Gateway::start(&format!(
        "[gateway]\n{}{}",
        stdio_upstream("a", &[], ""),
        stdio_upstream("b", &[], "")
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let mut pids = Vec::new();
    for u in ["a", "b"] {
        let pid: u32 = first_text(
            &call(&client, &format!("{u}__pid"), serde_json::json!({}))
                .await
                .unwrap(),
        )
        .parse()
        .unwrap();
        assert!(alive(pid));
        pids.push(pid);
    }
    Command::new("kill")
        .args(["-KILL", &gw.pid().to_string()])
        .status()
        .unwrap();
    gw.child.wait().unwrap();
    // Nothing signals a process's end to a non-parent; check for a bounded time.
    let gone = tokio::time::timeout(Duration::from_secs(10), async {
        while pids.iter().any(|p| alive(*p)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "children {pids:?} outlived fedgate");
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_the_child_mid_call_gives_a_clear_error_then_recovers() {
    // Retries off: a read would otherwise be repeated on the restarted process (tested in
    // resilience.rs); here the caller must see the failure itself.
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream(
            "demo",
            &[],
            "era = \"legacy\"\nrestart = { base_ms = 10, max_ms = 50 }\nretry = { attempts = 1 }"
        )
    ));
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    let pid = first_text(
        &call(&client, "demo__pid", serde_json::json!({}))
            .await
            .unwrap(),
    );
    let changes = *seen.tool_changes.lock();
    let slow = call(&client, "demo__slow", serde_json::json!({"ms": 60000}));
    let kill = async {
        // The call is in flight once the upstream counted it.
        loop {
            let r = call(&client, "demo__stats", serde_json::json!({}))
                .await
                .unwrap();
            if r.structured_content.unwrap()["calls"].as_u64().unwrap() >= 3 {
                break;
            }
        }
        Command::new("kill").args(["-KILL", &pid]).status().unwrap();
    };
    let (result, ()) =
        tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(slow, kill) })
            .await
            .expect("the in-flight call ends, it does not hang");
    let err = result.refused();
    assert!(
        err.contains("upstream `demo` closed the connection during the call"),
        "{err}"
    );
    wait_for(&seen.tools_changed, "tools to come back", || {
        *seen.tool_changes.lock() >= changes + 2
    })
    .await;
    let again = first_text(
        &call(&client, "demo__echo", serde_json::json!({"text": "back"}))
            .await
            .unwrap(),
    );
    assert_eq!(again, "echo: back");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_requests_get_errors_and_the_gateway_keeps_serving() {
    let gw = Gateway::start(&format!("[gateway]\n{}", stdio_upstream("demo", &[], "")));
    let http = reqwest::Client::new();
    let post = |body: String| {
        http.post(&gw.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    for bad in [
        "{not json".to_owned(),
        "[]".to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":42}}"#.to_owned(),
        format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000)),
        "x".repeat(5 * 1024 * 1024),
    ] {
        let status = post(bad).await.unwrap().status();
        assert!(status.is_client_error(), "bad input got {status}");
    }
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(
        &client,
        "demo__echo",
        serde_json::json!({"text": "still here"}),
    )
    .await
    .unwrap();
    assert_eq!(first_text(&r), "echo: still here");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_calls_in_flight_then_exits_cleanly() {
    let mut gw = Gateway::start(&format!(
        "[gateway]\nshutdown_grace_ms = 20000\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let child: u32 = first_text(
        &call(&client, "demo__pid", serde_json::json!({}))
            .await
            .unwrap(),
    )
    .parse()
    .unwrap();
    let slow = call(&client, "demo__slow", serde_json::json!({"ms": 1500}));
    let term = async {
        // Signal once the upstream is working on the call: it has counted pid, slow and every
        // stats call so far.
        let mut stats_calls = 0;
        loop {
            let r = call(&client, "demo__stats", serde_json::json!({}))
                .await
                .unwrap();
            stats_calls += 1;
            if r.structured_content.unwrap()["calls"].as_u64().unwrap() >= 2 + stats_calls {
                break;
            }
        }
        Command::new("kill")
            .args(["-TERM", &gw.pid().to_string()])
            .status()
            .unwrap();
    };
    let (result, ()) = tokio::join!(slow, term);
    assert_eq!(
        first_text(
            &result
                .unwrap_or_else(|e| panic!("the call in flight completes: {e}\n{}", gw.stderr()))
        ),
        "slept 1500"
    );
    let status = tokio::task::spawn_blocking(move || {
        let s = gw.child.wait().unwrap();
        (s, gw)
    })
    .await
    .unwrap()
    .0;
    assert!(
        status.success(),
        "exit code 0 after a drained shutdown: {status:?}"
    );
    assert!(!alive(child), "the upstream process is stopped");
}

/// A stdio server that dies at start says why on stderr; its exit status and last line are the
/// upstream's `last_error` in `/readyz`, not only a handshake error.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_dies_at_start_says_why_in_readyz() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}\n[upstreams.gh]\nkind = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", \"echo 'fatal: GITHUB_TOKEN not set' >&2; exit 3\"]\nrestart = {{ max_restarts = 0 }}\n",
        stdio_upstream("demo", &[], "")
    ));
    let (_, ready) = gw.readyz().await;
    let gh = &ready["upstreams"]["gh"];
    assert_eq!(gh["phase"], "failed", "{ready}");
    let why = gh["last_error"].as_str().unwrap_or_default();
    assert!(
        why.contains("exit status: 3") && why.contains("fatal: GITHUB_TOKEN not set"),
        "{ready}"
    );
    assert!(!why.contains("::"), "no Rust type names: {why}");
}

/// An upstream that failed more than `max_restarts` times in a row is parked, not abandoned:
/// `/readyz` says it failed and when the next attempt is, and once its cause is gone it serves.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_upstream_is_retried_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken");
    std::fs::write(&broken, "").unwrap();
    let gw = Gateway::start(&format!(
        "[gateway]\n{}{}",
        stdio_upstream("demo", &[], ""),
        stdio_upstream(
            "flap",
            &["--fail-start-while", broken.to_str().unwrap()],
            "restart = { max_restarts = 1, base_ms = 20, max_ms = 200 }"
        ),
    ));
    let phase = |ready: &serde_json::Value| ready["upstreams"]["flap"]["phase"].clone();
    let mut ready = gw.readyz().await.1;
    for _ in 0..400 {
        if phase(&ready) == "failed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        ready = gw.readyz().await.1;
    }
    assert_eq!(phase(&ready), "failed", "{ready}");
    let next = ready["upstreams"]["flap"]["next_attempt_at"]
        .as_str()
        .unwrap_or_default();
    assert!(
        next.ends_with('Z') && next.contains('T'),
        "when the next attempt is: {ready}"
    );
    assert!(
        ready["upstreams"]["flap"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("retried every 200ms")),
        "{ready}"
    );
    // The cause is fixed: the next attempt brings it back, and its tools are listed again.
    let handler = TestClient::new();
    let seen = handler.seen.clone();
    let client = connect_legacy(&gw.url, handler).await;
    std::fs::remove_file(&broken).unwrap();
    wait_for(&seen.tools_changed, "flap's tools to be listed", || {
        *seen.tool_changes.lock() >= 1
    })
    .await;
    let ready = gw.readyz().await.1;
    assert_eq!(phase(&ready), "ready", "{ready}");
    assert!(ready["upstreams"]["flap"].get("next_attempt_at").is_none());
    let r = call(&client, "flap__echo", serde_json::json!({"text": "back"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: back");
    client.cancel().await.unwrap();
}

/// TOML for an http upstream whose server fedgate launches itself on `addr`.
fn launched_upstream(name: &str, addr: &str, extra: &str) -> String {
    format!(
        "[upstreams.{name}]\nkind = \"http\"\nurl = \"http://{addr}/mcp\"\n\
         launch = {{ command = {FEDGATE:?}, args = [\"demo-upstream\", \"--faults\", \"--name\", \"{name}\", \"--http\", \"{addr}\"] }}\n{extra}\n"
    )
}

/// A launched HTTP upstream is supervised like a stdio child: killed, it is reaped, its tools
/// leave and come back, and a new process serves.
#[tokio::test(flavor = "multi_thread")]
async fn a_launched_http_upstream_is_restarted_when_it_dies() {
    let addr = format!("127.0.0.1:{}", free_port());
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        launched_upstream("notes", &addr, "restart = { base_ms = 10, max_ms = 50 }")
    ));
    let handler = TestClient::new();
    let seen = handler.seen.clone();
    let client = connect_legacy(&gw.url, handler).await;
    let pid = first_text(
        &call(&client, "notes__pid", serde_json::json!({}))
            .await
            .unwrap(),
    );
    let changes = *seen.tool_changes.lock();
    Command::new("kill").args(["-KILL", &pid]).status().unwrap();
    wait_for(
        &seen.tools_changed,
        "the tools to leave and come back",
        || *seen.tool_changes.lock() >= changes + 2,
    )
    .await;
    let again = first_text(
        &call(&client, "notes__pid", serde_json::json!({}))
            .await
            .unwrap(),
    );
    assert_ne!(again, pid, "a new process serves");
    assert!(!alive(pid.parse().unwrap()), "the killed process is reaped");
    let (_, ready) = gw.readyz().await;
    assert_eq!(ready["upstreams"]["notes"]["phase"], "ready", "{ready}");
    assert!(
        ready["upstreams"]["notes"]["restarts"].as_u64().unwrap() >= 1,
        "{ready}"
    );
    client.cancel().await.unwrap();
}

/// When another server already listens where a launched upstream should, fedgate does not talk
/// to it: the upstream fails with a clear reason.
#[tokio::test(flavor = "multi_thread")]
async fn a_launch_address_in_use_by_someone_else_is_refused() {
    let impostor = HttpDemo::start("impostor", "--http");
    let addr = impostor
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let gw = Gateway::start(&format!(
        "[gateway]\n{}{}",
        stdio_upstream("demo", &[], ""),
        launched_upstream(
            "notes",
            &addr,
            "restart = { max_restarts = 0, max_ms = 600000 }"
        )
    ));
    let mut ready = gw.readyz().await.1;
    for _ in 0..400 {
        if ready["upstreams"]["notes"]["phase"] == "failed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        ready = gw.readyz().await.1;
    }
    let notes = &ready["upstreams"]["notes"];
    assert_eq!(notes["phase"], "failed", "{ready}");
    assert!(
        notes["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("already in use by another process"),
        "{ready}"
    );
    assert!(
        notes["server"].is_null(),
        "never connected to the impostor: {ready}"
    );
}

/// A stdio server that prints to stdout what is not JSON-RPC: fedgate says so — in the log
/// when it still serves, and in the reason when its handshake fails.
#[tokio::test(flavor = "multi_thread")]
async fn non_json_on_stdout_is_reported() {
    let gw = Gateway::start(&format!(
        "[upstreams.noisy]\nkind = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", \"echo 'Server starting on stdio...'; exec {FEDGATE} demo-upstream --faults --name noisy\"]\n\n\
         [upstreams.broken]\nkind = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", \"echo 'Listening on http://localhost:3000'; sleep 5\"]\nstartup_timeout_ms = 2000\nrestart = {{ max_restarts = 0 }}\n"
    ));
    let (_, ready) = gw.readyz().await;
    assert_eq!(ready["upstreams"]["noisy"]["phase"], "ready", "{ready}");
    let why = ready["upstreams"]["broken"]["last_error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("not JSON-RPC on stdout")
            && why.contains("Listening on http://localhost:3000"),
        "{ready}"
    );
    assert!(
        gw.stderr()
            .contains("upstream wrote a line that is not JSON-RPC on stdout"),
        "{}",
        gw.stderr()
    );
}

/// A server that asks for roots at startup, before any client call, gets an empty list (fedgate
/// has no roots of its own), not an error it would log as a failure.
#[tokio::test(flavor = "multi_thread")]
async fn roots_asked_before_any_call_get_an_empty_list() {
    let gw = Gateway::start(&stdio_upstream(
        "demo",
        &["--roots-at-start"],
        "era = \"legacy\"",
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let mut seen = serde_json::Value::Null;
    for _ in 0..200 {
        let r = call(&client, "demo__stats", serde_json::json!({}))
            .await
            .unwrap();
        seen = r.structured_content.unwrap()["startup_roots"].clone();
        if !seen.is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen, "0 roots");
    let loud: Vec<String> = gw
        .stderr()
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .map(str::to_owned)
        .collect();
    assert!(loud.is_empty(), "{loud:#?}");
    client.cancel().await.unwrap();
}

/// A stderr line far over the logged limit is cut (and says so), and fedgate keeps reading:
/// the upstream's next stderr writes succeed (a closed pipe would fail them, or kill a server
/// of another language with SIGPIPE).
#[tokio::test(flavor = "multi_thread")]
async fn a_huge_stderr_line_is_cut_and_stderr_is_still_read() {
    let gw = Gateway::start(&stdio_upstream("demo", &[], ""));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    for bytes in [200_000, 10, 50_000] {
        let r = call(&client, "demo__shout", serde_json::json!({"bytes": bytes}))
            .await
            .unwrap();
        assert_eq!(
            first_text(&r),
            format!("shouted {bytes} bytes"),
            "stderr still open after a {bytes}-byte line\n{}",
            gw.stderr()
        );
    }
    let log = gw.stderr();
    assert!(log.contains("more bytes of this line cut"), "{log}");
    assert!(log.contains("demo upstream: shout done"), "{log}");
}

/// An answer no parser here can read — longer than the upstream's line limit, or nested deeper
/// than the JSON parser goes — ends its call at once with what happened (rmcp alone would drop
/// the line and let the call run into its timeout); the upstream keeps serving.
#[tokio::test(flavor = "multi_thread")]
async fn unreadable_answers_end_their_call_at_once_with_the_reason() {
    // A tier that bounds answers to 1 MiB, so the stdio line limit is 2 MiB.
    let tiers = tempfile::tempdir().unwrap();
    std::fs::write(
        tiers.path().join("bounded.toml"),
        "rank = 3\nwrites = \"always\"\ntrust_annotations = true\nmax_response_bytes = 1048576\n\
         [timeouts]\nread_ms = 30000\nwrite_ms = 30000\nlong_ms = 30000\n",
    )
    .unwrap();
    let gw = Gateway::start(&format!(
        "[gateway]\ntiers_dir = {:?}\n{}",
        tiers.path(),
        stdio_upstream("demo", &[], "tier = \"bounded\"")
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let huge = call(&client, "demo__huge", serde_json::json!({"bytes": 3 << 20}))
        .await
        .refused();
    assert!(
        huge.contains("longer than 2097152 bytes") && !huge.contains("did not answer"),
        "{huge}"
    );
    let deep = call(&client, "demo__deep", serde_json::json!({"levels": 1000}))
        .await
        .refused();
    assert!(deep.contains("deeper than 128 levels"), "{deep}");
    let r = call(
        &client,
        "demo__echo",
        serde_json::json!({"text": "still here"}),
    )
    .await
    .unwrap();
    assert_eq!(first_text(&r), "echo: still here");
}

/// An upstream that stops reading its stdin: the call in flight ends at its deadline (the
/// cancellation that would follow cannot be written either, and is not waited for), the
/// upstream is taken as failed and started again, and calls work once it is back.
#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_that_stops_reading_is_restarted() {
    let tiers = tempfile::tempdir().unwrap();
    std::fs::write(
        tiers.path().join("quick.toml"),
        "rank = 3\nwrites = \"always\"\ntrust_annotations = true\n\
         [timeouts]\nread_ms = 1500\nwrite_ms = 1500\nlong_ms = 1500\n",
    )
    .unwrap();
    // One runtime thread, so `freeze` stops the server's stdin reader too.
    let config = format!(
        "[gateway]\ntiers_dir = {:?}\n[upstreams.demo]\nkind = \"stdio\"\ncommand = {FEDGATE:?}\n\
         args = [\"--worker-threads\", \"1\", \"demo-upstream\", \"--faults\", \"--name\", \"demo\"]\n\
         tier = \"quick\"\nrestart = {{ base_ms = 50, max_ms = 200 }}\n",
        tiers.path()
    );
    let gw = Gateway::start(&config);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let frozen = client.peer().clone();
    let freeze = tokio::spawn(async move {
        frozen
            .call_tool(
                rmcp::model::CallToolRequestParams::new("demo__freeze")
                    .with_arguments(args(serde_json::json!({"ms": 60_000}))),
            )
            .await
    });
    // Once the server is frozen, more than a pipe holds: the write blocks.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !gw.stderr().contains("demo upstream: frozen") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never froze\n{}",
            gw.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let big = "x".repeat(512 * 1024);
    let r = call(&client, "demo__echo", serde_json::json!({"text": big})).await;
    assert!(
        r.refused().contains("did not answer within"),
        "the call ends at its deadline"
    );
    let _ = freeze.await;
    // The upstream is started again; calls succeed on the new process.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match call(&client, "demo__echo", serde_json::json!({"text": "back"})).await {
            Ok(r) if first_text(&r) == "echo: back" => break,
            _ if tokio::time::Instant::now() > deadline => panic!("not back\n{}", gw.stderr()),
            _ => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
    let log = gw.stderr();
    assert!(log.contains("stopped reading"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn notifications_about_unknown_requests_are_dropped() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}{}",
        stdio_upstream("demo", &[], "era = \"legacy\""),
        stdio_upstream("other", &[], "era = \"legacy\"")
    ));
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    let pid = |r: rmcp::model::CallToolResult| first_text(&r);
    let before = pid(call(&client, "demo__pid", serde_json::json!({}))
        .await
        .unwrap());
    let r = call(&client, "demo__stray", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "strayed");
    // The list change is written after the stray notifications on the same pipe: once it has
    // arrived, anything fedgate forwarded of theirs has arrived too.
    let changes = *seen.tool_changes.lock();
    call(&client, "demo__toggle_extra", serde_json::json!({}))
        .await
        .unwrap();
    wait_for(&seen.tools_changed, "tools/list_changed", || {
        *seen.tool_changes.lock() > changes
    })
    .await;
    assert!(
        seen.progress.lock().is_empty(),
        "{:?}",
        seen.progress.lock()
    );
    assert!(
        seen.resource_updates.lock().is_empty(),
        "{:?}",
        seen.resource_updates.lock()
    );
    // The upstream was not restarted, and both keep serving.
    let after = pid(call(&client, "demo__pid", serde_json::json!({}))
        .await
        .unwrap());
    assert_eq!(before, after);
    let r = call(&client, "other__echo", serde_json::json!({"text": "hi"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: hi");
    assert!(!gw.stderr().contains("panicked"), "{}", gw.stderr());
    client.cancel().await.unwrap();
}
