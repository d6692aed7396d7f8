//! Overhead benchmark: `tools/call` of a trivial echo tool at concurrency 1, 8 and 64, in one run,
//! (a) directly against the demo upstream over Streamable HTTP, (b) through fedgate to that HTTP
//! upstream, (c) through fedgate to a stdio upstream. Prints calls/s, p50, p99, ratios to direct,
//! and fedgate's CPU time per call (user+sys from /proc), plus fedgate's idle RSS.
//!
//! Run: `cargo bench --bench overhead` (optional env: BENCH_SECONDS, default 3 per cell).

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use rmcp::{
    ClientHandler, RoleClient,
    model::{CallToolRequestParams, ClientConfig, Implementation},
    service::{ClientLifecycleMode, ClientServiceExt, RunningService},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use tokio::time::Instant;

const FEDGATE: &str = env!("CARGO_BIN_EXE_fedgate");

#[derive(Clone, Default)]
struct Bench;
impl ClientHandler for Bench {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(Default::default(), Implementation::new("bench", "0"))
    }
}

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// Starts a process and waits for a stdout line containing `ready`.
fn start(args: &[&str], ready: &str) -> Proc {
    let mut child = Command::new(FEDGATE)
        .args(args)
        .env("FEDGATE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn fedgate: {e}"));
    let out = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = BufReader::new(out).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains(ready) => break,
            Some(_) => continue,
            None => panic!("process exited before `{ready}`"),
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Proc(child)
}

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // after the comm field: state is [0], utime is [11], stime is [12]
    let ticks: f64 = fields
        .get(11)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
    let hz = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    ticks / hz
}

/// A `kB` field of /proc/PID/status (`VmRSS`, `RssAnon`, …).
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

async fn connect(url: &str) -> RunningService<RoleClient, Bench> {
    let cfg =
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).max_concurrent_requests(128);
    Bench
        .serve_with_lifecycle(
            // Pooled, as real MCP clients keep connections alive (rmcp's default does not).
            StreamableHttpClientTransport::with_client(reqwest::Client::new(), cfg),
            ClientLifecycleMode::Initialize,
        )
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

struct Cell {
    calls: usize,
    failures: usize,
    secs: f64,
    p50_us: f64,
    p99_us: f64,
}

async fn drive(
    client: &RunningService<RoleClient, Bench>,
    tool: &str,
    conc: usize,
    secs: f64,
) -> Cell {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let peer = Arc::new(client.peer().clone());
    let tasks: Vec<_> = (0..conc)
        .map(|i| {
            let peer = peer.clone();
            let tool = tool.to_owned();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut failures = 0;
                let text = format!("x{i}");
                let want = format!("echo: {text}");
                let args = serde_json::json!({"text": text})
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let r = peer
                        .call_tool(
                            CallToolRequestParams::new(tool.clone()).with_arguments(args.clone()),
                        )
                        .await;
                    let ok = r
                        .ok()
                        .and_then(|r| {
                            r.content
                                .first()
                                .and_then(|c| c.as_text().map(|t| t.text == want))
                        })
                        .unwrap_or(false);
                    if ok {
                        lat.push(t.elapsed().as_secs_f64() * 1e6);
                    } else {
                        failures += 1;
                    }
                }
                (lat, failures)
            })
        })
        .collect();
    let mut lat = Vec::new();
    let mut failures = 0;
    for t in tasks {
        if let Ok((l, f)) = t.await {
            lat.extend(l);
            failures += f;
        }
    }
    let secs = start.elapsed().as_secs_f64();
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

fn main() {
    let secs: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let up_port = free_port();
    let up_addr = format!("127.0.0.1:{up_port}");
    let _upstream = start(
        &["demo-upstream", "--name", "h", "--http", &up_addr],
        "listening",
    );
    let dir = std::env::temp_dir().join(format!("fedgate-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let cfg = dir.join("gateway.toml");
    let toml = format!(
        "[upstreams.h]\nkind = \"http\"\nurl = \"http://{up_addr}/mcp\"\nera = \"legacy\"\n\n\
         [upstreams.s]\nkind = \"stdio\"\ncommand = {FEDGATE:?}\nargs = [\"demo-upstream\", \"--name\", \"s\"]\nera = \"legacy\"\n"
    );
    std::fs::write(&cfg, toml).unwrap_or_else(|e| panic!("{e}"));
    let gw_port = free_port();
    let listen = format!("127.0.0.1:{gw_port}");
    let gw = start(
        &[
            "serve",
            "--config",
            cfg.to_str().unwrap_or_default(),
            "--listen",
            &listen,
        ],
        "fedgate ready",
    );
    let gw_pid = gw.0.id();
    println!(
        "fedgate idle RSS: {:.1} MiB (2 upstreams), of which anonymous {:.1} MiB, file-backed {:.1} MiB",
        status_kib(gw_pid, "VmRSS:") as f64 / 1024.0,
        status_kib(gw_pid, "RssAnon:") as f64 / 1024.0,
        status_kib(gw_pid, "RssFile:") as f64 / 1024.0,
    );
    let direct_url = format!("http://{up_addr}/mcp");
    let gw_url = format!("http://{listen}/mcp");
    rt.block_on(async {
        let direct = connect(&direct_url).await;
        let via = connect(&gw_url).await;
        println!(
            "\n{:<22} {:>4} {:>10} {:>9} {:>9} {:>8} {:>12} {:>6}",
            "target", "c", "calls/s", "p50 µs", "p99 µs", "x direct", "fedgate µs/call", "fail"
        );
        for conc in [1usize, 8, 64] {
            let base = drive(&direct, "echo", conc, secs).await;
            let base_rate = base.calls as f64 / base.secs;
            println!(
                "{:<22} {:>4} {:>10.0} {:>9.0} {:>9.0} {:>8} {:>12} {:>6}",
                "direct http",
                conc,
                base_rate,
                base.p50_us,
                base.p99_us,
                "1.00",
                "-",
                base.failures
            );
            for (label, tool) in [
                ("fedgate -> http", "h.echo"),
                ("fedgate -> stdio", "s.echo"),
            ] {
                let cpu0 = cpu_seconds(gw_pid);
                let cell = drive(&via, tool, conc, secs).await;
                let cpu = cpu_seconds(gw_pid) - cpu0;
                let rate = cell.calls as f64 / cell.secs;
                let per_call = if cell.calls > 0 {
                    cpu / cell.calls as f64 * 1e6
                } else {
                    0.0
                };
                println!(
                    "{:<22} {:>4} {:>10.0} {:>9.0} {:>9.0} {:>8.2} {:>12.0} {:>6}",
                    label,
                    conc,
                    rate,
                    cell.p50_us,
                    cell.p99_us,
                    rate / base_rate,
                    per_call,
                    cell.failures
                );
            }
        }
        let _ = direct.cancel().await;
        let _ = via.cancel().await;
    });
    let _ = std::fs::remove_dir_all(&dir);
}
