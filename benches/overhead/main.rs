//! Overhead benchmark: `tools/call` of a trivial echo tool at concurrency 1, 8 and 64, in one run.
//!
//! Part 1, the floor: the same stdio echo server behind (a) a bare hyper forwarder (`floor.rs`:
//! HTTP in, one stdio pipe out, JSON-RPC id rewriting, nothing else) and (b) fedgate with every
//! policy layer in the stack, loaded by keep-alive HTTP/1.1 connections that share one MCP
//! session (`load.rs`, as wrk-style load tools do). Cells are interleaved per concurrency.
//! Prints calls/s, p50, p99 and CPU time per call (user+sys of the forwarding process, from
//! /proc) for both, and fedgate's ratios to the floor.
//!
//! Part 2, rmcp clients: directly against the demo upstream over Streamable HTTP, through
//! fedgate to that HTTP upstream, through fedgate to a stdio upstream (a handshake-era session,
//! and a stateless-era client).
//!
//! Part 3, guardrails: CPU per call with 1 KiB results through an upstream whose tier turns
//! every guardrail off and one that masks secrets and marks injected instructions; and the
//! time to scan a 1 MiB result in this process.
//!
//! Run: `cargo bench --bench overhead` (optional env: BENCH_SECONDS, default 3 per cell;
//! BENCH_PARTS, e.g. `3` for part 3 only;
//! FEDGATE_WORKER_THREADS reaches fedgate through the environment; FEDGATE_BASELINE_BIN adds
//! another build of fedgate — e.g. an earlier commit's release binary — to part 1, on the same
//! config and upstreams, interleaved with the others, and prints this build's ratios to it).

mod floor;
mod guardrails;
mod load;

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

/// The fedgate under test; `FEDGATE_BIN` measures another build (e.g. an earlier commit's).
static FEDGATE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    std::env::var("FEDGATE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_fedgate").to_owned())
});

#[derive(Clone, Default)]
pub(crate) struct Bench;
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
    start_bin(&FEDGATE, args, ready)
}

fn start_bin(bin: &str, args: &[&str], ready: &str) -> Proc {
    let mut child = Command::new(bin)
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

pub(crate) fn cpu_seconds(pid: u32) -> f64 {
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
    connect_as(url, ClientLifecycleMode::Initialize).await
}

/// A client of the stateless era (`server/discover`, every request self-contained).
async fn connect_stateless(url: &str) -> RunningService<RoleClient, Bench> {
    let preferred_versions = vec![rmcp::model::ProtocolVersion::V_2026_07_28];
    connect_as(url, ClientLifecycleMode::Discover { preferred_versions }).await
}

async fn connect_as(url: &str, mode: ClientLifecycleMode) -> RunningService<RoleClient, Bench> {
    let cfg =
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).max_concurrent_requests(128);
    Bench
        .serve_with_lifecycle(
            // Pooled, as real MCP clients keep connections alive (rmcp's default does not).
            StreamableHttpClientTransport::with_client(reqwest::Client::new(), cfg),
            mode,
        )
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// Calls `tool` (an echo) with `x<task> <pad>` from `conc` tasks for `secs`; a call counts
/// when its answer is the echo of what it sent.
pub(crate) async fn drive(
    client: &RunningService<RoleClient, Bench>,
    tool: &str,
    conc: usize,
    secs: f64,
    pad: &str,
) -> load::Cell {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let peer = Arc::new(client.peer().clone());
    let tasks: Vec<_> = (0..conc)
        .map(|i| {
            let peer = peer.clone();
            let tool = tool.to_owned();
            let pad = pad.to_owned();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut failures = 0;
                let text = format!("x{i} {pad}");
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
    load::summarize(lat, failures, start.elapsed().as_secs_f64())
}

/// Starts the floor (this bench binary, re-executed) in front of the stdio echo server.
fn start_floor() -> (Proc, std::net::SocketAddr) {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let mut child = Command::new(exe)
        .args([
            "__floor",
            "-",
            FEDGATE.as_str(),
            "demo-upstream",
            "--name",
            "s",
        ])
        .env("FEDGATE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn floor: {e}"));
    let out = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = BufReader::new(out).lines();
    let addr = loop {
        match lines.next() {
            Some(Ok(l)) => {
                if let Some(a) = l.strip_prefix("floor listening ") {
                    break a
                        .trim()
                        .parse()
                        .unwrap_or_else(|e| panic!("floor address {a:?}: {e}"));
                }
            }
            _ => panic!("floor exited before it listened"),
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (Proc(child), addr)
}

/// One loaded cell, with the CPU the process `pid` spent on it.
async fn load_cell(
    addr: std::net::SocketAddr,
    session: Option<String>,
    tool: &str,
    conc: usize,
    secs: f64,
    pid: u32,
) -> (load::Cell, f64) {
    let cpu0 = cpu_seconds(pid);
    let cell = load::drive(addr, session, tool, conc, secs).await;
    let cpu = cpu_seconds(pid) - cpu0;
    let per_call = if cell.calls > 0 {
        cpu / cell.calls as f64 * 1e6
    } else {
        0.0
    };
    (cell, per_call)
}

fn print_load_row(label: &str, conc: usize, cell: &load::Cell, cpu_us: f64) {
    println!(
        "{:<18} {:>4} {:>10.0} {:>9.0} {:>9.0} {:>12.1} {:>6}",
        label,
        conc,
        cell.calls as f64 / cell.secs,
        cell.p50_us,
        cell.p99_us,
        cpu_us,
        cell.failures
    );
}

use guardrails::guardrail_cost;

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("__floor") {
        floor::main_from_args(&argv[1..]);
    }
    let secs: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    // BENCH_PARTS picks parts (`3`, `1,3`); every part by default.
    let parts: Vec<u8> = std::env::var("BENCH_PARTS")
        .map(|p| p.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|_| vec![1, 2, 3]);
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
    // Every policy layer does its work: the tier classifies and bounds the response size, a
    // rate-limit rule is checked per call (high enough never to refuse), breakers and retries
    // are on by default. The tier is `high` without its own rate limit.
    let tiers = dir.join("tiers");
    let _ = std::fs::create_dir_all(&tiers);
    std::fs::write(
        tiers.join("bench.toml"),
        "rank = 3\nwrites = \"always\"\ntrust_annotations = true\nmax_response_bytes = 16777216\n\
         [timeouts]\nread_ms = 30000\nwrite_ms = 60000\nlong_ms = 600000\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // Part 3's tiers: the same, with every guardrail off, and with secrets masked both ways and
    // results screened for injected instructions.
    for (name, guardrails) in [
        (
            "bench_off",
            "secrets_in_arguments = \"off\"\nsecrets_in_results = \"off\"\ntool_definitions = \"off\"\ninjections_in_results = \"off\"\n",
        ),
        (
            "bench_on",
            "secrets_in_arguments = \"redact\"\nsecrets_in_results = \"redact\"\ntool_definitions = \"hold\"\ninjections_in_results = \"mark\"\n",
        ),
    ] {
        std::fs::write(
            tiers.join(format!("{name}.toml")),
            format!(
                "rank = 3\nwrites = \"always\"\ntrust_annotations = true\nmax_response_bytes = 16777216\n\
                 [timeouts]\nread_ms = 30000\nwrite_ms = 60000\nlong_ms = 600000\n[guardrails]\n{guardrails}"
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    // BENCH_GATEWAY_EXTRA adds `[gateway]` lines (e.g. `sse_retry_ms = 0`) to compare settings.
    let extra = std::env::var("BENCH_GATEWAY_EXTRA").unwrap_or_default();
    let toml = format!(
        "[gateway]\ntiers_dir = {tiers:?}\n{extra}\n\n\
         [[rate_limits]]\nname = \"bench\"\nby = [\"identity\", \"tool\"]\nper_second = 10000000\n\n\
         [upstreams.h]\nkind = \"http\"\nurl = \"http://{up_addr}/mcp\"\nera = \"legacy\"\ntier = \"bench\"\n\n\
         [upstreams.s]\nkind = \"stdio\"\ncommand = {0:?}\nargs = [\"demo-upstream\", \"--name\", \"s\"]\nera = \"legacy\"\ntier = \"bench\"\n\n\
         [upstreams.off]\nkind = \"stdio\"\ncommand = {0:?}\nargs = [\"demo-upstream\", \"--name\", \"off\"]\nera = \"legacy\"\ntier = \"bench_off\"\n\n\
         [upstreams.on]\nkind = \"stdio\"\ncommand = {0:?}\nargs = [\"demo-upstream\", \"--name\", \"on\"]\nera = \"legacy\"\ntier = \"bench_on\"\n",
        *FEDGATE
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
    // The other build, on the same config (its upstreams run this build's demo server).
    let baseline = std::env::var("FEDGATE_BASELINE_BIN").ok().map(|bin| {
        let listen = format!("127.0.0.1:{}", free_port());
        let args = [
            "serve",
            "--config",
            cfg.to_str().unwrap_or_default(),
            "--listen",
            &listen,
        ];
        let proc = start_bin(&bin, &args, "fedgate ready");
        let addr: std::net::SocketAddr = listen.parse().unwrap_or_else(|e| panic!("{e}"));
        (proc, addr)
    });
    println!(
        "fedgate idle RSS: {:.1} MiB (2 upstreams), of which anonymous {:.1} MiB, file-backed {:.1} MiB",
        status_kib(gw_pid, "VmRSS:") as f64 / 1024.0,
        status_kib(gw_pid, "RssAnon:") as f64 / 1024.0,
        status_kib(gw_pid, "RssFile:") as f64 / 1024.0,
    );
    let direct_url = format!("http://{up_addr}/mcp");
    let gw_url = format!("http://{listen}/mcp");
    let (floor, floor_addr) = start_floor();
    let floor_pid = floor.0.id();
    let gw_addr: std::net::SocketAddr = listen.parse().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        let floor_session = load::session(floor_addr)
            .await
            .unwrap_or_else(|e| panic!("floor session: {e}"));
        let gw_session = load::session(gw_addr)
            .await
            .unwrap_or_else(|e| panic!("fedgate session: {e}"));
        println!(
            "\npart 1: keep-alive HTTP/1.1, one shared session, stdio echo upstream\n{:<18} {:>4} {:>10} {:>9} {:>9} {:>12} {:>6}",
            "target", "c", "calls/s", "p50 µs", "p99 µs", "CPU µs/call", "fail"
        );
        let before_session = match &baseline {
            Some((_, addr)) => load::session(*addr)
                .await
                .unwrap_or_else(|e| panic!("baseline session: {e}")),
            None => None,
        };
        let mut ratios = Vec::new();
        let mut to_before = Vec::new();
        for conc in [1usize, 8, 64].into_iter().filter(|_| parts.contains(&1)) {
            let (f, f_cpu) =
                load_cell(floor_addr, floor_session.clone(), "echo", conc, secs, floor_pid).await;
            print_load_row("floor", conc, &f, f_cpu);
            let (g, g_cpu) =
                load_cell(gw_addr, gw_session.clone(), "s__echo", conc, secs, gw_pid).await;
            print_load_row("fedgate", conc, &g, g_cpu);
            let rate = |c: &load::Cell| c.calls as f64 / c.secs.max(f64::EPSILON);
            if let Some((proc, addr)) = &baseline {
                let (b, b_cpu) =
                    load_cell(*addr, before_session.clone(), "s__echo", conc, secs, proc.0.id())
                        .await;
                print_load_row("fedgate baseline", conc, &b, b_cpu);
                to_before.push((
                    conc,
                    g_cpu / b_cpu.max(f64::EPSILON),
                    rate(&g) / rate(&b).max(f64::EPSILON),
                    g.p50_us / b.p50_us.max(f64::EPSILON),
                ));
            }
            ratios.push((
                conc,
                g_cpu / f_cpu.max(f64::EPSILON),
                rate(&g) / rate(&f).max(f64::EPSILON),
                g.p50_us / f.p50_us.max(f64::EPSILON),
            ));
        }
        println!(
            "\nfedgate / floor     c  CPU per call  calls/s      p50"
        );
        for (conc, cpu, rate, p50) in ratios {
            println!("{:<18} {:>2} {:>12.2}x {:>7.2}x {:>7.2}x", "", conc, cpu, rate, p50);
        }
        if !to_before.is_empty() {
            println!("\nfedgate / baseline  c  CPU per call  calls/s      p50");
            for (conc, cpu, rate, p50) in to_before {
                println!("{:<18} {:>2} {:>12.2}x {:>7.2}x {:>7.2}x", "", conc, cpu, rate, p50);
            }
        }
        println!("\npart 2: rmcp clients");
        let direct = connect(&direct_url).await;
        let via = connect(&gw_url).await;
        let via_stateless = connect_stateless(&gw_url).await;
        println!(
            "\n{:<22} {:>4} {:>10} {:>9} {:>9} {:>8} {:>12} {:>6}",
            "target", "c", "calls/s", "p50 µs", "p99 µs", "x direct", "fedgate µs/call", "fail"
        );
        for conc in [1usize, 8, 64].into_iter().filter(|_| parts.contains(&2)) {
            let base = drive(&direct, "echo", conc, secs, "").await;
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
            for (label, client, tool) in [
                ("fedgate -> http", &via, "h__echo"),
                ("fedgate -> stdio", &via, "s__echo"),
                ("stateless -> stdio", &via_stateless, "s__echo"),
            ] {
                let cpu0 = cpu_seconds(gw_pid);
                let cell = drive(client, tool, conc, secs, "").await;
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
        if parts.contains(&3) {
            guardrail_cost(&via, gw_pid, secs).await;
        }
        let _ = direct.cancel().await;
        let _ = via.cancel().await;
        let _ = via_stateless.cancel().await;
    });
    drop(floor);
    let _ = std::fs::remove_dir_all(&dir);
}
