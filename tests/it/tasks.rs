//! The tasks extension through a real fedgate, over raw HTTP (so every header and `_meta` key
//! is the test's own): the conformance fixture runs the tasks behind a stateless-era hop; the
//! caller sees gateway handles bound to its identity.

use crate::common;

use common::{raw::*, *};
use serde_json::{Value, json};

const ANN: &str = "ann-key-0123456789";
const BOB: &str = "bob-key-0123456789";

fn config(fixture: &UrlProcess) -> String {
    format!(
        "[auth]\n[[auth.api_keys]]\nname = \"ann\"\nsha256 = \"{}\"\nroles = [\"all\"]\n\
         [[auth.api_keys]]\nname = \"bob\"\nsha256 = \"{}\"\nroles = [\"all\"]\n\n\
         [roles.all]\ntools = [\"*\"]\n\n\
         [upstreams.fx]\nkind = \"http\"\nurl = \"{}\"\nera = \"modern\"\n",
        sha(ANN),
        sha(BOB),
        fixture.url
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_task_reaches_the_caller_as_a_handle_only_it_can_use() {
    let fixture = UrlProcess::fixture();
    let gw = Gateway::start(&config(&fixture));
    let url = gw.url.as_str();

    let (_, discover) = rpc(url, Some(ANN), "server/discover", None, json!({}), true).await;
    assert!(
        discover["result"]["capabilities"]["extensions"][TASKS].is_object(),
        "fedgate advertises the extension its upstream offers: {discover}"
    );

    let created = raw_call(
        url,
        ANN,
        "fx__slow_compute",
        json!({"seconds": 60, "label": "t"}),
    )
    .await;
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    assert_eq!(task["status"], "working", "{created}");
    assert!(
        task.get("ttlMs").is_some(),
        "ttlMs passes through: {created}"
    );
    let handle = task["taskId"].as_str().expect("a task id").to_owned();
    assert!(handle.starts_with("fgt1."), "a gateway handle: {handle}");

    // The handle routes back to the upstream's task, and comes back as itself.
    let got = task_get(url, ANN, &handle).await;
    assert_eq!(got["result"]["taskId"], handle, "{got}");
    assert_eq!(got["result"]["status"], "working", "{got}");

    // Another caller, an edited handle, a made-up id: the same -32602, nothing revealed.
    let mut edited = handle.clone().into_bytes();
    let at = edited.len() / 2;
    edited[at] = if edited[at] == b'x' { b'y' } else { b'x' };
    let edited = String::from_utf8(edited).unwrap();
    for (who, h) in [
        (BOB, handle.as_str()),
        (ANN, edited.as_str()),
        (ANN, "7c2e-upstream-id"),
    ] {
        let v = task_get(url, who, h).await;
        assert_eq!(code(&v), -32602, "{v}");
        let text = v.to_string();
        assert!(text.contains("unknown task"), "{text}");
        assert!(
            !text.contains("slow_compute"),
            "nothing of the task shows: {text}"
        );
    }
    let v = on_task(url, Some(BOB), "tasks/cancel", Some(&handle), &handle, true).await;
    assert_eq!(code(&v), -32602, "another caller cannot cancel it: {v}");
    // The handle named in `Mcp-Name`'s Base64 form is the same handle.
    let b64 = {
        use base64::Engine as _;
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(&handle)
        )
    };
    let got = on_task(url, Some(ANN), "tasks/get", Some(&b64), &handle, true).await;
    assert_eq!(got["result"]["taskId"], handle, "{got}");

    // Every tasks request is authenticated, headers must match, the extension must be declared.
    let (status, _) = rpc(
        url,
        None,
        "tasks/get",
        Some(&handle),
        json!({"taskId": handle}),
        true,
    )
    .await;
    assert_eq!(status, 401);
    let v = on_task(url, Some(ANN), "tasks/get", Some("other"), &handle, true).await;
    assert_eq!(code(&v), -32020, "Mcp-Name must equal the handle: {v}");
    let v = on_task(url, Some(ANN), "tasks/get", Some(&handle), &handle, false).await;
    assert_eq!(code(&v), -32021, "{v}");
    assert!(
        v["error"]["data"]["requiredCapabilities"]["extensions"][TASKS].is_object(),
        "{v}"
    );
    for removed in ["tasks/result", "tasks/list"] {
        let v = on_task(url, Some(ANN), removed, None, &handle, true).await;
        assert_eq!(code(&v), -32601, "{removed}: {v}");
    }

    // Cancelling goes to the upstream: the task settles `cancelled`, not `completed`.
    let v = on_task(url, Some(ANN), "tasks/cancel", Some(&handle), &handle, true).await;
    assert_eq!(v["result"], json!({"resultType": "complete"}), "{v}");
    let done = task_poll(url, ANN, &handle, |t| t["status"] != "working").await;
    assert_eq!(done["status"], "cancelled", "{done}");
    let metrics = gw.metrics_as(ANN).await;
    assert!(
        metrics.contains(r#"method="tasks/get",outcome="ok""#)
            && metrics.contains(r#"method="tasks/cancel",outcome="ok""#),
        "tasks requests are counted like calls"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_asks_for_input_and_takes_the_answers_through_update() {
    let fixture = UrlProcess::fixture();
    let gw = Gateway::start(&config(&fixture));
    let url = gw.url.as_str();
    let created = raw_call(url, ANN, "fx__confirm_delete", json!({"filename": "a.txt"})).await;
    let handle = created["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    let asking = task_poll(url, ANN, &handle, |t| t["status"] == "input_required").await;
    assert_eq!(
        asking["inputRequests"]["confirm"]["method"], "elicitation/create",
        "the upstream's input request reaches the caller: {asking}"
    );
    assert!(asking.get("requestState").is_none(), "{asking}");

    let update = |answers: Value| {
        let h = handle.clone();
        async move {
            rpc(
                url,
                Some(ANN),
                "tasks/update",
                Some(&h),
                json!({"taskId": h, "inputResponses": answers}),
                true,
            )
            .await
            .1
        }
    };
    // Unknown keys are ignored (acknowledged, nothing changes).
    let v = update(json!({"no-such-key": {"action": "accept", "content": {}}})).await;
    assert_eq!(v["result"], json!({"resultType": "complete"}), "{v}");
    assert_eq!(
        task_get(url, ANN, &handle).await["result"]["status"],
        "input_required"
    );

    let v = update(json!({"confirm": {"action": "accept", "content": {"confirm": true}}})).await;
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    let done = task_poll(url, ANN, &handle, |t| t["status"] == "completed").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["taskId"], handle);
    assert!(
        done["result"].to_string().contains("Deleted a.txt"),
        "{done}"
    );
}

/// Handshake-era callers never see tasks, even if they claim the extension at `initialize`:
/// their calls run synchronously, and a tool that needs a task is refused upstream.
#[tokio::test(flavor = "multi_thread")]
async fn handshake_era_callers_never_see_tasks() {
    let fixture = UrlProcess::fixture();
    let gw = Gateway::start(&config(&fixture));
    let post = |session: Option<String>, body: Value| {
        let url = gw.url.clone();
        async move {
            let mut r = reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("authorization", format!("Bearer {ANN}"))
                .header("mcp-protocol-version", "2025-11-25");
            if let Some(s) = &session {
                r = r.header("mcp-session-id", s);
            }
            let resp = r.json(&body).send().await.expect("request");
            let sid = resp
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            (sid, last_message(&resp.text().await.expect("body")))
        }
    };
    let (sid, _) = post(
        None,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "clientInfo": {"name": "raw", "version": "0"},
            "capabilities": {"extensions": {TASKS: {}}}}}),
    )
    .await;
    let sid = sid.expect("a session");
    post(
        Some(sid.clone()),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    let call = |id: u32, tool: &str, args: Value| {
        post(
            Some(sid.clone()),
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": tool, "arguments": args}}),
        )
    };
    let (_, v) = call(
        1,
        "fx__slow_compute",
        json!({"seconds": 0, "label": "sync"}),
    )
    .await;
    assert!(v["result"].get("taskId").is_none(), "no task: {v}");
    assert!(
        first_text_of(&v).contains("completed after 0 seconds"),
        "{v}"
    );
    let (_, v) = call(2, "fx__failing_job", json!({})).await;
    assert!(
        v.to_string().contains("32021"),
        "a task-only tool is refused for want of the extension: {v}"
    );
}

fn first_text_of(v: &Value) -> String {
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Opens a stateless-era `subscriptions/listen` as `token` naming `task_ids`; the response.
async fn listen_for_tasks(url: &str, token: &str, task_ids: &[&str]) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .header("authorization", format!("Bearer {token}"))
        .json(
            &json!({"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": task_ids}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}}}}}),
        )
        .send()
        .await
        .expect("listen")
}

/// Reads SSE `data:` messages off `resp` until `stop` holds for one (returned with the rest).
async fn messages_until(resp: &mut reqwest::Response, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut buf = String::new();
    let mut seen = Vec::new();
    while let Some(chunk) = resp.chunk().await.expect("stream") {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            for line in event.lines() {
                if let Some(data) = line.strip_prefix("data:")
                    && let Ok(v) = serde_json::from_str::<Value>(data.trim())
                {
                    let done = stop(&v);
                    seen.push(v);
                    if done {
                        return seen;
                    }
                }
            }
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listen_stream_naming_a_task_hears_its_status_until_it_ends() {
    let fixture = UrlProcess::fixture();
    let gw = Gateway::start(&config(&fixture));
    let url = gw.url.as_str();
    let created = raw_call(
        url,
        ANN,
        "fx__slow_compute",
        json!({"seconds": 1, "label": "n"}),
    )
    .await;
    let handle = created["result"]["taskId"]
        .as_str()
        .expect("a task handle")
        .to_owned();

    // Bob's stream may not follow Ann's task: it is acknowledged with no task at all.
    let mut bobs = listen_for_tasks(url, BOB, &[&handle]).await;
    let ack = messages_until(&mut bobs, |_| true).await;
    assert_eq!(
        ack[0]["method"], "notifications/subscriptions/acknowledged",
        "{ack:?}"
    );
    assert_eq!(
        ack[0]["params"]["notifications"]["taskIds"],
        json!([]),
        "{ack:?}"
    );
    drop(bobs);

    // Ann's stream: the acknowledgement names her task (not the made-up one), then the task's
    // state as tasks/get tells it, under the handle, until it completes with its result.
    let mut anns = listen_for_tasks(url, ANN, &[&handle, "fgt1.made-up"]).await;
    assert!(
        anns.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let seen = messages_until(&mut anns, |m| m["params"]["status"] == "completed").await;
    assert_eq!(
        seen[0]["params"]["notifications"]["taskIds"],
        json!([handle]),
        "{seen:?}"
    );
    assert_eq!(
        seen[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-1",
        "{seen:?}"
    );
    let tasks: Vec<&Value> = seen[1..].iter().collect();
    assert!(!tasks.is_empty(), "{seen:?}");
    for n in &tasks {
        assert_eq!(n["method"], "notifications/tasks", "{n}");
        assert_eq!(
            n["params"]["taskId"], handle,
            "the handle, never the upstream's id: {n}"
        );
        assert_eq!(
            n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-1",
            "{n}"
        );
    }
    let last = tasks.last().unwrap();
    assert_eq!(last["params"]["status"], "completed", "{last}");
    assert!(
        last["params"]["result"]["content"].is_array(),
        "a completed task carries its result: {last}"
    );
    assert_eq!(tasks[0]["params"]["status"], "working", "{seen:?}");
}
