//! Soak: fedgate's memory under session churn, the figures issue 17 asks for (a benchmark, not
//! a test: it reports, it does not assert).
//!
//! 1. Idle RSS with 10 stdio upstreams.
//! 2. Memory per idle session: RSS before and after opening `SOAK_SESSIONS` handshake-era
//!    sessions (each `initialize` + `notifications/initialized`), divided by their number;
//!    then every one of them DELETEd.
//! 3. Churn for `SOAK_SECONDS` (default 60; the issue's soak is 1800): 8 workers, each in a
//!    loop of `initialize`, `notifications/initialized`, five `tools/call`, one `tools/list`,
//!    a `resources/subscribe` and a DELETE, with stateless-era calls mixed in. Beside them a
//!    disturber changes an upstream's tool list every 3 s (list-changed notifications to every
//!    session) and crashes one upstream every 15 s (u1–u9 in turn; the supervisor restarts it,
//!    and calls to it fail meanwhile). RSS is sampled every `SOAK_SAMPLE_SECONDS`
//!    (default 5). The last third's growth is reported beside the first third's: a plateau
//!    means memory is released as sessions end.
//!
//! Run: `cargo bench --bench soak` (release build), e.g. `SOAK_SECONDS=1800 cargo bench --bench soak`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;

#[path = "common/gateway.rs"]
mod gateway;
use gateway::{demo_upstreams, env_num, rss_kib, start};

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"soak","version":"0"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;

fn post(http: &reqwest::Client, url: &str, session: Option<&str>) -> reqwest::RequestBuilder {
    let mut r = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    if let Some(s) = session {
        r = r.header("mcp-session-id", s);
    }
    r
}

/// Opens a handshake-era session (initialize, initialized); its id.
async fn open(http: &reqwest::Client, url: &str) -> Option<String> {
    let r = post(http, url, None).body(INIT).send().await.ok()?;
    let sid = r.headers().get("mcp-session-id")?.to_str().ok()?.to_owned();
    let _ = r.bytes().await;
    let _ = post(http, url, Some(&sid))
        .header("mcp-protocol-version", "2025-11-25")
        .body(INITIALIZED)
        .send()
        .await
        .ok()?
        .bytes()
        .await;
    Some(sid)
}

async fn close(http: &reqwest::Client, url: &str, sid: &str) {
    if let Ok(r) = http
        .delete(url)
        .header("mcp-session-id", sid)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
    {
        let _ = r.bytes().await;
    }
}

async fn call(http: &reqwest::Client, url: &str, sid: &str, body: &str) -> bool {
    match post(http, url, Some(sid))
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_owned())
        .send()
        .await
    {
        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
        Err(_) => false,
    }
}

/// One stateless-era call (no session).
async fn stateless(http: &reqwest::Client, url: &str, i: u64) -> bool {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"u0__echo","arguments":{{"text":"s{i}"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{{"name":"soak","version":"0"}},"io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    match http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "u0__echo")
        .body(body)
        .send()
        .await
    {
        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
        Err(_) => false,
    }
}

/// Opens `n` idle handshake-era sessions on `url`; their ids and the RSS growth per session.
async fn idle_sessions(http: &reqwest::Client, url: &str, pid: u32, n: u64) -> (Vec<String>, f64) {
    // One session first: what the first one allocates once (pools, caches) is not per session.
    let mut ids: Vec<String> = open(http, url).await.into_iter().collect();
    let before = rss_kib(pid);
    for _ in 0..n {
        if let Some(s) = open(http, url).await {
            ids.push(s);
        }
    }
    let after = rss_kib(pid);
    println!(
        "{n} idle sessions on {url}: RSS {:.1} -> {:.1} MiB",
        before as f64 / 1024.0,
        after as f64 / 1024.0
    );
    let per = after.saturating_sub(before) as f64 / ids.len().saturating_sub(1).max(1) as f64;
    (ids, per)
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let seconds = env_num("SOAK_SECONDS", 60);
    let sample = env_num("SOAK_SAMPLE_SECONDS", 5).max(1);
    let sessions = env_num("SOAK_SESSIONS", 2000);
    // `high`: the disturber's writes (toggle_extra, crash) run without approval; its rate
    // limit is lifted, so the churn's calls reach the upstreams instead of being refused.
    let high = include_str!("../trust-tiers/high.toml")
        .replace("per_second = 200", "per_second = 1000000")
        .replace("burst = 400", "burst = 1000000");
    std::fs::write(gateway::dir("soak").join("trust-tiers/high.toml"), high)
        .unwrap_or_else(|e| panic!("{e}"));
    let upstreams = demo_upstreams(10, "u", |_| String::new())
        .replace("era = \"legacy\"\n", "era = \"legacy\"\ntier = \"high\"\n");
    let gw = start(
        "soak",
        &format!("[gateway]\nmax_sessions = 100000\n\n{upstreams}"),
    );
    let (pid, url) = (gw.child.id(), gw.url.clone());
    println!("{}", gw.ready);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async move {
        let http = reqwest::Client::new();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let idle = rss_kib(pid);
        println!("idle RSS with 10 stdio upstreams: {:.1} MiB", idle as f64 / 1024.0);

        let (ids, per_session) = idle_sessions(&http, &url, pid, sessions).await;
        println!("  fedgate: {per_session:.1} KiB per idle session");
        for s in &ids {
            close(&http, &url, s).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        println!(
            "after DELETE of all {}: RSS {:.1} MiB",
            ids.len(),
            rss_kib(pid) as f64 / 1024.0
        );
        // The same sessions on a bare rmcp Streamable HTTP server (the demo upstream), for
        // reference: what a session costs in rmcp's session manager.
        let bare = gateway::start_demo_http();
        let (bare_ids, bare_per_session) =
            idle_sessions(&http, &bare.url, bare.child.id(), sessions).await;
        println!(
            "  bare rmcp server: {bare_per_session:.1} KiB per idle session; fedgate / bare rmcp: {:.2}x",
            per_session / bare_per_session
        );
        drop((bare_ids, bare));

        let stop = Arc::new(AtomicBool::new(false));
        let (cycles, failures) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut workers = Vec::new();
        for w in 0..8u64 {
            let (http, url, stop) = (http.clone(), url.clone(), stop.clone());
            let (cycles, failures) = (cycles.clone(), failures.clone());
            workers.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let Some(sid) = open(&http, &url).await else {
                        failures.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let mut ok = true;
                    for c in 0..5 {
                        let body = format!(
                            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"u{}__echo","arguments":{{"text":"{w}-{i}-{c}"}}}}}}"#,
                            c + 10,
                            (i + c) % 10
                        );
                        ok &= call(&http, &url, &sid, &body).await;
                    }
                    ok &= call(&http, &url, &sid, LIST).await;
                    let subscribe = format!(
                        r#"{{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{{"uri":"u0://notes/{w}-{i}"}}}}"#
                    );
                    ok &= call(&http, &url, &sid, &subscribe).await;
                    close(&http, &url, &sid).await;
                    ok &= stateless(&http, &url, i).await;
                    if !ok {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let (changes, crashes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        workers.push(tokio::spawn({
            let (http, url, stop) = (http.clone(), url.clone(), stop.clone());
            let (changes, crashes) = (changes.clone(), crashes.clone());
            async move {
                let Some(sid) = open(&http, &url).await else {
                    return;
                };
                let mut tick = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    tick += 1;
                    let toggle = format!(
                        r#"{{"jsonrpc":"2.0","id":{tick},"method":"tools/call","params":{{"name":"u{}__toggle_extra","arguments":{{}}}}}}"#,
                        tick % 10
                    );
                    if call(&http, &url, &sid, &toggle).await {
                        changes.fetch_add(1, Ordering::Relaxed);
                    }
                    if tick.is_multiple_of(5) {
                        let crash = format!(
                            r#"{{"jsonrpc":"2.0","id":{tick},"method":"tools/call","params":{{"name":"u{}__crash","arguments":{{}}}}}}"#,
                            1 + (tick / 5) % 9
                        );
                        call(&http, &url, &sid, &crash).await;
                        crashes.fetch_add(1, Ordering::Relaxed);
                    }
                }
                close(&http, &url, &sid).await;
            }
        }));
        let started = Instant::now();
        let mut samples = Vec::new();
        println!("\nchurn: 8 workers, {seconds} s");
        println!("   t s   RSS MiB   sessions ended");
        while started.elapsed() < Duration::from_secs(seconds) {
            tokio::time::sleep(Duration::from_secs(sample)).await;
            let rss = rss_kib(pid);
            let done = cycles.load(Ordering::Relaxed);
            println!(
                "{:6.0} {:9.1} {:16}",
                started.elapsed().as_secs_f64(),
                rss as f64 / 1024.0,
                done
            );
            samples.push(rss);
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            let _ = w.await;
        }
        let n = samples.len();
        if n >= 3 {
            let third = n / 3;
            let first = samples[third.max(1) - 1].saturating_sub(samples[0]);
            let last = samples[n - 1].saturating_sub(samples[n - 1 - third.max(1)]);
            println!(
                "\ngrowth in the first third: {:.1} MiB, in the last third: {:.1} MiB ({} sessions ended, {} cycles with a failed request, {} tool-list changes, {} upstream crashes)",
                first as f64 / 1024.0,
                last as f64 / 1024.0,
                cycles.load(Ordering::Relaxed),
                failures.load(Ordering::Relaxed),
                changes.load(Ordering::Relaxed),
                crashes.load(Ordering::Relaxed)
            );
            let peak = samples.iter().max().copied().unwrap_or(0);
            println!(
                "RSS: first sample {:.1} MiB, peak {:.1} MiB, last {:.1} MiB",
                samples[0] as f64 / 1024.0,
                peak as f64 / 1024.0,
                samples[n - 1] as f64 / 1024.0
            );
        }
        drop(gw);
    });
}
