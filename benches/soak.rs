//! Soak: fedgate's memory under session churn, the figures issue 17 asks for (a benchmark, not
//! a test: it reports, it does not assert).
//!
//! 1. Idle RSS with 10 stdio upstreams.
//! 2. Memory per idle session: RSS before and after opening `SOAK_SESSIONS` handshake-era
//!    sessions (each `initialize` + `notifications/initialized`), divided by their number;
//!    then every one of them DELETEd.
//! 3. Churn for `SOAK_SECONDS` (default 60; the issue's soak is 1800): 8 workers, each in a
//!    loop of `initialize`, `notifications/initialized`, five `tools/call`, one `tools/list`
//!    and a DELETE, with stateless-era calls mixed in. RSS is sampled every `SOAK_SAMPLE_SECONDS`
//!    (default 5). The last third's growth is reported beside the first third's: a plateau
//!    means memory is released as sessions end.
//!
//! Run: `cargo bench --bench soak` (release build), e.g. `SOAK_SECONDS=1800 cargo bench --bench soak`.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;

const FEDGATE: &str = env!("CARGO_BIN_EXE_fedgate");
const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"soak","version":"0"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(config: &str) -> (Gateway, String) {
    let dir = std::env::temp_dir().join(format!("fedgate-soak-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let cfg = dir.join("gateway.toml");
    std::fs::write(&cfg, config).unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(FEDGATE)
        .args(["serve", "--config"])
        .arg(&cfg)
        .args(["--listen", "127.0.0.1:0"])
        .env("FEDGATE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn fedgate: {e}"));
    let out = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = BufReader::new(out).lines();
    let ready = lines
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("fedgate exited before its ready line"));
    std::thread::spawn(move || for _ in lines {});
    let url = ready
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {ready}"))
        .to_owned();
    (Gateway(child), url)
}

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
        r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"u0.echo","arguments":{{"text":"s{i}"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{{"name":"soak","version":"0"}},"io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    match http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "u0.echo")
        .body(body)
        .send()
        .await
    {
        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
        Err(_) => false,
    }
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let seconds = env_num("SOAK_SECONDS", 60);
    let sample = env_num("SOAK_SAMPLE_SECONDS", 5).max(1);
    let sessions = env_num("SOAK_SESSIONS", 2000);
    let upstreams: String = (0..10)
        .map(|i| {
            format!(
                "[upstreams.u{i}]\nkind = \"stdio\"\ncommand = {FEDGATE:?}\nargs = [\"demo-upstream\", \"--name\", \"u{i}\"]\nera = \"legacy\"\n\n"
            )
        })
        .collect();
    let (gw, url) = start(&format!("[gateway]\nmax_sessions = 100000\n\n{upstreams}"));
    let pid = gw.0.id();
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

        let before = rss_kib(pid);
        let mut ids = Vec::new();
        for _ in 0..sessions {
            if let Some(s) = open(&http, &url).await {
                ids.push(s);
            }
        }
        let after = rss_kib(pid);
        println!(
            "{} idle sessions: RSS {:.1} -> {:.1} MiB, {:.1} KiB per session",
            ids.len(),
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            (after.saturating_sub(before)) as f64 / ids.len().max(1) as f64
        );
        for s in &ids {
            close(&http, &url, s).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        println!(
            "after DELETE of all {}: RSS {:.1} MiB",
            ids.len(),
            rss_kib(pid) as f64 / 1024.0
        );

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
                            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"u{}.echo","arguments":{{"text":"{w}-{i}-{c}"}}}}}}"#,
                            c + 10,
                            (i + c) % 10
                        );
                        ok &= call(&http, &url, &sid, &body).await;
                    }
                    ok &= call(&http, &url, &sid, LIST).await;
                    close(&http, &url, &sid).await;
                    ok &= stateless(&http, &url, i).await;
                    if !ok {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
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
                "\ngrowth in the first third: {:.1} MiB, in the last third: {:.1} MiB ({} sessions ended, {} failed cycles)",
                first as f64 / 1024.0,
                last as f64 / 1024.0,
                cycles.load(Ordering::Relaxed),
                failures.load(Ordering::Relaxed)
            );
        }
        drop(gw);
    });
}
