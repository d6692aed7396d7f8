//! A light keep-alive HTTP/1.1 load client for MCP `tools/call`: one shared session, `conc`
//! connections with one task each, every response checked (plain JSON or an SSE stream).

use std::{
    net::SocketAddr,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use bytes::Bytes;
use http::{
    HeaderName, HeaderValue, Method, Request, StatusCode, Uri,
    header::{ACCEPT, CONTENT_TYPE, HOST},
};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpStream, time::Instant};

pub struct Cell {
    pub calls: usize,
    pub failures: usize,
    pub secs: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

const PROTOCOL: &str = "2025-06-18";
/// A call that takes longer than this is a failure, and its connection is replaced.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const SESSION: HeaderName = HeaderName::from_static("mcp-session-id");
const VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// JSON-RPC ids, unique across all calls of this process: ids must not repeat within a session,
/// and every connection (and every `drive`) shares the one session.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

struct Conn {
    tx: SendRequest<Full<Bytes>>,
    host: HeaderValue,
}

struct Answer {
    status: StatusCode,
    sse: bool,
    session: Option<HeaderValue>,
    body: Bytes,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Result<Conn, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (tx, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake {addr}: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let host = HeaderValue::from_str(&addr.to_string()).map_err(|e| e.to_string())?;
        Ok(Conn { tx, host })
    }

    /// POSTs `body` to `/mcp` and reads the whole response.
    async fn post(
        &mut self,
        body: String,
        session: Option<&HeaderValue>,
        versioned: bool,
    ) -> Result<Answer, String> {
        let mut req = Request::new(Full::new(Bytes::from(body)));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = Uri::from_static("/mcp");
        let h = req.headers_mut();
        h.insert(HOST, self.host.clone());
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if let Some(s) = session {
            h.insert(SESSION, s.clone());
        }
        if versioned {
            h.insert(VERSION, HeaderValue::from_static(PROTOCOL));
        }
        self.tx.ready().await.map_err(|e| e.to_string())?;
        let resp = self.tx.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        let session = resp.headers().get(SESSION).cloned();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok(Answer {
            status,
            sse,
            session,
            body,
        })
    }
}

/// The JSON-RPC message with id `id` in a response body: plain JSON (one message or a batch), or
/// an SSE stream whose events' `data:` lines (joined with `\n`) each hold one message. Events
/// without data (priming events, comments) and other messages (notifications) are skipped.
fn find(answer: &Answer, id: u64) -> Option<serde_json::Value> {
    let matches = |v: &serde_json::Value| v.get("id").and_then(|i| i.as_u64()) == Some(id);
    let pick = |text: &[u8]| -> Option<serde_json::Value> {
        match serde_json::from_slice::<serde_json::Value>(text).ok()? {
            serde_json::Value::Array(items) => items.into_iter().find(matches),
            v => matches(&v).then_some(v),
        }
    };
    if !answer.sse {
        return pick(&answer.body);
    }
    let mut data: Vec<u8> = Vec::new();
    // A final blank line dispatches an event the stream did not terminate.
    let lines = answer.body.split(|&b| b == b'\n').chain([&b""[..]]);
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            // End of an event.
            if !data.is_empty() {
                if let Some(v) = pick(&data) {
                    return Some(v);
                }
                data.clear();
            }
        } else if let Some(rest) = line.strip_prefix(b"data:") {
            if !data.is_empty() {
                data.push(b'\n');
            }
            data.extend_from_slice(rest.strip_prefix(b" ").unwrap_or(rest));
        }
        // `event:`, `id:`, `retry:` and `:` comment lines are irrelevant here.
    }
    None
}

/// Opens a session: `initialize`, then `notifications/initialized`. Returns the session id the
/// server assigned, if any.
pub async fn session(addr: SocketAddr) -> Result<Option<String>, String> {
    let mut conn = Conn::open(addr).await?;
    let init = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{PROTOCOL}","capabilities":{{}},"clientInfo":{{"name":"bench","version":"0"}}}}}}"#
    );
    let answer = conn.post(init, None, false).await?;
    if answer.status != StatusCode::OK {
        return Err(format!(
            "initialize: HTTP {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        ));
    }
    match find(&answer, 0) {
        Some(v) if v.get("result").is_some() => {}
        _ => {
            return Err(format!(
                "initialize: no result in {}",
                String::from_utf8_lossy(&answer.body)
            ));
        }
    }
    let session = answer.session;
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned();
    let answer = conn.post(note, session.as_ref(), true).await?;
    if !matches!(answer.status, StatusCode::ACCEPTED | StatusCode::OK) {
        return Err(format!(
            "notifications/initialized: HTTP {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        ));
    }
    session
        .map(|s| {
            s.to_str()
                .map(str::to_owned)
                .map_err(|e| format!("session id: {e}"))
        })
        .transpose()
}

/// Calls `tool` with `{"text": "x<task>-<id>"}` from `conc` connections (one task each) until
/// `secs` have passed. A call is OK when the message with its id says `echo: x<task>-<id>`;
/// anything else is a failure, and a broken or timed-out connection is replaced.
pub async fn drive(
    addr: SocketAddr,
    session: Option<String>,
    tool: &str,
    conc: usize,
    secs: f64,
) -> Cell {
    let session = session
        .map(|s| HeaderValue::from_str(&s).unwrap_or_else(|e| panic!("session id {s:?}: {e}")));
    // The tool name as a JSON string literal, escaped once.
    let tool = serde_json::Value::from(tool).to_string();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = (0..conc)
        .map(|task| {
            let session = session.clone();
            let tool = tool.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(1 << 14);
                let mut failures = 0usize;
                let mut conn: Option<Conn> = None;
                while Instant::now() < deadline {
                    // A connection the server closed between calls (e.g. `connection: close`)
                    // is replaced without counting a failure; one that breaks mid-call counts.
                    if conn.as_ref().is_some_and(|c| c.tx.is_closed()) {
                        conn = None;
                    }
                    let c = match conn.as_mut() {
                        Some(c) => c,
                        None => match Conn::open(addr).await {
                            Ok(c) => conn.insert(c),
                            Err(_) => {
                                failures += 1;
                                tokio::time::sleep(Duration::from_millis(10)).await;
                                continue;
                            }
                        },
                    };
                    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                    let body = format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":{tool},"arguments":{{"text":"x{task}-{id}"}}}}}}"#
                    );
                    let t = Instant::now();
                    match tokio::time::timeout(CALL_TIMEOUT, c.post(body, session.as_ref(), true))
                        .await
                    {
                        Ok(Ok(answer)) => {
                            let us = t.elapsed().as_secs_f64() * 1e6;
                            let want = format!("echo: x{task}-{id}");
                            let ok = answer.status == StatusCode::OK
                                && find(&answer, id).is_some_and(|v| {
                                    v["result"]["content"][0]["text"].as_str() == Some(&want)
                                });
                            if ok {
                                lat.push(us);
                            } else {
                                failures += 1;
                            }
                        }
                        _ => {
                            failures += 1;
                            conn = None;
                        }
                    }
                }
                (lat, failures)
            })
        })
        .collect();
    let mut lat = Vec::new();
    let mut failures = 0;
    for t in tasks {
        match t.await {
            Ok((l, f)) => {
                lat.extend(l);
                failures += f;
            }
            Err(_) => failures += 1,
        }
    }
    summarize(lat, failures, start.elapsed().as_secs_f64())
}

/// A cell from the latencies (µs) of the good calls.
pub fn summarize(mut lat: Vec<f64>, failures: usize, secs: f64) -> Cell {
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    Cell {
        calls: lat.len(),
        failures,
        secs,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
    }
}
