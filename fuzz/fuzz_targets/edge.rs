//! The HTTP edge: any request body, in either protocol era, gets an answer: a JSON-RPC
//! message (or an empty 202) with a status below 500, never a panic or a 5xx.
//!
//! One fedgate runs in-process for the whole fuzzing session, with the demo upstream served
//! over Streamable HTTP beside it, so bodies that parse reach the whole pipeline. A panic in any
//! task aborts the process, which libFuzzer reports as a crash.
#![no_main]

use std::{sync::OnceLock, time::Duration};

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Demo {
    #[command(flatten)]
    args: fedgate::demo::DemoArgs,
}

struct Edge {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    url: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

fn edge() -> &'static Edge {
    static EDGE: OnceLock<Edge> = OnceLock::new();
    EDGE.get_or_init(|| {
        std::panic::set_hook(Box::new(|info| {
            eprintln!("panic: {info}");
            std::process::abort();
        }));
        let _ = rustls::crypto::ring::default_provider().install_default();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let demo_port = free_port();
        let demo = Demo::parse_from(["demo", "--name", "demo", "--http", &format!("127.0.0.1:{demo_port}")]);
        rt.spawn(fedgate::demo::run(demo.args));
        let config = format!(
            "[gateway]\nmax_sessions = 1000000\n\n[upstreams.demo]\nkind = \"http\"\nurl = \"http://127.0.0.1:{demo_port}/mcp\"\ntier = \"high\"\n"
        );
        let url = rt.block_on(async move {
            let snapshot = fedgate::config::load_str("fuzz.toml", &config)
                .unwrap_or_else(|d| panic!("config: {d:?}"));
            let core = fedgate::server::core::Core::new(&snapshot).unwrap_or_else(|e| panic!("{e}"));
            core.start();
            let gateway = fedgate::server::mcp::Gateway::new(core.clone(), 100, None);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
            let settings = snapshot.gateway.clone();
            tokio::spawn(async move {
                let _ = fedgate::server::http::serve(
                    listener,
                    gateway,
                    core,
                    &settings,
                    CancellationToken::new(),
                    CancellationToken::new(),
                )
                .await;
            });
            format!("http://{addr}/mcp")
        });
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        // Wait until the demo upstream is connected: a call to it answers.
        let edge = Edge { rt, http, url };
        for _ in 0..200 {
            let (status, body) = post(&edge, 1, br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo.echo","arguments":{"text":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"fuzz","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#);
            if status == 200 && String::from_utf8_lossy(&body).contains("echo: hi") {
                return edge;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the in-process gateway did not serve demo.echo");
    })
}

/// POSTs `body` in one of the ways clients send it; status and answer.
fn post(edge: &Edge, how: u8, body: &[u8]) -> (u16, Vec<u8>) {
    let mut r = edge
        .http
        .post(&edge.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    r = match how % 4 {
        // Handshake era, no session: only `initialize` is expected.
        0 => r,
        // Stateless era with routing headers.
        1 => r
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "demo.echo"),
        // Stateless era without `Mcp-Method`.
        2 => r.header("mcp-protocol-version", "2026-07-28"),
        // Handshake era with a session id that was never issued.
        _ => r
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", "fuzz-session"),
    };
    let body = body.to_vec();
    edge.rt.block_on(async move {
        match r.body(body).send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let bytes = resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
                (status, bytes)
            }
            // A connection closed or a request timed out is not what this target looks for.
            Err(_) => (0, Vec::new()),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let edge = edge();
    let Some((&how, body)) = data.split_first() else {
        return;
    };
    let (status, answer) = post(edge, how, body);
    if status == 0 {
        return;
    }
    assert!(
        status < 500 || status == 503,
        "status {status} for {:?}",
        String::from_utf8_lossy(body)
    );
    if answer.is_empty() {
        return;
    }
    // A JSON answer or SSE frames whose data lines are JSON-RPC messages.
    let text = String::from_utf8_lossy(&answer);
    let messages: Vec<&str> = if text.trim_start().starts_with('{') {
        vec![text.as_ref()]
    } else {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .collect()
    };
    for m in messages {
        let v: serde_json::Value = serde_json::from_str(m)
            .unwrap_or_else(|e| panic!("status {status}: not JSON ({e}): {m}"));
        assert_eq!(v["jsonrpc"], "2.0", "status {status}: {m}");
    }
});
