//! Session answers through a real fedgate, with a raw HTTP client: one JSON body for a call
//! that sends nothing before its result; otherwise a resumable stream (SEP-1699) — the priming
//! event, a stream dropped before a slow call's answer and resumed with `Last-Event-ID`, and
//! the resumptions fedgate refuses.

use crate::common;

use common::*;
use serde_json::{Value, json};

/// A handshake-era session over raw HTTP.
struct Session {
    url: String,
    id: String,
    http: reqwest::Client,
}

impl Session {
    async fn open(url: &str) -> Session {
        let http = reqwest::Client::new();
        let init = http
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .json(
                &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}}),
            )
            .send()
            .await
            .expect("initialize");
        let id = init.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let s = Session {
            url: url.to_owned(),
            id,
            http,
        };
        s.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        s
    }

    fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        self.http
            .request(method, &self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", &self.id)
    }

    async fn post(&self, body: Value) -> reqwest::Response {
        self.request(reqwest::Method::POST)
            .json(&body)
            .send()
            .await
            .expect("post")
    }

    async fn resume(&self, last_event_id: &str) -> reqwest::Response {
        self.request(reqwest::Method::GET)
            .header("last-event-id", last_event_id)
            .send()
            .await
            .expect("get")
    }
}

/// One SSE event: its `id`, `retry` and `data` fields.
#[derive(Debug, Default)]
struct Event {
    id: Option<String>,
    retry: Option<String>,
    data: String,
}

/// Reads events off `resp` until `stop` holds for one (which is returned with those before it).
async fn read_until(resp: &mut reqwest::Response, stop: impl Fn(&Event) -> bool) -> Vec<Event> {
    let mut buf = String::new();
    let mut events = Vec::new();
    while let Some(chunk) = resp.chunk().await.expect("stream") {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let raw: String = buf.drain(..end + 2).collect();
            let mut ev = Event::default();
            for line in raw.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    ev.id = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("retry:") {
                    ev.retry = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    ev.data.push_str(v.trim());
                }
            }
            let done = stop(&ev);
            events.push(ev);
            if done {
                return events;
            }
        }
    }
    events
}

fn is_answer(ev: &Event) -> bool {
    serde_json::from_str::<Value>(&ev.data).is_ok_and(|v| v["id"] == 2)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_dropped_before_a_slow_answer_resumes_with_it() {
    let gw = Gateway::start(&stdio_upstream("demo", &[], ""));
    let s = Session::open(&gw.url).await;
    let mut resp = s
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "demo__slow", "arguments": {"ms": 1500}}}))
        .await;
    let first = read_until(&mut resp, |_| true).await;
    let priming = &first[0];
    assert!(
        priming.data.is_empty(),
        "the priming event has empty data: {priming:?}"
    );
    assert_eq!(priming.retry.as_deref(), Some("3000"), "{priming:?}");
    let id = priming.id.clone().expect("the priming event has an id");
    // The client goes away before the answer; the call goes on.
    drop(resp);

    let mut resumed = s.resume(&id).await;
    assert_eq!(resumed.status(), 200);
    let events = read_until(&mut resumed, is_answer).await;
    let answer = events.last().expect("an event");
    assert!(
        is_answer(answer),
        "the response arrives on the resumed stream: {events:?}"
    );
    assert!(answer.data.contains("slept 1500"), "{answer:?}");
    assert!(answer.id.is_some(), "every event has an id: {answer:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn resumptions_of_other_streams_or_dropped_events_are_refused() {
    let gw = Gateway::start(&format!(
        "[gateway]\nreplay_events = 2\n{}",
        stdio_upstream("demo", &[], "")
    ));
    let a = Session::open(&gw.url).await;
    let b = Session::open(&gw.url).await;
    // Ten progress notifications 50 ms apart and the answer, more than the two events a stream
    // keeps; the client goes away after the first notification, long before the answer.
    let mut resp = a
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "demo__progress", "arguments": {"steps": 10, "delay_ms": 50},
                                "_meta": {"progressToken": "p"}}}))
        .await;
    let seen = read_until(&mut resp, |e| !e.data.is_empty()).await;
    drop(resp);
    let priming = seen[0].id.clone().unwrap();
    let progress = seen[1].id.clone().unwrap();

    // Once the rest is stored, what followed the priming event is gone: 410, not a silent gap.
    // (Until then a resumption may still succeed; each try is dropped at once.)
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    let gone = loop {
        let r = a.resume(&priming).await;
        if r.status() == 410 || tokio::time::Instant::now() > deadline {
            break r;
        }
        drop(r);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(gone.status(), 410);
    assert!(gone.text().await.unwrap().contains("no longer buffered"));
    let metrics = gw.metrics().await;
    assert!(
        metrics.lines().any(|l| l
            .starts_with(r#"fedgate_replay_events_dropped_total{reason="count"}"#)
            && !l.ends_with(" 0")),
        "drops are counted"
    );

    // Another session's stream, a made-up id, no id at all: 404 with the reason.
    for (who, id) in [(&b, progress.as_str()), (&a, "999999.0"), (&a, "not-an-id")] {
        let r = who.resume(id).await;
        assert_eq!(r.status(), 404, "{id}");
        let body = r.text().await.unwrap();
        assert!(body.contains("names no stream of this session"), "{body}");
    }

    // A stream read to its answer is released at once: there is nothing left to resume.
    let mut resp = a
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "demo__progress", "arguments": {"steps": 1, "delay_ms": 0},
                                "_meta": {"progressToken": "q"}}}))
        .await;
    let events = read_until(&mut resp, is_answer).await;
    let last = events.last().and_then(|e| e.id.clone()).unwrap();
    drop(resp);
    // Released when the server has finished the response body, which may trail the client's
    // read by a moment.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    let status = loop {
        let status = a.resume(&last).await.status();
        if status == 404 || tokio::time::Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(status, 404, "a delivered stream is not kept");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_sends_nothing_before_its_result_is_answered_in_one_json_body() {
    // However slow this machine, the echo is answered within the minute.
    let gw = Gateway::start(&format!(
        "[gateway]\nstream_after_ms = 60000\n{}",
        stdio_upstream("demo", &[], "")
    ));
    let s = Session::open(&gw.url).await;
    let resp = s
        .post(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                     "params": {"name": "demo__echo", "arguments": {"text": "hi"}}}))
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/json",
        "{}",
        gw.stderr()
    );
    let answer: Value = resp.json().await.expect("one JSON-RPC response");
    assert_eq!(answer["id"], 5, "{answer}");
    assert_eq!(
        answer["result"]["content"][0]["text"], "echo: hi",
        "{answer}"
    );

    // A call that reports progress first is streamed: the progress, then the answer.
    let mut resp = s
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "demo__progress", "arguments": {"steps": 2, "delay_ms": 0},
                                "_meta": {"progressToken": "p"}}}))
        .await;
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = read_until(&mut resp, is_answer).await;
    let progress = events
        .iter()
        .filter(|e| e.data.contains("notifications/progress"))
        .count();
    assert_eq!(progress, 2, "{events:?}");
    assert!(events.iter().all(|e| e.id.is_some()), "{events:?}");
}
