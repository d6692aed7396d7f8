//! Upstream health that tells the truth: a Streamable HTTP upstream that dies or hangs (a
//! process fedgate did not start, so no exit to see) is reported down in either era — by its
//! listen stream or its health checks — and calls to it are refused at once as unavailable, not
//! retried quietly into `upstream_failed`. Servers that accept connections and never answer, or
//! answer garbage, never make a ready upstream; one that flaps is retried with backoff and
//! logged a bounded number of times.

use crate::common;

use std::time::Duration;

use common::*;

const ADMIN_TOKEN: &str = "health-admin-token";

/// `config` with an admin listener in front (its token in `dir`).
fn with_admin(dir: &std::path::Path, config: &str) -> String {
    std::fs::write(dir.join("admin.token"), ADMIN_TOKEN).expect("token");
    format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"file:{}/admin.token\"\n\n{config}",
        dir.display()
    )
}

/// `name`'s entry in `/admin/upstreams` (what the console's upstream table shows).
async fn admin_upstream(gw: &Gateway, name: &str) -> serde_json::Value {
    let url = format!("{}/admin/upstreams", gw.admin.as_deref().expect("admin"));
    let listed: serde_json::Value = reqwest::Client::new()
        .get(url)
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("admin")
        .json()
        .await
        .expect("json");
    listed[name].clone()
}

/// Whether `fedgate_upstream_up` says `name` is up (`None`: no such series).
async fn up_metric(gw: &Gateway, name: &str) -> Option<bool> {
    let series = format!("fedgate_upstream_up{{upstream=\"{name}\"}}");
    gw.metrics()
        .await
        .lines()
        .find(|l| l.starts_with(&series))
        .map(|l| l.ends_with(" 1"))
}

/// Waits (at most `secs`) until `/readyz` shows `name` in a phase for which `want` holds; that
/// `/readyz` answer.
async fn until_phase(
    gw: &Gateway,
    name: &str,
    secs: u64,
    want: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let (_, ready) = gw.readyz().await;
        if want(&ready["upstreams"][name]["phase"]) {
            return ready;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "`{name}` not in the expected phase within {secs} s: {ready}\n{}",
            gw.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn is_ready(phase: &serde_json::Value) -> bool {
    phase == "ready"
}

fn is_down(phase: &serde_json::Value) -> bool {
    phase != "ready"
}

/// `/readyz`, `/admin/upstreams` and the metric all say `name` is down, with a reason in plain
/// words; the reason.
async fn all_say_down(gw: &Gateway, name: &str, ready: &serde_json::Value) -> String {
    let last = ready["upstreams"][name]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!last.is_empty(), "a reason: {ready}");
    assert!(!last.contains("::"), "no Rust type names: {last}");
    let admin = admin_upstream(gw, name).await;
    assert_ne!(admin["phase"], "ready", "the admin API agrees: {admin}");
    assert_eq!(up_metric(gw, name).await, Some(false), "the metric agrees");
    last
}

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
    let gw = Gateway::start(&with_admin(
        dir.path(),
        &format!(
            "[upstreams.web]\nkind = \"http\"\nurl = \"{}\"\nera = \"{era}\"\nhealth_interval_ms = 200\n\
             restart = {{ base_ms = 200, max_ms = 400 }}\n",
            demo.url
        ),
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "web__echo", serde_json::json!({"text": "up"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: up");
    assert_eq!(up_metric(&gw, "web").await, Some(true));

    drop(demo); // SIGKILL: the server is gone, nothing closes fedgate's side
    let ready = until_phase(&gw, "web", 20, is_down).await;
    assert_eq!(gw.readyz().await.0, 503, "no upstream is ready");
    let last = all_say_down(&gw, "web", &ready).await;
    assert!(
        last.contains("stopped answering") || last.contains("connect"),
        "{ready}"
    );
    let refused = call(&client, "web__echo", serde_json::json!({"text": "down"})).await;
    let text = format!("{refused:?}");
    assert!(
        text.contains("upstream_unavailable") || text.contains("unknown tool `web__echo`"),
        "refused at once as unavailable (or no longer listed): {text}"
    );

    // Back on its address: fedgate reconnects by itself.
    let _again = start();
    until_phase(&gw, "web", 20, is_ready).await;
    let r = call(&client, "web__echo", serde_json::json!({"text": "back"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: back");
    assert_eq!(up_metric(&gw, "web").await, Some(true));
    assert!(
        !gw.stderr().contains("tap::Tap"),
        "the log names no Rust types: {}",
        gw.stderr()
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_http_upstream_is_reported_down_and_comes_back_when_it_answers() {
    hung_upstream_is_reported_down("auto").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_handshake_era_http_upstream_is_reported_down_and_comes_back_when_it_answers() {
    hung_upstream_is_reported_down("legacy").await;
}

/// The server of an HTTP upstream of `era` stops (SIGSTOP): its connections stay open and the
/// kernel still accepts new ones, but nothing answers. Its health checks go unanswered, so it
/// is reported down and refused at once; resumed (SIGCONT), it answers and comes back.
async fn hung_upstream_is_reported_down(era: &str) {
    let demo = HttpDemo::start("web", "--http");
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = Gateway::start(&with_admin(
        dir.path(),
        &format!(
            "{}[upstreams.web]\nkind = \"http\"\nurl = \"{}\"\nera = \"{era}\"\n\
             health_interval_ms = 200\nstartup_timeout_ms = 1000\n\
             restart = {{ base_ms = 200, max_ms = 400 }}\n",
            stdio_upstream("demo", &[], ""),
            demo.url
        ),
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "web__echo", serde_json::json!({"text": "up"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: up");

    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &demo.pid().to_string()])
            .status()
            .expect("kill");
        assert!(ok.success(), "kill {sig}");
    };
    signal("-STOP");
    let ready = until_phase(&gw, "web", 20, is_down).await;
    let last = all_say_down(&gw, "web", &ready).await;
    assert!(
        last.contains("stopped answering") || last.contains("did not become ready"),
        "{last}"
    );
    let refused = call(&client, "web__echo", serde_json::json!({"text": "x"}))
        .await
        .refused();
    assert!(
        refused.contains("upstream `web` is unavailable"),
        "refused at once, by name: {refused}"
    );
    // The other upstream is not held up by the hung one.
    let r = call(&client, "demo__echo", serde_json::json!({"text": "still"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: still");

    signal("-CONT");
    until_phase(&gw, "web", 20, is_ready).await;
    let r = call(&client, "web__echo", serde_json::json!({"text": "back"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: back");
    assert_eq!(up_metric(&gw, "web").await, Some(true));
    client.cancel().await.unwrap();
}

/// A server on loopback that accepts connections and answers each with `reply` (`None`: holds
/// them open and never says a byte); its URL.
fn raw_server(reply: Option<&'static [u8]>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            match reply {
                None => held.push(conn),
                Some(bytes) => {
                    use std::io::{Read, Write};
                    let mut conn = conn;
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf);
                    let _ = conn.write_all(bytes);
                }
            }
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread")]
async fn servers_that_never_answer_or_answer_garbage_never_make_a_ready_upstream() {
    let mute = raw_server(None);
    let noise = raw_server(Some(b"\x00\xff\xfe garbage that is not HTTP\r\n\r\n\x07"));
    let html = raw_server(Some(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 21\r\n\r\n<html>not mcp</html>\n",
    ));
    let bad_json = raw_server(Some(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 14\r\n\r\n{\"jsonrpc\":\"2.",
    ));
    let remote = |name: &str, url: &str| {
        format!(
            "[upstreams.{name}]\nkind = \"http\"\nurl = \"{url}\"\nstartup_timeout_ms = 1000\n\
             restart = {{ base_ms = 200, max_ms = 1000, max_restarts = 2 }}\n"
        )
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = Gateway::start(&with_admin(
        dir.path(),
        &format!(
            "{}{}{}{}{}",
            stdio_upstream("demo", &[], ""),
            remote("mute", &mute),
            remote("noise", &noise),
            remote("html", &html),
            remote("bad_json", &bad_json),
        ),
    ));
    // The gateway is ready with the one upstream that works.
    assert!(gw.ready.contains("1/5 upstreams ready"), "{}", gw.ready);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    for name in ["mute", "noise", "html", "bad_json"] {
        // Each is retried, and each attempt fails with a reason in plain words.
        let ready = until_phase(&gw, name, 20, |p| p == "restarting" || p == "failed").await;
        let last = all_say_down(&gw, name, &ready).await;
        if name == "mute" {
            assert!(last.contains("did not become ready within 1s"), "{last}");
        }
        let refused = call(&client, &format!("{name}__echo"), serde_json::json!({}))
            .await
            .refused();
        assert!(
            refused.contains(&format!("upstream `{name}` is unavailable")),
            "{refused}"
        );
    }
    let r = call(&client, "demo__echo", serde_json::json!({"text": "fine"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: fine");
    let tools = client.peer().list_all_tools().await.expect("list");
    assert!(
        tools.iter().all(|t| t.name.starts_with("demo__")),
        "only the working upstream's tools are listed: {:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    let log = gw.stderr();
    assert!(!log.contains("panicked"), "{log}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_that_flaps_every_second_is_retried_with_backoff_and_logged_boundedly() {
    const FLAPS: usize = 6;
    let listen = format!("127.0.0.1:{}", free_port());
    let start = || UrlProcess::start(&["demo-upstream", "--name", "web", "--http", &listen]);
    let mut demo = Some(start());
    let url = demo.as_ref().map(|d| d.url.clone()).expect("url");
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = Gateway::start(&with_admin(
        dir.path(),
        &format!(
            "[upstreams.web]\nkind = \"http\"\nurl = \"{url}\"\nhealth_interval_ms = 200\n\
             startup_timeout_ms = 1000\nrestart = {{ base_ms = 100, max_ms = 1000, max_restarts = 3 }}\n"
        ),
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    call(&client, "web__echo", serde_json::json!({"text": "up"}))
        .await
        .expect("up");
    // Down one second, up one second, FLAPS times: the flapping is what is tested, so these
    // pauses are the fault itself, not a wait for something to happen.
    for _ in 0..FLAPS {
        drop(demo.take());
        tokio::time::sleep(Duration::from_secs(1)).await;
        demo = Some(start());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // It stays up now: fedgate comes back to it by itself.
    until_phase(&gw, "web", 20, is_ready).await;
    let r = call(&client, "web__echo", serde_json::json!({"text": "settled"}))
        .await
        .expect("settled");
    assert_eq!(first_text(&r), "echo: settled");
    drop(demo);

    let log = gw.stderr();
    let lines = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    // Retries back off: at most one reconnection per time the server came back (plus the
    // first connection), never a loop of them.
    let reconnects = lines("upstream ready");
    assert!(
        (2..=FLAPS + 1).contains(&reconnects),
        "{reconnects} connections for {FLAPS} returns of the server:\n{log}"
    );
    // One episode of flapping is logged once as a warning by each watcher (the supervisor,
    // the listen stream) and once as an error when it outlasts `max_restarts`; every failure
    // in between is a debug line. (rmcp's own warnings, shown by the tests' log filter, are
    // off by default.)
    let ours: Vec<&str> = log
        .lines()
        .filter(|l| (l.contains(" WARN ") || l.contains(" ERROR ")) && l.contains(" fedgate::"))
        .collect();
    assert!(
        ours.len() <= 3,
        "{} warnings for one episode of flapping:\n{log}",
        ours.len()
    );
    assert!(lines("times in a row") <= 1, "{log}");
    for line in ours {
        assert!(
            !line.contains("Error {") && !line.contains("::Error") && !line.contains("Tap<"),
            "no Rust type names in the log: {line}"
        );
    }
    client.cancel().await.unwrap();
}
