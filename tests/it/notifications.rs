//! Notifications and server-to-client requests through a real fedgate.

use crate::common;

use std::time::Duration;

use common::*;
use rmcp::{model::*, service::PeerRequestOptions};

#[tokio::test(flavor = "multi_thread")]
async fn list_changed_reaches_the_client_and_the_new_tool_is_callable() {
    // Handshake era end to end; stateless-era upstreams announce changes only through
    // subscriptions/listen, which the protocol-fidelity work adds.
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    assert!(
        call(&client, "demo__extra", serde_json::json!({}))
            .await
            .is_err(),
        "extra does not exist yet"
    );
    let before = *seen.tool_changes.lock();
    call(&client, "demo__toggle_extra", serde_json::json!({}))
        .await
        .unwrap();
    wait_for(&seen.tools_changed, "tools/list_changed", || {
        *seen.tool_changes.lock() > before
    })
    .await;
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "demo__extra"));
    let r = call(&client, "demo__extra", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "extra!");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn progress_is_relayed_with_the_clients_token() {
    let gw = Gateway::start(&format!("[gateway]\n{}", stdio_upstream("demo", &[], "")));
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    let r = call(&client, "demo__progress", serde_json::json!({"steps": 4}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "done 4");
    // rmcp's client dispatches notifications on spawned tasks, so they may be recorded a moment
    // after the response; the wire order is checked in `progress_precedes_response_under_load`.
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let n = seen.progress.lock().len();
            if n >= 4 {
                return n;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("4 progress notifications");
    assert_eq!(got, 4);
    let mut msgs: Vec<_> = seen
        .progress
        .lock()
        .iter()
        .map(|p| p.message.clone().unwrap_or_default())
        .collect();
    msgs.sort();
    assert_eq!(msgs, vec!["step 1", "step 2", "step 3", "step 4"]);
    client.cancel().await.unwrap();
}

/// Raw Streamable HTTP: each concurrent call's SSE stream must carry all its progress events
/// before its response. Checked on the wire, many calls in flight at once.
#[tokio::test(flavor = "multi_thread")]
async fn progress_precedes_response_under_load() {
    let (notes, _server) = http_upstream("notes", "");
    let gw = Gateway::start(&format!(
        "[gateway]\n{}{notes}",
        stdio_upstream("demo", &[], "")
    ));
    let http = reqwest::Client::new();
    let post = |body: serde_json::Value, session: Option<String>| {
        let mut rb = http
            .post(&gw.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(s) = session {
            rb = rb.header("mcp-session-id", s);
        }
        rb.json(&body).send()
    };
    let init = post(
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}),
        None,
    )
    .await
    .unwrap();
    let session = init
        .headers()
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let _ = init.text().await;
    post(
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        Some(session.clone()),
    )
    .await
    .unwrap();

    let calls = (1..=48).map(|i| {
        let tool = if i % 2 == 0 {
            "demo__progress"
        } else {
            "notes__progress"
        };
        let body = serde_json::json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
            "name": tool, "arguments": {"steps": 5}, "_meta": {"progressToken": format!("t{i}")}}});
        let fut = post(body, Some(session.clone()));
        async move {
            let text = fut.await.unwrap().text().await.unwrap();
            let mut progress = 0;
            for data in text.lines().filter_map(|l| l.strip_prefix("data:")) {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(data.trim()) else {
                    continue;
                };
                if v["method"] == "notifications/progress" {
                    assert_eq!(
                        v["params"]["progressToken"],
                        format!("t{i}"),
                        "token mapped back"
                    );
                    progress += 1;
                } else if v["id"] == i {
                    assert_eq!(
                        progress, 5,
                        "call {i}: all progress before the response, got {progress}: {text}"
                    );
                    return;
                }
            }
            panic!("call {i}: no response in {text}");
        }
    });
    futures::future::join_all(calls).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancellation_reaches_the_upstream() {
    let gw = Gateway::start(&format!("[gateway]\n{}", stdio_upstream("demo", &[], "")));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let req = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("demo__slow")
            .with_arguments(args(serde_json::json!({"ms": 60000}))),
    ));
    let handle = client
        .peer()
        .send_request_with_option(req, PeerRequestOptions::no_options())
        .await
        .unwrap();
    // The upstream must have the call before we cancel it: wait until its counter shows it.
    let stats = || async {
        let r = call(&client, "demo__stats", serde_json::json!({}))
            .await
            .unwrap();
        r.structured_content.unwrap()
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        while stats().await["calls"].as_u64().unwrap() < 2 {}
    })
    .await
    .expect("slow call reached the upstream");
    handle.cancel(Some("test".into())).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        while stats().await["cancelled"].as_u64().unwrap() < 1 {}
    })
    .await
    .expect("the upstream saw the cancellation");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn elicitation_round_trip_handshake_era() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    let r = call(&client, "demo__ask", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(
        first_text(&r),
        "hello ada",
        "the client's answer reached the upstream"
    );
    assert_eq!(seen.elicitations.lock().as_slice(), ["What is your name?"]);
    let (_, ready) = gw.readyz().await;
    assert_eq!(ready["upstreams"]["demo"]["era"], "handshake");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn elicitation_round_trip_stateless_era() {
    let (notes, _server) = http_upstream("notes", "era = \"modern\"");
    let gw = Gateway::start(&format!("[gateway]\n{notes}"));
    let client = connect_modern(&gw.url, TestClient::new()).await;
    let first = client
        .peer()
        .call_tool_once(CallToolRequestParams::new("notes__ask"))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(ir) = first else {
        panic!("expected an input-required result, got {first:?}");
    };
    let state = ir.request_state.clone().expect("request state echoed");
    let mut responses = InputResponses::new();
    responses.insert(
        "name".into(),
        serde_json::json!({"action": "accept", "content": {"name": "grace"}}),
    );
    let second = client
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("notes__ask")
                .with_input_responses(responses)
                .with_request_state(state),
        )
        .await
        .unwrap();
    let CallToolResponse::Complete(done) = second else {
        panic!("expected completion, got {second:?}");
    };
    assert_eq!(first_text(&done), "hello grace");
    let (_, ready) = gw.readyz().await;
    assert_eq!(ready["upstreams"]["notes"]["era"], "stateless");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn resource_updates_reach_subscribers() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    #[allow(deprecated)]
    client
        .peer()
        .subscribe(SubscribeRequestParams::new("demo://notes/a"))
        .await
        .unwrap();
    call(
        &client,
        "demo__write_note",
        serde_json::json!({"key": "a", "value": "1"}),
    )
    .await
    .unwrap();
    wait_for(&seen.updated, "resources/updated", || {
        seen.resource_updates
            .lock()
            .iter()
            .any(|u| u == "demo://notes/a")
    })
    .await;
    client.cancel().await.unwrap();
}

/// Stateless era end to end: fedgate listens on the upstream's subscriptions/listen stream and
/// serves subscriptions/listen to the client.
#[tokio::test(flavor = "multi_thread")]
async fn list_changed_in_the_stateless_era() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"modern\"")
    ));
    let client = connect_modern(&gw.url, TestClient::new()).await;
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut sub = client.peer().listen(filter).await.unwrap();
    call(&client, "demo__toggle_extra", serde_json::json!({}))
        .await
        .unwrap();
    let note = tokio::time::timeout(Duration::from_secs(20), sub.next())
        .await
        .expect("a notification on the listen stream")
        .unwrap()
        .expect("stream open");
    assert!(
        matches!(note, ServerNotification::ToolListChangedNotification(_)),
        "{note:?}"
    );
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == "demo__extra"),
        "refreshed before notifying"
    );
    let r = call(&client, "demo__extra", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "extra!");
    sub.cancel().await.unwrap();
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn roots_request_reaches_the_calling_client() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "demo__roots", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "file:///work/project");
    client.cancel().await.unwrap();
}

/// A session that ends without unsubscribing leaves nothing behind: its subscription is
/// released at the upstream (the demo counts what it holds) once the next session starts.
#[tokio::test(flavor = "multi_thread")]
async fn a_closed_sessions_subscriptions_are_released_upstream() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let held = |c: &Client| {
        let peer = c.peer().clone();
        async move {
            let r = peer
                .call_tool(CallToolRequestParams::new("demo__stats"))
                .await
                .expect("stats");
            r.structured_content.expect("stats")["subscriptions"]
                .as_i64()
                .expect("subscriptions")
        }
    };
    let a = connect_legacy(&gw.url, TestClient::new()).await;
    #[allow(deprecated)]
    a.peer()
        .subscribe(SubscribeRequestParams::new("demo://notes/a"))
        .await
        .expect("subscribe");
    assert_eq!(held(&a).await, 1);
    // Ends the session (DELETE) without unsubscribing.
    a.cancel().await.expect("close");
    // Each new session sweeps what closed ones left; the upstream hears the unsubscribe.
    let mut sessions = 0;
    loop {
        let b = connect_legacy(&gw.url, TestClient::new()).await;
        sessions += 1;
        if held(&b).await == 0 {
            break;
        }
        assert!(sessions < 50, "the subscription was never released");
        b.cancel().await.expect("close");
    }
}

/// Reads SSE `data:` events until those read so far satisfy `want`; those events. Bounded.
async fn events_until(
    stream: &mut reqwest::Response,
    want: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let mut seen = Vec::new();
    let mut buf = String::new();
    let read = async {
        loop {
            while let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                for data in event.lines().filter_map(|l| l.strip_prefix("data: ")) {
                    let v: serde_json::Value = serde_json::from_str(data).expect("JSON event");
                    seen.push(v);
                    if want(&seen) {
                        return;
                    }
                }
            }
            match stream.chunk().await.expect("stream") {
                Some(chunk) => buf.push_str(&String::from_utf8_lossy(&chunk)),
                None => panic!("the stream ended; events: {seen:?}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .unwrap_or_else(|_| panic!("no such event"));
    seen
}

/// A stateless-era listen stream over raw HTTP: acknowledged with what the gateway accepts of
/// the filter, then list changes and updates of the accepted resource (nothing it did not ask
/// for), each naming the subscription.
#[tokio::test(flavor = "multi_thread")]
async fn a_raw_listen_stream_is_acknowledged_and_carries_what_it_accepted() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let meta = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let listen = serde_json::json!({
        "jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen",
        "params": {"_meta": meta, "notifications": {
            "toolsListChanged": true,
            "resourceSubscriptions": ["demo://notes/a"],
        }},
    });
    let mut stream = reqwest::Client::new()
        .post(&gw.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .json(&listen)
        .send()
        .await
        .expect("listen");
    assert_eq!(stream.status().as_u16(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let ack = events_until(&mut stream, |_| true).await;
    let ack = &ack[0];
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"],
        serde_json::json!({"toolsListChanged": true, "resourceSubscriptions": ["demo://notes/a"]}),
        "what was asked for and is served is accepted: {ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "sub-1"
    );

    let client = connect_legacy(&gw.url, TestClient::new()).await;
    call(&client, "demo__toggle_extra", serde_json::json!({}))
        .await
        .unwrap();
    call(
        &client,
        "demo__write_note",
        serde_json::json!({"key": "a", "value": "1"}),
    )
    .await
    .unwrap();
    // Both arrive, in either order (each is sent by a task of its own).
    let method = |v: &serde_json::Value, m: &str| v["method"] == m;
    let seen = events_until(&mut stream, |seen| {
        [
            "notifications/tools/list_changed",
            "notifications/resources/updated",
        ]
        .iter()
        .all(|m| seen.iter().any(|v| method(v, m)))
    })
    .await;
    for v in &seen {
        assert_eq!(
            v["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-1",
            "{v}"
        );
        assert_ne!(
            v["method"], "notifications/prompts/list_changed",
            "not asked for"
        );
    }
    client.cancel().await.unwrap();
}
