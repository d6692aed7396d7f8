//! The two protocol eras on either side of fedgate: error codes and cache hints at its own face,
//! and asking the caller for input across eras (MRTR synthesis and driving).

use crate::common;

use std::time::Duration;

use common::*;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, InputResponses, ReadResourceRequestParams,
    SubscriptionFilter,
};

fn code(err: rmcp::ServiceError) -> i32 {
    match err {
        rmcp::ServiceError::McpError(e) => e.code.0,
        other => panic!("not a JSON-RPC error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn resource_not_found_uses_each_eras_code() {
    // Two upstreams with resources: an unmatched URI has no default upstream to go to.
    let gw = Gateway::start(&format!(
        "{}{}",
        stdio_upstream("a", &[], ""),
        stdio_upstream("b", &[], "")
    ));
    let read = ReadResourceRequestParams::new("nothing://here");
    let legacy = connect_legacy(&gw.url, TestClient::new()).await;
    let err = legacy.peer().read_resource(read.clone()).await.unwrap_err();
    assert_eq!(code(err), -32002, "2025-11-25: resource not found");
    let modern = connect_modern(&gw.url, TestClient::new()).await;
    let err = modern.peer().read_resource(read).await.unwrap_err();
    assert_eq!(code(err), -32602, "2026-07-28: invalid params");
}

#[tokio::test(flavor = "multi_thread")]
async fn lists_are_private_when_filtered_per_caller() {
    // Without [auth] every caller sees the same lists: a shared cache may serve them.
    let open = Gateway::start(&stdio_upstream("a", &[], ""));
    let modern = connect_modern(&open.url, TestClient::new()).await;
    let tools = modern.peer().list_tools(None).await.unwrap();
    assert_eq!(tools.cache_scope, Some(CacheScope::Public));
    assert_eq!(tools.ttl_ms, Some(0));

    // With [auth], lists are filtered per caller: private.
    let guarded = Gateway::start(&format!(
        "[auth]\nanonymous = true\nanonymous_roles = [\"echo\"]\n\n[roles.echo]\ntools = [\"a__echo\"]\n\n{}",
        stdio_upstream("a", &[], "")
    ));
    let modern = connect_modern(&guarded.url, TestClient::new()).await;
    let tools = modern.peer().list_tools(None).await.unwrap();
    assert_eq!(tools.tools.len(), 1, "{tools:?}");
    assert_eq!(tools.cache_scope, Some(CacheScope::Private));
    let prompts = modern.peer().list_prompts(None).await.unwrap();
    assert_eq!(prompts.cache_scope, Some(CacheScope::Private));
}

fn answer(name: &str) -> InputResponses {
    let mut r = InputResponses::new();
    r.insert(
        "fedgate-1".into(),
        serde_json::json!({"action": "accept", "content": {"name": name}}),
    );
    r
}

async fn parked(gw: &Gateway) -> String {
    let text = reqwest::get(format!("{}/metrics", gw.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with("fedgate_parked_calls "))
        .unwrap_or_default()
        .to_owned()
}

/// A handshake-era upstream asks for input by sending `elicitation/create` mid-call; a
/// stateless-era client cannot be sent requests, so fedgate answers input_required, parks the
/// upstream call, and resumes it with the client's retry.
#[tokio::test(flavor = "multi_thread")]
async fn legacy_upstream_elicitation_reaches_a_modern_client_as_input_required() {
    let gw = Gateway::start(&stdio_upstream("demo", &[], "era = \"legacy\""));
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_modern(&gw.url, client).await;

    // rmcp's client drives the rounds itself through its handler.
    let r = client
        .call_tool(CallToolRequestParams::new("demo__ask"))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "hello ada");
    assert_eq!(seen.elicitations.lock().as_slice(), ["What is your name?"]);

    // By hand: the input request, the sealed state, one resume, no replay.
    let first = client
        .peer()
        .call_tool_once(CallToolRequestParams::new("demo__ask"))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(ir) = first else {
        panic!("expected input_required, got {first:?}");
    };
    let asks = serde_json::to_value(ir.input_requests.as_ref().unwrap()).unwrap();
    assert_eq!(asks["fedgate-1"]["method"], "elicitation/create", "{asks}");
    assert_eq!(asks["fedgate-1"]["params"]["message"], "What is your name?");
    assert_eq!(parked(&gw).await, "fedgate_parked_calls 1");
    let state = ir.request_state.clone().unwrap();
    let retry = |state: String, args: serde_json::Value| {
        client.peer().call_tool_once(
            CallToolRequestParams::new("demo__ask")
                .with_arguments(args.as_object().cloned().unwrap())
                .with_input_responses(answer("grace"))
                .with_request_state(state),
        )
    };
    // Tampered, or the same state with other arguments: refused, the call stays parked.
    let mut tampered = state.clone().into_bytes();
    let i = tampered.len() - 5;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let err = retry(String::from_utf8(tampered).unwrap(), serde_json::json!({}))
        .await
        .unwrap_err();
    assert_eq!(code(err), -32602);
    let err = retry(state.clone(), serde_json::json!({"other": 1}))
        .await
        .unwrap_err();
    assert_eq!(code(err), -32602);
    let done = retry(state.clone(), serde_json::json!({})).await.unwrap();
    let CallToolResponse::Complete(done) = done else {
        panic!("expected completion, got {done:?}");
    };
    assert_eq!(first_text(&done), "hello grace");
    assert_eq!(parked(&gw).await, "fedgate_parked_calls 0");
    // Replayed.
    let err = retry(state, serde_json::json!({})).await.unwrap_err();
    assert_eq!(code(err), -32602);
}

/// A parked call whose client never comes back is released: the upstream's request gets an
/// error, the state is refused afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn unclaimed_parked_calls_expire() {
    let gw = Gateway::start(&format!(
        "[gateway]\ninput_wait_ms = 100\n\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let client = connect_modern(&gw.url, TestClient::new()).await;
    let first = client
        .peer()
        .call_tool_once(CallToolRequestParams::new("demo__ask"))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(ir) = first else {
        panic!("expected input_required, got {first:?}");
    };
    let released = async {
        while parked(&gw).await != "fedgate_parked_calls 0" {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), released)
        .await
        .expect("the parked call is released");
    let err = client
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("demo__ask")
                .with_input_responses(answer("late"))
                .with_request_state(ir.request_state.unwrap()),
        )
        .await
        .unwrap_err();
    assert_eq!(code(err), -32602);
    // The upstream is free again.
    let r = call(&client, "demo__echo", serde_json::json!({"text": "ok"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: ok");
}

/// One merged acknowledgement: URIs no upstream serves are left out of it. (Updates across
/// eras are checked in `rmcp_matrix.rs` and `sdk_clients.rs`.)
#[tokio::test(flavor = "multi_thread")]
async fn listen_acknowledges_only_resources_an_upstream_serves() {
    // Two upstreams with resources, so an unmatched URI has no default upstream.
    let gw = Gateway::start(&format!(
        "{}{}",
        stdio_upstream("old", &["--scheme", "old"], "era = \"legacy\""),
        stdio_upstream("other", &[], "")
    ));
    let modern = connect_modern(&gw.url, TestClient::new()).await;
    let filter = SubscriptionFilter::builder()
        .tools_list_changed()
        .resource_subscriptions(vec!["old://notes/b".to_owned(), "nowhere://x".to_owned()])
        .build();
    let sub = modern.peer().listen(filter).await.unwrap();
    assert_eq!(
        sub.acknowledged().resource_subscriptions,
        Some(vec!["old://notes/b".to_owned()])
    );
    assert_eq!(sub.acknowledged().tools_list_changed, Some(true));
}

/// With several calls in flight on one stdio connection, an upstream request cannot be tied
/// to its call (stdio carries no link): fedgate refuses it with a clear error instead of
/// asking the wrong client.
#[tokio::test(flavor = "multi_thread")]
async fn unattributable_stdio_requests_are_refused() {
    let gw = Gateway::start(&stdio_upstream("demo", &[], "era = \"legacy\""));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let peer = client.peer().clone();
    let slow = tokio::spawn(async move {
        peer.call_tool(
            CallToolRequestParams::new("demo__slow").with_arguments(
                serde_json::json!({"ms": 3000})
                    .as_object()
                    .cloned()
                    .unwrap(),
            ),
        )
        .await
    });
    // The slow call must be in flight at the upstream first.
    let stats = || async {
        let r = call(&client, "demo__stats", serde_json::json!({}))
            .await
            .unwrap();
        serde_json::from_str::<serde_json::Value>(&first_text(&r)).unwrap()
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        while stats().await["calls"].as_u64().unwrap() < 2 {}
    })
    .await
    .expect("the slow call reached the upstream");
    let r = call(&client, "demo__ask", serde_json::json!({})).await;
    let text = match r {
        Ok(r) => format!("{r:?}"),
        Err(e) => e.to_string(),
    };
    assert!(text.contains("cannot tell which client call"), "{text}");
    slow.abort();
}

/// The spec asks `Mcp-Method` of requests; some SDKs post notifications without it (the TS
/// SDK's `notifications/cancelled` after closing a listen stream). fedgate accepts those.
#[tokio::test(flavor = "multi_thread")]
async fn stateless_notifications_without_mcp_method_are_accepted() {
    let gw = Gateway::start(&stdio_upstream("a", &[], ""));
    let post = |headers: &[(&str, &str)], body: serde_json::Value| {
        let mut r = reqwest::Client::new()
            .post(&gw.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28");
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.json(&body).send()
    };
    let note = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "listen:0"}});
    let r = post(&[], note).await.unwrap();
    assert_eq!(r.status().as_u16(), 202, "{}", r.text().await.unwrap());
    // A request without the header is still refused, as the spec requires.
    let req = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let r = post(&[], req).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
}

/// Namespacing rewrites the tool name; the routing headers of the upstream hop follow the
/// rewritten body (`Mcp-Name` is the upstream's own name, `Mcp-Param-*` mirrors the argument).
#[tokio::test(flavor = "multi_thread")]
async fn routing_headers_follow_the_rewritten_body() {
    let (h, _server) = http_upstream("h", "era = \"modern\"\nrename = { headers = \"hdrs\" }");
    let gw = Gateway::start(&h);
    let client = connect_modern(&gw.url, TestClient::new()).await;
    // The client learns the x-mcp-header parameter from the list, as SDKs do.
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "h__hdrs"));
    // The call itself as an SDK sends it, headers included (raw: rmcp's client caches a tool's
    // header parameters only from some of its answer paths, so it sometimes leaves them out).
    let answer = reqwest::Client::new()
        .post(&gw.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "h__hdrs")
        .header("mcp-param-region", "eu-west")
        .json(
            &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "h__hdrs", "arguments": {"region": "eu-west"},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                      "io.modelcontextprotocol/clientCapabilities": {}}}}),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let answer = common::raw::last_message(&answer);
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    let seen: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(seen["mcp-method"], "tools/call", "{seen}");
    assert_eq!(seen["mcp-name"], "headers", "{seen}");
    assert_eq!(seen["mcp-param-region"], "eu-west", "{seen}");
    assert_eq!(seen["region"], "eu-west", "{seen}");
}

/// An idempotency key on an input-required call: the round is not recorded as the call's
/// answer, the retry with the answers completes it, and a later repeat gets that answer.
#[tokio::test(flavor = "multi_thread")]
async fn idempotency_keys_do_not_freeze_input_required_rounds() {
    use rmcp::model::{RequestMetaObject, ServerResult};
    let gw = Gateway::start(&stdio_upstream("demo", &[], "era = \"legacy\""));
    let client = connect_modern(&gw.url, TestClient::new()).await;
    let keyed = |p: CallToolRequestParams| {
        let mut meta = RequestMetaObject::default();
        meta.insert("idempotencyKey".into(), "k-1".into());
        call_with_meta(&client, p, meta)
    };
    let ServerResult::InputRequiredResult(ir) =
        keyed(CallToolRequestParams::new("demo__ask")).await
    else {
        panic!("expected input_required");
    };
    let done = keyed(
        CallToolRequestParams::new("demo__ask")
            .with_input_responses(answer("lin"))
            .with_request_state(ir.request_state.unwrap()),
    )
    .await;
    let ServerResult::CallToolResult(done) = done else {
        panic!("expected completion, got {done:?}");
    };
    assert_eq!(first_text(&done), "hello lin");
    // The same key again: the recorded final answer, not another input round.
    let again = keyed(CallToolRequestParams::new("demo__ask")).await;
    let ServerResult::CallToolResult(again) = again else {
        panic!("expected the recorded answer, got {again:?}");
    };
    assert_eq!(first_text(&again), "hello lin");
}

/// A stateless-era client that closes its `subscriptions/listen` stream (how that era ends a
/// subscription) is ordinary: nothing is logged at ERROR for it (rmcp reports the answer it can
/// no longer send; fedgate drops that line).
#[tokio::test(flavor = "multi_thread")]
async fn a_closed_listen_stream_leaves_no_error_in_the_log() {
    let gw = Gateway::start(&stdio_upstream("a", &[], ""));
    for _ in 0..3 {
        let mut resp = reqwest::Client::new()
            .post(&gw.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen")
            .json(
                &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
                "params": {"notifications": {"toolsListChanged": true}, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                    "io.modelcontextprotocol/clientCapabilities": {}}}}),
            )
            .send()
            .await
            .unwrap();
        // The acknowledgement, then the client goes away.
        let first = resp.chunk().await.unwrap().unwrap_or_default();
        assert!(
            String::from_utf8_lossy(&first).contains("acknowledged"),
            "{first:?}"
        );
        drop(resp);
    }
    // A call after them is answered, so the closed streams have been dealt with.
    let client = connect_modern(&gw.url, TestClient::new()).await;
    let r = call(&client, "a__slow", serde_json::json!({"ms": 300}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "slept 300");
    let log = gw.stderr();
    assert!(!log.contains("ERROR"), "{log}");
}

/// A stateless-era call that emits nothing before its result is answered as one
/// `application/json` body; one that sends progress first is answered as an SSE stream, so no
/// message is lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_stateless_call_that_emits_nothing_first_is_answered_as_plain_json() {
    let gw = Gateway::start(&stdio_upstream("demo", &[], ""));
    let post = |tool: &str, args: serde_json::Value, accept: &str, meta: serde_json::Value| {
        let mut meta_obj = serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}});
        if let (Some(m), Some(extra)) = (meta_obj.as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        reqwest::Client::new()
            .post(&gw.url)
            .header("content-type", "application/json")
            .header("accept", accept)
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", tool)
            .json(
                &serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": tool, "arguments": args, "_meta": meta_obj}}),
            )
            .send()
    };
    let both = "application/json, text/event-stream";
    let r = post(
        "demo__echo",
        serde_json::json!({"text": "hi"}),
        both,
        serde_json::json!({}),
    )
    .await
    .unwrap();
    let kind = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("application/json"), "{kind}");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["id"], 7, "{body}");
    assert_eq!(body["result"]["content"][0]["text"], "echo: hi", "{body}");
    // Progress before the result: the answer is a stream carrying both.
    let r = post(
        "demo__progress",
        serde_json::json!({"steps": 2}),
        both,
        serde_json::json!({"progressToken": "p1"}),
    )
    .await
    .unwrap();
    let kind = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("text/event-stream"), "{kind}");
    let text = r.text().await.unwrap();
    assert!(text.contains("notifications/progress"), "{text}");
    assert_eq!(
        common::raw::last_message(&text)["result"]["content"][0]["text"],
        "done 2",
        "{text}"
    );
}
