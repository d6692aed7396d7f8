//! Scale: the figures issue 17 asks for (a benchmark, not a test: it reports, it does not
//! assert).
//!
//! 1. Aggregated `tools/list` over 50 stdio upstreams × 100 tools, served from fedgate's
//!    catalogue: a stateless-era request over keep-alive HTTP, at the default page size (100)
//!    and at a page size that holds all 5,000 tools. The baseline is the same request to a
//!    gateway whose catalogue is one tool of one upstream: the same HTTP hops and request
//!    handling, no catalogue to speak of. Reported: median and p99 of each, the difference to
//!    the baseline, and the answer's size.
//! 2. Ready time with 20 stdio upstreams that take 25…500 ms to start, against a gateway with
//!    only the slowest of them: spawn to ready line (printed once every upstream settled),
//!    median of `SCALE_RUNS` (default 5) each; the ratio is what matters.
//!
//! 3. Tool search (`tool_listing = "search"`) over the same 5,000 tools: `fedgate__find_tools`
//!    (stateless-era requests), against the same search over a one-tool catalogue; and in one
//!    handshake-era session, `fedgate__select_tools` followed by the `tools/list` that shows
//!    the change (the targets: find p50 ≤ 2 ms, selection to list ≤ 5 ms).
//!
//! Run: `cargo bench --bench scale` (release build).

use std::time::Duration;

use tokio::time::Instant;

#[path = "common/gateway.rs"]
mod gateway;
use gateway::{demo_upstreams, env_num, rss_kib, start};

fn meta() -> serde_json::Value {
    serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "scale", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

/// One stateless-era request; its answer's bytes.
async fn rpc(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    mut params: serde_json::Value,
) -> bytes::Bytes {
    params["_meta"] = meta();
    let name = params["name"].as_str().map(str::to_owned);
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut r = http.post(url);
    // The stateless era names the tool of a tools/call in a header too.
    if let Some(n) = name {
        r = r.header("mcp-name", n);
    }
    let r = r
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .body(body.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"));
    assert!(r.status().is_success(), "{method}: {}", r.status());
    r.bytes().await.unwrap_or_else(|e| panic!("{method}: {e}"))
}

/// Median and p99 of `n` timed requests, in µs, and the last answer.
async fn timed(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    params: &serde_json::Value,
    n: usize,
) -> (f64, f64, bytes::Bytes) {
    for _ in 0..n / 10 {
        rpc(http, url, method, params.clone()).await;
    }
    let mut us = Vec::with_capacity(n);
    let mut last = bytes::Bytes::new();
    for _ in 0..n {
        let t = Instant::now();
        last = rpc(http, url, method, params.clone()).await;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    us.sort_by(f64::total_cmp);
    (us[n / 2], us[n * 99 / 100], last)
}

/// The JSON-RPC message of an answer, sent as JSON or as one SSE event.
fn message(answer: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(answer);
    let json = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|d| d.starts_with('{'))
        .unwrap_or(&text);
    serde_json::from_str(json).unwrap_or_default()
}

fn tools_in(answer: &[u8]) -> usize {
    message(answer)["result"]["tools"]
        .as_array()
        .map_or(0, Vec::len)
}

async fn catalogue(n: usize) {
    let upstreams = demo_upstreams(50, "u", |_| ", \"--filler-tools\", \"100\"".into());
    let http = reqwest::Client::new();
    println!("aggregated tools/list, 50 upstreams x 100 tools, {n} requests each (µs)");
    let base = {
        let one = demo_upstreams(1, "u", |_| ", \"--filler-tools\", \"1\"".into());
        let gw = start("scale-base", &one);
        timed(&http, &gw.url, "tools/list", &serde_json::json!({}), n).await
    };
    println!(
        "  baseline, a one-tool catalogue: median {:.0}, p99 {:.0}",
        base.0, base.1
    );
    println!("  page size  tools  answer KiB   median      p99   median - baseline");
    for page in [100usize, 5000] {
        let gw = start(
            "scale-list",
            &format!("[gateway]\npage_size = {page}\n\n{upstreams}"),
        );
        assert!(gw.ready.contains("50/50 upstreams ready"), "{}", gw.ready);
        let (med, p99, answer) =
            timed(&http, &gw.url, "tools/list", &serde_json::json!({}), n).await;
        if page == 100 {
            println!(
                "  (fedgate RSS with this catalogue: {:.1} MiB)",
                rss_kib(gw.child.id()) as f64 / 1024.0
            );
        }
        println!(
            "  {page:9} {:6} {:11.1} {med:8.0} {p99:8.0} {:15.0}",
            tools_in(&answer),
            answer.len() as f64 / 1024.0,
            med - base.0
        );
        // Every page of the default size, followed by cursor: the whole catalogue.
        if page == 100 {
            let t = Instant::now();
            let (mut cursor, mut pages, mut tools) = (None::<String>, 0, 0);
            loop {
                let params = match &cursor {
                    Some(c) => serde_json::json!({"cursor": c}),
                    None => serde_json::json!({}),
                };
                let answer = rpc(&http, &gw.url, "tools/list", params).await;
                let v = message(&answer);
                tools += tools_in(&answer);
                pages += 1;
                match v["result"]["nextCursor"].as_str() {
                    Some(c) => cursor = Some(c.to_owned()),
                    None => break,
                }
            }
            println!(
                "  whole catalogue by cursor: {tools} tools in {pages} pages, {:.1} ms",
                t.elapsed().as_secs_f64() * 1e3
            );
        }
    }
}

/// A handshake-era session: its id, after `initialize` and `notifications/initialized`.
async fn session(http: &reqwest::Client, url: &str) -> String {
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "scale", "version": "0"}}});
    let r = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(init.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("initialize: {e}"));
    let sid = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no session id"))
        .to_owned();
    let _ = r.bytes().await;
    session_rpc(http, url, &sid, "notifications/initialized", None).await;
    sid
}

/// One request (or, without `params`' id, a notification) of a handshake-era session.
async fn session_rpc(
    http: &reqwest::Client,
    url: &str,
    sid: &str,
    method: &str,
    params: Option<serde_json::Value>,
) -> serde_json::Value {
    let body = match params {
        Some(p) => serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": p}),
        None => serde_json::json!({"jsonrpc": "2.0", "method": method}),
    };
    let r = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", sid)
        .body(body.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"));
    let answer = r.bytes().await.unwrap_or_else(|e| panic!("{method}: {e}"));
    // The answer is the last message of the stream (a list_changed may come first).
    String::from_utf8_lossy(&answer)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
        .find(|m| m.get("id").is_some())
        .unwrap_or_default()
}

async fn search(n: usize) {
    let http = reqwest::Client::new();
    let find = |q: &str| serde_json::json!({"name": "fedgate__find_tools", "arguments": {"query": q, "limit": 10}});
    let mode = "[gateway]\ntool_listing = \"search\"\ntool_listing_threshold = 0\n\n";
    let base = {
        let one = demo_upstreams(1, "u", |_| ", \"--filler-tools\", \"1\"".into());
        let gw = start("scale-search-base", &format!("{mode}{one}"));
        timed(&http, &gw.url, "tools/call", &find("kabaka"), n).await
    };
    let upstreams = demo_upstreams(50, "u", |_| ", \"--filler-tools\", \"100\"".into());
    let gw = start("scale-search", &format!("{mode}{upstreams}"));
    assert!(gw.ready.contains("50/50 upstreams ready"), "{}", gw.ready);
    // The first search builds the index of this catalog version.
    let t = Instant::now();
    let word = fedgate::demo::filler_word(17);
    rpc(&http, &gw.url, "tools/call", find(&word)).await;
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    // A word of one tool's description (50 namespaces serve it), and a miss.
    let (hit_med, hit_p99, answer) = timed(&http, &gw.url, "tools/call", &find(&word), n).await;
    let found = message(&answer)["result"]["structuredContent"]["total"].clone();
    let (miss_med, miss_p99, _) = timed(&http, &gw.url, "tools/call", &find("zzz"), n).await;
    println!("\nfedgate__find_tools, {n} stateless requests each (µs)");
    println!("  first search (builds the index of 5,000 tools): {first_ms:.1} ms");
    println!(
        "  one-tool catalogue (baseline):   median {:7.0}  p99 {:7.0}",
        base.0, base.1
    );
    println!(
        "  5,000 tools, a word ({found} hits): median {hit_med:7.0}  p99 {hit_p99:7.0}  ratio {:.2}",
        hit_med / base.0
    );
    println!(
        "  5,000 tools, no match:           median {miss_med:7.0}  p99 {miss_p99:7.0}  ratio {:.2}",
        miss_med / base.0
    );
    // In one session: select a tool, then list; the pair, timed.
    let sid = session(&http, &gw.url).await;
    let mut us = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("u{}__tool_{:03}", i % 50, i % 100);
        let args = serde_json::json!({"names": [name], "replace": true});
        let t = Instant::now();
        let sel = session_rpc(
            &http,
            &gw.url,
            &sid,
            "tools/call",
            Some(serde_json::json!({"name": "fedgate__select_tools", "arguments": args})),
        )
        .await;
        let list = session_rpc(
            &http,
            &gw.url,
            &sid,
            "tools/list",
            Some(serde_json::json!({})),
        )
        .await;
        us.push(t.elapsed().as_secs_f64() * 1e6);
        let listed = list["result"]["tools"].to_string();
        assert!(
            sel["result"]["isError"] != true && listed.contains(&name),
            "{sel} / {listed}"
        );
    }
    us.sort_by(f64::total_cmp);
    println!(
        "  select_tools + the next tools/list, one session: median {:.0}  p99 {:.0}",
        us[n / 2],
        us[n * 99 / 100]
    );
}

/// Spawn to ready line, in ms.
fn ready_ms(config: &str, expect: &str) -> f64 {
    let t = Instant::now();
    let gw = start("scale-ready", config);
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(gw.ready.contains(expect), "{}", gw.ready);
    ms
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn readiness(runs: usize) {
    let delay = |i: usize| 25 * (i + 1);
    let many = demo_upstreams(20, "u", |i| {
        format!(", \"--start-delay-ms\", \"{}\"", delay(i))
    });
    let slowest = delay(19);
    let one = demo_upstreams(1, "slowest", |_| {
        format!(", \"--start-delay-ms\", \"{slowest}\"")
    });
    let none = ready_ms("", "0/0 upstreams ready");
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        b.push(ready_ms(&one, "1/1 upstreams ready"));
        a.push(ready_ms(&many, "20/20 upstreams ready"));
    }
    let (a, b) = (median(a), median(b));
    println!("\nready time, spawn to ready line, median of {runs} (ms)");
    println!("  no upstreams:                               {none:7.1}");
    println!("  the slowest alone ({slowest} ms start delay):     {b:7.1}");
    println!("  20 upstreams (25…{slowest} ms start delays):    {a:7.1}");
    println!("  ratio 20 / slowest alone: {:.2}", a / b);
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let n = env_num("SCALE_REQUESTS", 1000) as usize;
    if std::env::var("SCALE_ONLY").as_deref() != Ok("search") {
        rt.block_on(catalogue(n));
    }
    rt.block_on(search(n));
    if std::env::var("SCALE_ONLY").as_deref() == Ok("search") {
        return;
    }
    // Let the catalogue gateway's 50 upstreams finish exiting before timing startups.
    std::thread::sleep(Duration::from_millis(500));
    readiness(env_num("SCALE_RUNS", 5).max(1) as usize);
}
