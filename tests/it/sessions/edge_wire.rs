//! What the edge reads and refuses on `/mcp` before and beside a session's calls: unusual but
//! valid headers read as rmcp reads them (and the session kept at the edge), refusals as wire
//! errors from the edge, unknown methods and stray messages, `initialize` variants and
//! requests without a session.

use super::{Raw, event_with};
use crate::common::*;

#[tokio::test(flavor = "multi_thread")]
async fn unusual_headers_stay_at_the_edge_and_refusals_come_from_it() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let s = Raw::open(&gw.url).await;
    let mut stream = s.get(None).await;
    let port = s
        .url
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .trim_end_matches("/mcp");
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    for (accept, origin, version) in [
        (
            "application/json;q=0.9, text/event-stream;q=0.5",
            None,
            true,
        ),
        (
            "application/json, text/event-stream",
            Some(format!("http://localhost:{port}")),
            true,
        ),
        ("application/json, text/event-stream", None, false),
        // An origin written otherwise than configured (rmcp's reading: the same origin).
        (
            "application/json, text/event-stream",
            Some(format!("HTTP://LOCALHOST:{port}/")),
            true,
        ),
        // A quoted parameter holding a comma and a zero weight.
        (
            "application/json;ext=\"a,b;q=0\", text/event-stream",
            None,
            true,
        ),
    ] {
        let mut r = s
            .http
            .post(&s.url)
            .header("accept", accept)
            .header("content-type", "application/json")
            .header("mcp-session-id", &s.sid);
        if let Some(o) = &origin {
            r = r.header("origin", o);
        }
        if version {
            r = r.header("mcp-protocol-version", "2025-11-25");
        }
        let r = r.body(list).send().await.expect("POST");
        assert_eq!(r.status().as_u16(), 200, "{accept} {origin:?} {version}");
        assert_eq!(
            r.headers()["content-type"],
            "application/json",
            "answered by the edge: {accept} {origin:?} {version}"
        );
        let body: serde_json::Value = r.json().await.expect("JSON");
        assert!(body["result"]["tools"].is_array(), "{body}");
    }
    // Another known version of the era (rmcp serves the session whichever it names), a ping
    // with params, and an answer no one waits for (ignored, as rmcp's worker ignores it).
    for (version, body, status) in [
        ("2025-06-18", list, 200),
        (
            "2025-11-25",
            r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":{}}"#,
            200,
        ),
        ("2025-11-25", r#"{"jsonrpc":"2.0","id":8,"result":{}}"#, 202),
    ] {
        let r = s
            .http
            .post(&s.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &s.sid)
            .header("mcp-protocol-version", version)
            .body(body)
            .send()
            .await
            .expect("POST");
        assert_eq!(r.status().as_u16(), status, "{body}");
        if status == 200 {
            assert_eq!(r.headers()["content-type"], "application/json", "{body}");
        }
    }
    // The handshake era has no Mcp-Method / Mcp-Name / Mcp-Param-* headers: whatever a client
    // sends of them is ignored (as rmcp ignores them there), not a reason to hand the session over.
    let r = s
        .http
        .post(&s.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &s.sid)
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-method", "tools/list")
        .header("mcp-method", "prompts/list")
        .header("mcp-param-x", "1")
        .body(list)
        .send()
        .await
        .expect("POST");
    assert_eq!(r.headers()["content-type"], "application/json");
    // Refusals as rmcp's transport refused them (its statuses), each a JSON-RPC error object
    // from the edge: a range weighted zero (406), a body not declared JSON (415), a foreign
    // Origin or Host (403, DNS rebinding), a method /mcp does not serve (405).
    let foreign = format!("http://evil.example:{port}");
    for (method, header, value, status) in [
        (
            "POST",
            "accept",
            "application/json, text/event-stream;q=0",
            406,
        ),
        ("POST", "content-type", "text/plain", 415),
        ("POST", "origin", foreign.as_str(), 403),
        ("POST", "host", "evil.example", 403),
        ("GET", "accept", "application/json", 406),
        ("PUT", "x-nothing", "", 405),
    ] {
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in [
            ("accept", "application/json, text/event-stream"),
            ("content-type", "application/json"),
            ("mcp-session-id", s.sid.as_str()),
            ("mcp-protocol-version", "2025-11-25"),
            (header, value),
        ] {
            headers.insert(k, v.parse().expect("header"));
        }
        let r = s
            .http
            .request(method.parse().expect("method"), &s.url)
            .headers(headers)
            .body(list)
            .send()
            .await
            .expect("answer");
        assert_eq!(r.status().as_u16(), status, "{method} {header}: {value}");
        if status == 405 {
            assert_eq!(r.headers()["allow"], "GET, POST, DELETE");
        }
        let body: serde_json::Value = r.json().await.expect("a JSON-RPC error");
        assert!(body["error"]["code"].is_i64(), "{body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
    // The session stayed at the edge: its GET stream was not ended by a takeover.
    let toggled = s
        .ask(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__toggle_extra","arguments":{}}}"#)
        .await;
    assert!(toggled["result"].is_object(), "{toggled}");
    let mut seen = String::new();
    event_with(&mut stream, &mut seen, "notifications/tools/list_changed").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_methods_bad_params_and_notifications_stay_at_the_edge() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let s = Raw::open(&gw.url).await;
    let mut stream = s.get(None).await;
    let unknown = s
        .ask_edge(r#"{"jsonrpc":"2.0","id":1,"method":"nothing/here","params":{}}"#)
        .await;
    assert_eq!(unknown["id"], 1, "{unknown}");
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("nothing/here")),
        "{unknown}"
    );
    let bad = s
        .ask_edge(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__echo","arguments":3}}"#)
        .await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let removed = s
        .ask_edge(r#"{"jsonrpc":"2.0","id":3,"method":"tasks/list","params":{}}"#)
        .await;
    assert_eq!(removed["error"]["code"], -32601, "{removed}");
    // A client's notifications, and a cancellation of a call that ended already.
    for note in [
        r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#,
    ] {
        assert_eq!(s.post(note).await.status().as_u16(), 202, "{note}");
    }
    // The session stayed at the edge: its GET stream was not ended by a takeover.
    let toggled = s
        .ask(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"demo__toggle_extra","arguments":{}}}"#)
        .await;
    assert!(toggled["result"].is_object(), "{toggled}");
    let mut seen = String::new();
    event_with(&mut stream, &mut seen, "notifications/tools/list_changed").await;
}

/// `initialize` naming a version the handshake cannot speak, or one in `_meta`, opens a session
/// the edge holds (answered with the newest handshake version, as rmcp's handshake answers);
/// a version header that disagrees with the body is refused. A handshake-era request without a
/// session id is refused by the edge with a JSON-RPC error that says what to do.
#[tokio::test(flavor = "multi_thread")]
async fn initialize_variants_and_requests_without_a_session_are_the_edges() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let http = reqwest::Client::new();
    let post = |version: Option<&str>, body: &str| {
        let mut r = http
            .post(&gw.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json");
        if let Some(v) = version {
            r = r.header("mcp-protocol-version", v);
        }
        r.body(body.to_owned()).send()
    };
    let init = |version: &str, meta: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"raw","version":"0"}}{meta}}}}}"#
        )
    };
    for (header, body) in [
        (None, init("2026-07-28", "")),
        (
            None,
            init(
                "2025-06-18",
                r#","_meta":{"io.modelcontextprotocol/protocolVersion":"2025-06-18"}"#,
            ),
        ),
        (Some("2026-07-28"), init("2026-07-28", "")),
    ] {
        let r = post(header, &body).await.expect("initialize");
        assert_eq!(r.status().as_u16(), 200, "{body}");
        assert_eq!(
            r.headers()["content-type"],
            "application/json",
            "the edge opened the session: {body}"
        );
        assert!(r.headers().contains_key("mcp-session-id"), "{body}");
        let v: serde_json::Value = r.json().await.expect("JSON");
        let negotiated = v["result"]["protocolVersion"].as_str().unwrap_or_default();
        assert!(
            ("2025-06-18".."2026-07-28").contains(&negotiated),
            "a version the handshake speaks: {v}"
        );
    }
    // A version header that is not the one the body asks for: refused, no session.
    let r = post(Some("2025-06-18"), &init("2025-11-25", ""))
        .await
        .expect("initialize");
    assert_eq!(r.status().as_u16(), 400);
    assert!(!r.headers().contains_key("mcp-session-id"));
    let v: serde_json::Value = r.json().await.expect("a JSON-RPC error");
    assert_eq!(
        (v["error"]["code"].as_i64(), v["id"].as_i64()),
        (Some(-32600), Some(1)),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("(2025-06-18)")),
        "{v}"
    );
    // Without a session id: a stream, an end, and (below) a request, a notification, an answer.
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let r = http
            .request(method.clone(), &gw.url)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .send()
            .await
            .expect("answer");
        assert_eq!(r.status().as_u16(), 400, "{method}");
        let v: serde_json::Value = r.json().await.expect("a JSON-RPC error");
        assert_eq!(v["error"]["data"]["reason"], "session_required", "{v}");
    }
    for body in [
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
    ] {
        for version in [None, Some("2025-11-25")] {
            let r = post(version, body).await.expect("POST");
            assert_eq!(r.status().as_u16(), 400, "{body} {version:?}");
            let v: serde_json::Value = r.json().await.expect("a JSON-RPC error");
            assert_eq!(v["error"]["data"]["reason"], "session_required", "{v}");
            assert!(
                v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("initialize")),
                "{v}"
            );
        }
    }
}
