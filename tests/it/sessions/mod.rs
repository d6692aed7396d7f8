//! Handshake-era sessions the edge holds itself (no rmcp session worker behind them), over raw
//! HTTP so every answer's shape is visible: `initialize` answered as one JSON body, calls,
//! `ping`, `logging/setLevel` and the GET stream served by the edge, a request only rmcp serves
//! handing the session over to it with the stream's buffer intact, and DELETE ending it.

use crate::common;

use std::time::Duration;

use common::*;

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

struct Raw {
    http: reqwest::Client,
    url: String,
    sid: String,
}

impl Raw {
    /// Opens a session with a plain `initialize`; the answer must be one JSON body.
    async fn open(url: &str) -> Raw {
        let http = reqwest::Client::new();
        let r = http
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(INIT)
            .send()
            .await
            .expect("initialize");
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(
            r.headers()["content-type"],
            "application/json",
            "the edge answers initialize as one JSON body (rmcp's transport answers with SSE)"
        );
        let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        let body: serde_json::Value = r.json().await.expect("JSON");
        assert_eq!(body["id"], 0);
        assert_eq!(body["result"]["protocolVersion"], "2025-11-25", "{body}");
        assert_eq!(body["result"]["serverInfo"]["name"], "fedgate", "{body}");
        let raw = Raw {
            http,
            url: url.to_owned(),
            sid,
        };
        let done = raw
            .post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        assert_eq!(done.status().as_u16(), 202);
        raw
    }

    async fn post(&self, body: &str) -> reqwest::Response {
        self.http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &self.sid)
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_owned())
            .send()
            .await
            .expect("POST")
    }

    /// A request's answer: one JSON body, or (a call slower than `stream_after_ms`) the last
    /// event of an SSE stream.
    async fn ask(&self, body: &str) -> serde_json::Value {
        let r = self.post(body).await;
        assert_eq!(r.status().as_u16(), 200);
        let sse = r.headers()["content-type"] == "text/event-stream";
        let text = r.text().await.expect("body");
        let json = match sse {
            true => text
                .lines()
                .rev()
                .filter_map(|l| l.strip_prefix("data: "))
                .find(|d| !d.is_empty())
                .unwrap_or_default(),
            false => &text,
        };
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    /// A request the edge answers itself: one JSON body.
    async fn ask_edge(&self, body: &str) -> serde_json::Value {
        let r = self.post(body).await;
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(
            r.headers()["content-type"],
            "application/json",
            "the edge answers {body} as one JSON body (rmcp's transport answers with SSE)"
        );
        r.json().await.expect("JSON")
    }

    async fn get(&self, last_event_id: Option<&str>) -> reqwest::Response {
        let mut r = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &self.sid)
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(id) = last_event_id {
            r = r.header("last-event-id", id);
        }
        r.send().await.expect("GET")
    }

    async fn delete(&self) -> reqwest::Response {
        self.http
            .delete(&self.url)
            .header("mcp-session-id", &self.sid)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
            .await
            .expect("DELETE")
    }
}

/// Reads an SSE body until a whole event's data contains `needle`; that event's id (its
/// fields may come in any order). Bounded.
async fn event_with(stream: &mut reqwest::Response, seen: &mut String, needle: &str) -> String {
    let read = async {
        loop {
            while let Some(end) = seen.find("\n\n") {
                let event: String = seen.drain(..end + 2).collect();
                if event.contains(needle) {
                    return event
                        .lines()
                        .find_map(|l| l.strip_prefix("id: "))
                        .map(str::to_owned)
                        .unwrap_or_else(|| panic!("an event id in {event}"));
                }
            }
            let chunk = stream.chunk().await.expect("stream").expect("stream open");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .unwrap_or_else(|_| panic!("no event with {needle}; read: {seen}"))
}

fn sessions_active(metrics: &str) -> &str {
    metrics
        .lines()
        .find(|l| l.starts_with("fedgate_sessions_active "))
        .unwrap_or("no gauge")
}

#[tokio::test(flavor = "multi_thread")]
async fn every_request_of_a_session_is_answered_by_the_edge_on_its_own_streams() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let s = Raw::open(&gw.url).await;
    assert_eq!(
        sessions_active(&gw.metrics().await),
        "fedgate_sessions_active 1"
    );

    let pong = s.post(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).await;
    assert_eq!(pong.headers()["content-type"], "application/json");
    let pong: serde_json::Value = pong.json().await.expect("JSON");
    assert_eq!(
        pong,
        serde_json::json!({"jsonrpc":"2.0","id":1,"result":{}})
    );
    let level = s
        .ask(r#"{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"error"}}"#)
        .await;
    assert_eq!(level["result"], serde_json::json!({}), "{level}");

    // The GET stream is the edge's: a priming event, then the session's notifications with ids.
    let mut stream = s.get(None).await;
    assert_eq!(stream.status().as_u16(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    // A second GET while one is open only keeps alive; the first keeps the events.
    let second = s.get(None).await;
    assert_eq!(second.status().as_u16(), 200);
    let mut seen = String::new();
    let toggle = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"demo__toggle_extra","arguments":{}}}"#;
    let toggled = s.ask(toggle).await;
    assert!(toggled["result"].is_object(), "{toggled}");
    let first = event_with(&mut stream, &mut seen, "notifications/tools/list_changed").await;
    assert_ne!(
        first, "0",
        "a notification's id is stored, not the priming id"
    );

    // A session's request naming a protocol version in its `_meta` (the header names the
    // same) is the session's too: one JSON answer, the GET stream untouched.
    let named = s
        .http
        .post(&s.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &s.sid)
        .header("mcp-protocol-version", "2025-11-25")
        .body(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}"#)
        .send()
        .await
        .expect("POST");
    assert_eq!(named.status().as_u16(), 200);
    assert_eq!(named.headers()["content-type"], "application/json");
    let named: serde_json::Value = named.json().await.expect("JSON");
    assert_eq!(named["id"], 4, "{named}");
    assert!(named["result"]["tools"].is_array(), "{named}");
    // Naming another version than the header is refused with the request's id.
    let other = s
        .http
        .post(&s.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &s.sid)
        .header("mcp-protocol-version", "2025-06-18")
        .body(r#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}"#)
        .send()
        .await
        .expect("POST");
    assert_eq!(other.status().as_u16(), 400);
    let other: serde_json::Value = other.json().await.expect("JSON");
    assert_eq!(other["id"], 5, "{other}");
    assert_eq!(other["error"]["code"], -32020, "{other}");
    // A second `initialize` in the session is answered in it; the session stays one.
    let again = s
        .ask(r#"{"jsonrpc":"2.0","id":6,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"again","version":"1"}}}"#)
        .await;
    assert_eq!(again["result"]["protocolVersion"], "2025-11-25", "{again}");
    // A method this era does not serve: -32601 in the session's answer.
    let listen = s
        .ask(r#"{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}"#)
        .await;
    assert_eq!(listen["error"]["code"], -32601, "{listen}");
    // The same stream carries the next notification.
    let toggled = s.ask(&toggle.replace("\"id\":3", "\"id\":8")).await;
    assert!(toggled["result"].is_object(), "{toggled}");
    let next = event_with(&mut stream, &mut seen, "notifications/tools/list_changed").await;
    assert_ne!(next, first);
    assert_eq!(
        sessions_active(&gw.metrics().await),
        "fedgate_sessions_active 1"
    );
    assert_eq!(s.delete().await.status().as_u16(), 204);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_the_edge_holds_ends_with_delete() {
    let gw = Gateway::start(&format!("[gateway]\n{}", stdio_upstream("demo", &[], "")));
    let s = Raw::open(&gw.url).await;
    let echo = s
        .ask(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"hi"}}}"#)
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "echo: hi", "{echo}");
    assert_eq!(
        sessions_active(&gw.metrics().await),
        "fedgate_sessions_active 1"
    );
    assert_eq!(s.delete().await.status().as_u16(), 204);
    assert_eq!(
        sessions_active(&gw.metrics().await),
        "fedgate_sessions_active 0"
    );
    // Ended for good: neither the edge nor rmcp restores it.
    let after = s.post(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(after.status().as_u16(), 404);
    assert_eq!(s.delete().await.status().as_u16(), 404);
}

/// A session unused for `session_idle_ms` ends on its replica, unless its client listens on a
/// GET stream; a request with the ended session's id restores it at the edge.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_session_ends_unless_it_listens_and_its_id_restores_it() {
    let gw = Gateway::start(&format!(
        "[gateway]\nsession_idle_ms = 300\n\n{}",
        stdio_upstream("demo", &[], "")
    ));
    let idle = Raw::open(&gw.url).await;
    let listening = Raw::open(&gw.url).await;
    let stream = listening.get(None).await;
    assert_eq!(stream.status().as_u16(), 200);
    assert_eq!(
        sessions_active(&gw.metrics().await),
        "fedgate_sessions_active 2"
    );
    // The sweeper's tick is the only signal: poll the gauge, bounded.
    let swept = tokio::time::timeout(Duration::from_secs(10), async {
        while sessions_active(&gw.metrics().await) != "fedgate_sessions_active 1" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(swept.is_ok(), "the idle session did not end");
    let pong = idle
        .post(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .await;
    assert_eq!(pong.status().as_u16(), 200);
    assert_eq!(pong.headers()["content-type"], "application/json");
    assert_eq!(
        sessions_active(&gw.metrics().await),
        "fedgate_sessions_active 2",
        "restored from its id"
    );
    drop(stream);
}

/// `max_sessions` holds for an `initialize` that names its method in `Mcp-Method` too.
#[tokio::test(flavor = "multi_thread")]
async fn an_initialize_naming_its_method_is_counted_against_max_sessions() {
    let gw = Gateway::start(&format!(
        "[gateway]\nmax_sessions = 1\n\n{}",
        stdio_upstream("demo", &[], "")
    ));
    let _only = Raw::open(&gw.url).await;
    let refused = reqwest::Client::new()
        .post(&gw.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-method", "initialize")
        .body(INIT)
        .send()
        .await
        .expect("initialize");
    assert_eq!(refused.status().as_u16(), 503);
    assert_eq!(
        sessions_active(&gw.metrics().await),
        "fedgate_sessions_active 1"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn completion_tasks_and_subscriptions_keep_the_session_at_the_edge() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let s = Raw::open(&gw.url).await;
    let mut stream = s.get(None).await;
    assert_eq!(stream.status().as_u16(), 200);

    let sub = s
        .ask_edge(r#"{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"demo://notes/a"}}"#)
        .await;
    assert_eq!(sub["result"], serde_json::json!({}), "{sub}");
    let done = s
        .ask_edge(r#"{"jsonrpc":"2.0","id":2,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"demo__greeting"},"argument":{"name":"name","value":"ca"}}}"#)
        .await;
    assert_eq!(
        done["result"]["completion"]["values"],
        serde_json::json!(["carol"]),
        "{done}"
    );
    // `tasks/*` are gated as rmcp gates them: no upstream or flow here offers the extension.
    let task = s
        .ask_edge(r#"{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"none"}}"#)
        .await;
    assert_eq!(
        task["error"],
        serde_json::json!({"code": -32601, "message": "tasks/get"}),
        "{task}"
    );

    // The subscription's update reaches the session's GET stream, which the edge still serves.
    let write = s
        .ask(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"demo__write_note","arguments":{"key":"a","value":"1"}}}"#)
        .await;
    assert!(write["result"].is_object(), "{write}");
    let mut seen = String::new();
    event_with(&mut stream, &mut seen, "notifications/resources/updated").await;
    let unsub = s
        .ask_edge(r#"{"jsonrpc":"2.0","id":5,"method":"resources/unsubscribe","params":{"uri":"demo://notes/a"}}"#)
        .await;
    assert_eq!(unsub["result"], serde_json::json!({}), "{unsub}");
    assert_eq!(s.delete().await.status().as_u16(), 204);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_stream_is_served_by_the_edge_from_the_buffer() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}",
        stdio_upstream("demo", &[], "era = \"legacy\"")
    ));
    let s = Raw::open(&gw.url).await;
    let mut stream = s.get(None).await;
    let mut seen = String::new();
    let toggle = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"demo__toggle_extra","arguments":{{}}}}}}"#
        )
    };
    assert!(s.ask(&toggle(1)).await["result"].is_object());
    let first = event_with(&mut stream, &mut seen, "notifications/tools/list_changed").await;
    assert!(s.ask(&toggle(2)).await["result"].is_object());
    let second = event_with(&mut stream, &mut seen, "notifications/tools/list_changed").await;
    assert_ne!(first, second);

    // Resuming after the first event replays the second from the buffer, and then follows.
    let mut resumed = s.get(Some(&first)).await;
    assert_eq!(resumed.status().as_u16(), 200);
    assert_eq!(resumed.headers()["content-type"], "text/event-stream");
    let mut again = String::new();
    let replayed = event_with(&mut resumed, &mut again, "notifications/tools/list_changed").await;
    assert_eq!(replayed, second, "the missed event, with its id");
    assert!(s.ask(&toggle(3)).await["result"].is_object());
    let third = event_with(&mut resumed, &mut again, "notifications/tools/list_changed").await;
    // The edge kept the session: its first stream was not ended by a takeover and carries the
    // new event too.
    let live = event_with(&mut stream, &mut seen, "notifications/tools/list_changed").await;
    assert_eq!(live, third);
    // A made-up id is refused clearly, not answered with an empty stream.
    let unknown = s.get(Some("999999")).await;
    assert_eq!(unknown.status().as_u16(), 404);
    assert_eq!(s.delete().await.status().as_u16(), 204);
}

mod edge_wire;
