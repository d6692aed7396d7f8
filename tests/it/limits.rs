//! Connection and request limits at the HTTP edge, on the MCP port and the admin port alike:
//! oversized and slow bodies get a clear answer, silent clients are disconnected, connections
//! past `max_connections` get 503 at once, and a listener out of descriptors backs off.

use crate::common;

use std::time::Duration;

use common::*;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

fn config() -> String {
    format!(
        "[gateway]\nmax_body_bytes = 1000\nbody_read_timeout_ms = 300\nheader_read_timeout_ms = 300\nmax_connections = 3\n\n{}",
        stdio_upstream("demo", &[], "")
    )
}

fn addr(gw: &Gateway) -> String {
    gw.base.trim_start_matches("http://").to_owned()
}

/// Everything the server sends until it closes the connection (bounded wait).
async fn read_all(stream: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_over_the_limit_or_too_slow_get_a_clear_answer() {
    let gw = Gateway::start(&config());
    // Over the limit, in either era (a stateless-era POST without Mcp-Method included).
    for version in ["2025-11-25", "2026-07-28"] {
        let r = reqwest::Client::new()
            .post(&gw.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", version)
            .body(format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"demo__echo","arguments":{{"text":"{}"}}}}}}"#,
                "x".repeat(2000)
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 413, "{version}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], -32600, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("larger than 1000 bytes")
        );
    }
    // A body that never arrives in full: 408 once its time is up.
    let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
    s.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"")
        .await
        .unwrap();
    let answer = read_all(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within 300ms"), "{answer}");
}

const ADMIN_TOKEN: (&str, &str) = ("FEDGATE_ADMIN_TOKEN", "limits-admin");

/// `config()` with an admin listener that holds at most three connections too.
fn config_with_admin() -> String {
    format!(
        "{}\n[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"env:FEDGATE_ADMIN_TOKEN\"\nmax_connections = 3\n",
        config()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn silent_clients_are_disconnected_and_connections_are_capped() {
    let gw = Gateway::start_env(&config_with_admin(), &[ADMIN_TOKEN]);
    let admin = gw.admin.clone().expect("admin listener");
    for (listener, addr) in [
        ("mcp", addr(&gw)),
        ("admin", admin.trim_start_matches("http://").to_owned()),
    ] {
        silent_clients_are_disconnected_and_the_cap_holds(listener, &addr).await;
    }
    let metrics = reqwest::get(format!("{}/metrics", gw.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for listener in ["mcp", "admin"] {
        let line = format!("fedgate_connections_refused_total{{listener=\"{listener}\"}} ");
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with(&line) && !l.ends_with(" 0")),
            "{listener}: {metrics}"
        );
    }
}

async fn silent_clients_are_disconnected_and_the_cap_holds(listener: &str, addr: &str) {
    // Headers that never end: the connection is closed.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0")
        .await
        .unwrap();
    let answer = read_all(&mut slow).await;
    assert!(
        !answer.contains(" 200 ") && !answer.contains(" 401 "),
        "{listener}: {answer}"
    );
    // A connection that sends nothing at all is closed too (not held open forever).
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), silent.read_to_end(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "{listener}: a silent connection is closed by the server: {closed:?}"
    );
    // Three idle connections fill the cap; a fourth gets 503 at once, as JSON.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    let mut extra = TcpStream::connect(addr).await.unwrap();
    let _ = extra
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await;
    let answer = read_all(&mut extra).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{listener}: {answer}");
    assert!(answer.contains("retry-after: 1"), "{listener}: {answer}");
    assert!(
        answer.contains("too many connections"),
        "{listener}: {answer}"
    );
    // Once the idle ones are gone (closed by the header timeout, or here), there is room again.
    drop(held);
    // The server frees their places as it sees them close: retry (bounded) until it has.
    let mut answered = None;
    for _ in 0..250 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let _ = s
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await;
        let answer = read_all(&mut s).await;
        if !answer.starts_with("HTTP/1.1 503") {
            answered = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let answered = answered.expect("room again once the idle connections are gone");
    // `/healthz` on the MCP port; the admin port wants its token.
    assert!(
        answered.starts_with("HTTP/1.1 200") || answered.starts_with("HTTP/1.1 401"),
        "{listener}: {answered}"
    );
}

/// The admin API reads bodies under the same bounds as `/mcp`, with answers of its own shape.
#[tokio::test(flavor = "multi_thread")]
async fn admin_bodies_that_are_too_large_or_too_slow_get_a_clear_answer() {
    let gw = Gateway::start_env(&config_with_admin(), &[ADMIN_TOKEN]);
    let admin = gw.admin.clone().expect("admin listener");
    let addr = admin.trim_start_matches("http://");
    let post = |len: usize| {
        format!(
            "POST /admin/tools/call HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {len}\r\n\r\n",
            ADMIN_TOKEN.1
        )
    };
    // A body that never arrives in full: 408 once the body timeout is up.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("{}{{\"tool\"", post(100)).as_bytes())
        .await
        .unwrap();
    let answer = read_all(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains(r#"{"error":"the request body did not arrive within 300ms"}"#),
        "{answer}"
    );
    // One byte over the admin API's 1 MiB: 413 (the server reads every byte sent, so its
    // close resets nothing).
    let mut s = TcpStream::connect(addr).await.unwrap();
    let big = (1 << 20) + 1;
    s.write_all(post(big).as_bytes()).await.unwrap();
    let _ = s.write_all(&vec![b' '; big]).await;
    let answer = read_all(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("larger than 1048576 bytes"), "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_trickled_slower_than_the_minimum_rate_is_refused_long_before_its_timeout() {
    // A generous body timeout: only the minimum rate can end this read early.
    let gw = Gateway::start(&format!(
        "[gateway]\nbody_read_timeout_ms = 60000\n\n{}",
        stdio_upstream("demo", &[], "")
    ));
    let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
    s.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{")
        .await
        .unwrap();
    let (mut rd, mut wr) = s.into_split();
    // Ten bytes a second, until the server answers and closes.
    let trickle = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        while wr.write_all(b" ").await.is_ok() {
            tick.tick().await;
        }
    });
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), rd.read_to_end(&mut buf)).await;
    trickle.abort();
    assert!(read.is_ok(), "answered within the body timeout's half");
    let answer = String::from_utf8_lossy(&buf);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("slower than 1024 bytes/s"), "{answer}");
}

/// Bodies that are not JSON, or not JSON-RPC, get JSON-RPC error objects with `id: null` in
/// both eras, never plain text.
#[tokio::test(flavor = "multi_thread")]
async fn malformed_bodies_get_json_rpc_errors() {
    let gw = Gateway::start(&config());
    let cases: [(&str, i64); 7] = [
        ("{bad json", -32700),
        ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":", -32700),
        ("\u{0}\u{1}", -32700),
        ("[]", -32600),
        ("\"just a string\"", -32600),
        ("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", -32600),
        ("{\"id\":1}", -32600),
    ];
    for version in ["2025-11-25", "2026-07-28"] {
        for (body, code) in cases {
            let r = reqwest::Client::new()
                .post(&gw.url)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .header("mcp-protocol-version", version)
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 400, "{version} {body:?}");
            assert!(
                r.headers()["content-type"]
                    .to_str()
                    .unwrap()
                    .starts_with("application/json"),
                "{version} {body:?}"
            );
            let v: serde_json::Value = r.json().await.unwrap();
            assert_eq!(
                (&v["jsonrpc"], &v["id"], &v["error"]["code"]),
                (
                    &serde_json::json!("2.0"),
                    &serde_json::Value::Null,
                    &serde_json::json!(code)
                ),
                "{version} {body:?}: {v}"
            );
        }
    }
}

/// A request of a known method with malformed params is invalid params (-32602), not an
/// unknown method; an unknown method stays -32601.
#[tokio::test(flavor = "multi_thread")]
async fn malformed_params_are_invalid_params() {
    let gw = Gateway::start(&config());
    let http = reqwest::Client::new();
    let post = |body: String, session: Option<String>| {
        let mut rb = http
            .post(&gw.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body);
        if let Some(s) = session {
            rb = rb.header("mcp-session-id", s);
        }
        rb.send()
    };
    let session = gw.raw_session().await;
    let answer = |text: String| -> serde_json::Value {
        let line = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .find(|d| !d.trim().is_empty())
            .map(str::to_owned)
            .unwrap_or(text);
        serde_json::from_str(&line).unwrap()
    };
    for (params, code) in [
        ("", -32602),
        (r#","params":{"name":"demo__echo","arguments":"x"}"#, -32602),
        (r#","params":{"name":5}"#, -32602),
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call"{params}}}"#);
        let text = post(body, Some(session.clone()))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let v = answer(text);
        assert_eq!(v["error"]["code"], code, "{params}: {v}");
    }
    let text = post(
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/frobnicate","params":{}}"#.into(),
        Some(session),
    )
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert_eq!(answer(text)["error"]["code"], -32601);
}

/// Routes besides `/mcp` answer only Hosts the gateway is (DNS rebinding), and with `[auth]`
/// `/readyz` keeps error texts for callers who authenticate.
#[tokio::test(flavor = "multi_thread")]
async fn other_routes_check_the_host_and_readyz_keeps_internals_for_callers() {
    use sha2::{Digest, Sha256};
    let key = "fgk_readyz_test_only";
    let gw = Gateway::start(&format!(
        "[auth]\n[[auth.api_keys]]\nname = \"ops\"\nsha256 = \"{}\"\nroles = []\n\n{}{}",
        hex::encode(Sha256::digest(key.as_bytes())),
        stdio_upstream("demo", &[], ""),
        stdio_upstream(
            "broken",
            &["--fail-start"],
            "restart = { max_restarts = 0 }"
        ),
    ));
    let http = reqwest::Client::new();
    let get = |host: &'static str, bearer: Option<&'static str>| {
        let mut rb = http.get(format!("{}/readyz", gw.base)).header("host", host);
        if let Some(b) = bearer {
            rb = rb.header("authorization", format!("Bearer {b}"));
        }
        rb.send()
    };
    assert_eq!(
        get("evil.example", None).await.unwrap().status().as_u16(),
        403
    );
    assert_eq!(
        get("evil.example:8930", None)
            .await
            .unwrap()
            .status()
            .as_u16(),
        403
    );
    for host in ["localhost", "127.0.0.1:1", "10.1.2.3:8930", "[::1]:8930"] {
        let status = get(host, None).await.unwrap().status().as_u16();
        assert!(status == 200 || status == 503, "{host}: {status}");
    }
    let anonymous: serde_json::Value = get("localhost", None).await.unwrap().json().await.unwrap();
    let broken = &anonymous["upstreams"]["broken"];
    assert!(broken["phase"].is_string(), "{anonymous}");
    assert!(
        broken.get("last_error").is_none(),
        "no error texts for anyone: {anonymous}"
    );
    let ops: serde_json::Value = get("localhost", Some(key))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        ops["upstreams"]["broken"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("fail-start")),
        "{ops}"
    );
}

/// A session id stays small whatever `initialize` carried: display data is not sealed into it,
/// and an oversized `initialize` is refused clearly.
#[tokio::test(flavor = "multi_thread")]
async fn session_ids_stay_small_whatever_initialize_carries() {
    let gw = Gateway::start(&stdio_upstream("demo", &[], ""));
    let init = |client_info: serde_json::Value| {
        reqwest::Client::new()
            .post(&gw.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(
                serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client_info}})
                .to_string(),
            )
            .send()
    };
    let big = init(serde_json::json!({"name": "x".repeat(20_000), "version": "1"}))
        .await
        .unwrap();
    assert_eq!(big.status().as_u16(), 413);
    let v: serde_json::Value = big.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("initialize parameters larger than"),
        "{v}"
    );
    let r = init(serde_json::json!({"name": "n".repeat(500), "version": "1",
        "title": "t".repeat(10_000), "description": "d".repeat(4_000)}))
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().len();
    assert!(sid < 1_500, "session id of {sid} bytes");
}

/// Sessions are capped (`max_sessions`), counted whether or not they sent
/// `notifications/initialized`, and a DELETE frees a place; stateless-era calls open no session
/// and are served while the cap is reached.
#[tokio::test(flavor = "multi_thread")]
async fn sessions_are_capped_counted_and_freed() {
    let gw = Gateway::start(&format!(
        "[gateway]\nmax_sessions = 3\n\n{}",
        stdio_upstream("demo", &[], "")
    ));
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(gw.raw_session().await);
    }
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains("fedgate_sessions_active 3"),
        "sessions that never sent initialized count: {metrics}"
    );
    let http = reqwest::Client::new();
    let initialize = || {
        http.post(&gw.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#)
            .send()
    };
    let refused = initialize().await.expect("initialize");
    assert_eq!(refused.status().as_u16(), 503);
    // The connection is shed, and the answer says so.
    assert_eq!(
        refused
            .headers()
            .get("connection")
            .and_then(|v| v.to_str().ok()),
        Some("close")
    );
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("5")
    );
    let body: serde_json::Value = refused.json().await.expect("JSON-RPC error");
    assert_eq!(body["error"]["code"], -32000, "{body}");
    assert_eq!(
        body["error"]["data"]["reason"], "too_many_sessions",
        "{body}"
    );
    assert!(body["id"].is_null());

    // The stateless era opens no session: served while the cap holds.
    let modern = connect_modern(&gw.url, TestClient::new()).await;
    let r = call(&modern, "demo__echo", serde_json::json!({"text": "still"}))
        .await
        .expect("stateless call");
    assert_eq!(first_text(&r), "echo: still");

    // A DELETE frees a place.
    let deleted = http
        .delete(&gw.url)
        .header("mcp-session-id", &open[0])
        .send()
        .await
        .expect("delete");
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let again = initialize().await.expect("initialize");
    assert_eq!(again.status().as_u16(), 200, "a place was freed");
}

/// Out of file descriptors, the accept loop backs off (10 ms doubling to 1 s) and logs once per
/// episode instead of spinning; once descriptors are free it accepts again.
#[tokio::test(flavor = "multi_thread")]
async fn out_of_descriptors_accept_backs_off_and_logs_once() {
    let gw = Gateway::start_fd_limited("[gateway]\n", 64, &[]);
    let addr = addr(&gw);
    accept_backs_off_and_logs_once(&gw, &addr, "mcp").await;
}

/// The admin port is the same listener: out of descriptors, it backs off and logs once too.
#[tokio::test(flavor = "multi_thread")]
async fn out_of_descriptors_the_admin_port_backs_off_and_logs_once() {
    let config =
        "[gateway]\n\n[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"env:FEDGATE_ADMIN_TOKEN\"\n";
    let gw = Gateway::start_fd_limited(config, 64, &[ADMIN_TOKEN]);
    let admin = gw.admin.clone().expect("admin listener");
    accept_backs_off_and_logs_once(&gw, admin.trim_start_matches("http://"), "admin").await;
}

async fn accept_backs_off_and_logs_once(gw: &Gateway, addr: &str, listener: &str) {
    // Silent connections hold one descriptor each in fedgate (the header timeout is 30 s);
    // past the limit the kernel still completes them, and fedgate's accept fails.
    let mut held = Vec::new();
    for _ in 0..120 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    gw.wait_stderr("accept failed", 10).await;
    // The episode lasts a second: with backoff, a handful of attempts, not a spin.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = gw.stderr();
    assert_eq!(during.matches("accept failed").count(), 1, "{during}");
    let failed = during
        .lines()
        .find(|l| l.contains("accept failed"))
        .unwrap_or_default();
    assert!(
        failed.contains(&format!("listener={listener}"))
            || failed.contains(&format!("listener=\"{listener}\"")),
        "{failed}"
    );
    // Freed descriptors end the episode (a later one may start while the backlog drains).
    drop(held);
    let log = gw
        .wait_stderr("accepting connections again after", 10)
        .await;
    let attempts: u64 = log
        .split("accepting connections again after ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        (1..=40).contains(&attempts),
        "{attempts} failed attempts in about a second: {log}"
    );
    // And it serves again.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_all(&mut s).await;
    assert!(
        answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.1 401"),
        "{answer}"
    );
}

/// Initializes racing for the last places, each on a connection of its own: every one is a
/// session or a 503 `too_many_sessions`, none a header refusal (a handshake-era client sends
/// no `Mcp-Method`).
#[tokio::test(flavor = "multi_thread")]
async fn initializes_racing_past_the_session_cap_are_refused_as_too_many_sessions() {
    let gw = Gateway::start(&format!(
        "[gateway]\nmax_sessions = 2\n\n{}",
        stdio_upstream("demo", &[], "")
    ));
    let racers = (0..16).map(|_| {
        // A client each: no connection is shared, so they arrive at once.
        let http = reqwest::Client::new();
        let url = gw.url.clone();
        tokio::spawn(async move {
            let r = http
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#)
                .send()
                .await
                .expect("initialize");
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            (status, body)
        })
    });
    let mut opened = 0;
    for racer in racers.collect::<Vec<_>>() {
        let (status, body) = racer.await.expect("racer");
        match status {
            200 => opened += 1,
            503 => assert!(body.contains("too_many_sessions"), "{body}"),
            other => panic!("{other}: {body}"),
        }
    }
    assert!((1..=2).contains(&opened), "{opened} sessions opened");
}
