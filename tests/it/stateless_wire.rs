//! The stateless era's refusals on real sockets (2026-07-28: no session; version, client and
//! capabilities in `_meta`, method and name in headers): what rmcp's transport refused, the
//! edge refuses the same way, each a JSON-RPC error with the request's id where there is one.

use crate::common::*;

use serde_json::{Value, json};

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

/// POSTs `body` with the era's version header and `headers`; the status and the JSON body
/// (`Null` when there is none).
async fn post(url: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let mut r = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.body(body.to_owned()).send().await.expect("POST");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    let v = match text.trim() {
        "" => Value::Null,
        t if t.starts_with('{') => serde_json::from_str(t).expect("JSON"),
        t => raw::last_message(t),
    };
    (status, v)
}

fn call(args: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"h__hdrs","arguments":{args},{META}}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn standard_headers_and_meta_are_checked_and_refused_with_the_requests_id() {
    let (h, _server) = http_upstream("h", "era = \"modern\"\nrename = { headers = \"hdrs\" }");
    let gw = Gateway::start(&h);
    let named = [("mcp-method", "tools/call"), ("mcp-name", "h__hdrs")];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v = named.to_vec();
        v.extend_from_slice(extra);
        v
    };
    // Served: the argument mirrored in its header.
    let (status, v) = post(
        &gw.url,
        &with(&[("mcp-param-region", "eu")]),
        &call(r#"{"region":"eu"}"#),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(v["result"]["content"].is_array(), "{v}");
    // Header refusals (-32020, 400): a parameter header that disagrees, is missing, or is sent
    // where the argument is absent; Mcp-Name missing or twice; Mcp-Method missing or wrong.
    let region = r#"{"region":"eu"}"#;
    for (headers, args, why) in [
        (
            with(&[("mcp-param-region", "us")]),
            region,
            "does not match body value `eu`",
        ),
        (with(&[]), region, "missing Mcp-Param-Region header"),
        (
            with(&[("mcp-param-region", "eu")]),
            "{}",
            "unexpected Mcp-Param-Region header",
        ),
        (vec![named[0]], region, "missing required Mcp-Name"),
        (
            with(&[("mcp-name", "h__hdrs"), ("mcp-param-region", "eu")]),
            region,
            "duplicate Mcp-Name",
        ),
        (
            vec![named[1], ("mcp-param-region", "eu")],
            region,
            "missing required Mcp-Method",
        ),
        (
            vec![("mcp-method", "tools/list"), named[1]],
            region,
            "does not match body method",
        ),
    ] {
        let (status, v) = post(&gw.url, &headers, &call(args)).await;
        assert_eq!(
            (status, v["error"]["code"].as_i64()),
            (400, Some(-32020)),
            "{headers:?}: {v}"
        );
        assert_eq!(v["id"], 7, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(why)),
            "{headers:?}: {v}"
        );
    }
    // `_meta`: missing (-32602), naming another version (-32020), lacking required keys (-32602).
    let list = |params: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{params}}}"#)
    };
    let lm = [("mcp-method", "tools/list")];
    for (params, code) in [
        ("{}", -32602),
        (
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}"#,
            -32020,
        ),
        (
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#,
            -32602,
        ),
    ] {
        let (status, v) = post(&gw.url, &lm, &list(params)).await;
        assert_eq!(
            (status, v["error"]["code"].as_i64()),
            (400, Some(code)),
            "{params}: {v}"
        );
        assert_eq!(v["id"], 8, "{v}");
    }
    // A notification is accepted; a response is refused (-32600, no id to answer).
    let (status, _) = post(
        &gw.url,
        &[("mcp-method", "notifications/roots/list_changed")],
        r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#,
    )
    .await;
    assert_eq!(status, 202);
    let (status, v) = post(&gw.url, &[], r#"{"jsonrpc":"2.0","id":"x","result":{}}"#).await;
    assert_eq!(
        (status, v["error"]["code"].as_i64()),
        (400, Some(-32600)),
        "{v}"
    );
    assert_eq!(v["id"], Value::Null);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_no_one_speaks_is_refused_with_the_supported_ones() {
    let gw = Gateway::start(&stdio_upstream("demo", &[], ""));
    let r = reqwest::Client::new()
        .post(&gw.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2099-01-01")
        .header("mcp-method", "tools/list")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.expect("a JSON-RPC error");
    assert_eq!(v["error"]["code"], -32022, "{v}");
    assert_eq!(v["error"]["data"]["requested"], "2099-01-01", "{v}");
    let supported = v["error"]["data"]["supported"]
        .as_array()
        .expect("supported");
    assert!(supported.iter().any(|s| s == "2026-07-28"), "{v}");
    // A GET naming it too.
    let r = reqwest::Client::new()
        .get(&gw.url)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2099-01-01")
        .send()
        .await
        .expect("GET");
    assert_eq!(r.status().as_u16(), 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_era_does_not_serve_is_refused_by_the_edge() {
    let gw = Gateway::start(&stdio_upstream("demo", &[], ""));
    // `ping` is the handshake era's: -32601 (404), with the request's id.
    let ping = format!(r#"{{"jsonrpc":"2.0","id":3,"method":"ping","params":{{{META}}}}}"#);
    let (status, v) = post(&gw.url, &[("mcp-method", "ping")], &ping).await;
    assert_eq!((status, raw::code(&v)), (404, -32601), "{v}");
    assert_eq!(v["id"], 3, "{v}");
    // Nor does the era have session streams: GET (resuming or not) and DELETE are 405,
    // `Allow: POST`, each a JSON-RPC error.
    let http = reqwest::Client::new();
    for (method, last) in [("GET", None), ("GET", Some("1")), ("DELETE", None)] {
        let mut r = http
            .request(method.parse().expect("method"), &gw.url)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2026-07-28");
        if let Some(last) = last {
            r = r.header("last-event-id", last);
        }
        let r = r.send().await.expect("request");
        assert_eq!(r.status().as_u16(), 405, "{method} {last:?}");
        assert_eq!(r.headers()["allow"], "POST");
        let v: Value = r.json().await.expect("a JSON-RPC error");
        assert_eq!(v["error"]["data"]["reason"], "method_not_allowed", "{v}");
    }
    // `server/discover` naming its version in `_meta` needs the header too (-32020); one
    // beside a handshake-era header whose `_meta` lacks the era's keys is refused (-32602).
    let discover =
        format!(r#"{{"jsonrpc":"2.0","id":4,"method":"server/discover","params":{{{META}}}}}"#);
    let r = http
        .post(&gw.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(discover)
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.expect("JSON");
    assert_eq!((raw::code(&v), v["id"].clone()), (-32020, json!(4)), "{v}");
    let r = http
        .post(&gw.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .body(r#"{"jsonrpc":"2.0","id":5,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}"#)
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.expect("JSON");
    assert_eq!((raw::code(&v), v["id"].clone()), (-32602, json!(5)), "{v}");
    // A stateless request that carries a live session's id is answered statelessly, and the
    // session is left as it was.
    let sid = gw.raw_session().await;
    let list = format!(r#"{{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{{{META}}}}}"#);
    let (status, v) = post(
        &gw.url,
        &[("mcp-method", "tools/list"), ("mcp-session-id", &sid)],
        &list,
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(v["result"]["tools"].is_array(), "{v}");
    let r = http
        .post(&gw.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &sid)
        .body(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#)
        .send()
        .await
        .expect("POST");
    let v: Value = r.json().await.expect("JSON");
    assert_eq!(v["result"], json!({}), "the session still answers: {v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_base64_name_and_malformed_arguments_are_answered_as_rmcp_answers_them() {
    use base64::Engine as _;
    let (h, _server) = http_upstream("h", "era = \"modern\"\nrename = { headers = \"hdrs\" }");
    let gw = Gateway::start(&h);
    // SEP-2243's Base64 form of `Mcp-Name` names the same tool.
    let b64 = format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode("h__hdrs")
    );
    let (status, v) = post(
        &gw.url,
        &[("mcp-method", "tools/call"), ("mcp-name", &b64)],
        &call("{}"),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(v["result"]["content"].is_array(), "{v}");
    // One that is not Base64 of UTF-8 is a header refusal, not an unknown method.
    let (status, v) = post(
        &gw.url,
        &[("mcp-method", "tools/call"), ("mcp-name", "=?base64?***?=")],
        &call("{}"),
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].as_i64()),
        (400, Some(-32020)),
        "{v}"
    );
    // `arguments` that are no object: invalid params, the method is known.
    let (_, v) = post(
        &gw.url,
        &[("mcp-method", "tools/call"), ("mcp-name", "h__hdrs")],
        &call("\"x\""),
    )
    .await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(v["id"], 7, "{v}");
}
