//! Flow benchmark: a 200-node linear flow and a 200-node fan-out/fan-in flow over the demo's
//! echo tool (stdio), run log on (SQLite, WAL, in a temporary folder), through a real fedgate.
//!
//! Baseline, in the same run: the same 200 echo calls made by a client one after another
//! through the same gateway (`tools/call demo.echo`) — what a flow node adds over a call the
//! agent would have made itself. Prints node executions per second, the ratio of a node to a
//! client call, and the run log's share of the time (its append histogram over wall time).
//!
//! Run: `cargo bench --bench flows` (optional env: BENCH_RUNS, runs per flow, default 5).

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::Duration,
};

use rmcp::{
    ClientHandler, RoleClient,
    model::{CallToolRequestParams, ClientConfig, Implementation},
    service::{ClientLifecycleMode, ClientServiceExt, RunningService},
    transport::StreamableHttpClientTransport,
};
use tokio::time::Instant;

const FEDGATE: &str = env!("CARGO_BIN_EXE_fedgate");
const NODES: usize = 200;

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
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn linear() -> String {
    let mut s = String::from("id = \"linear\"\n");
    for i in 0..NODES {
        s.push_str(&format!(
            "[[nodes]]\nid = \"n{i}\"\ntool = \"demo/echo\"\nparams = {{ text = \"n{i}\" }}\n"
        ));
        if i > 0 {
            s.push_str(&format!("depends_on = [\"n{}\"]\n", i - 1));
        }
    }
    s
}

fn fan() -> String {
    let mut s = String::from(
        "id = \"fan\"\nparallelism = 16\n[[nodes]]\nid = \"root\"\ntool = \"demo/echo\"\nparams = { text = \"root\" }\n",
    );
    for i in 0..NODES - 2 {
        s.push_str(&format!(
            "[[nodes]]\nid = \"b{i}\"\ntool = \"demo/echo\"\ndepends_on = [\"root\"]\nparams = {{ text = \"b{i}\" }}\n"
        ));
    }
    let all: Vec<String> = (0..NODES - 2).map(|i| format!("\"b{i}\"")).collect();
    s.push_str(&format!(
        "[[nodes]]\nid = \"join\"\ntool = \"demo/echo\"\ndepends_on = [{}]\nparams = {{ text = \"join\" }}\n",
        all.join(", ")
    ));
    s
}

fn start(dir: &std::path::Path) -> (Proc, String) {
    std::fs::create_dir_all(dir.join("flows")).unwrap_or_else(|e| panic!("flows dir: {e}"));
    std::fs::write(dir.join("flows/linear.toml"), linear()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("flows/fan.toml"), fan()).unwrap_or_else(|e| panic!("{e}"));
    let cfg = dir.join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[flows]\ndir = \"flows\"\ndb = \"runs.db\"\nparallelism = 16\n\
             [upstreams.demo]\nkind = \"stdio\"\ncommand = {FEDGATE:?}\nargs = [\"demo-upstream\", \"--name\", \"demo\"]\n"
        ),
    )
    .unwrap_or_else(|e| panic!("config: {e}"));
    let mut child = Command::new(FEDGATE)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .env("FEDGATE_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn fedgate: {e}"));
    let out = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = BufReader::new(out).lines();
    let url = loop {
        match lines.next() {
            Some(Ok(l)) if l.contains("fedgate ready") => {
                break l
                    .split_whitespace()
                    .find(|w| w.starts_with("http://"))
                    .unwrap_or_else(|| panic!("no url in {l}"))
                    .to_owned();
            }
            Some(_) => continue,
            None => panic!("fedgate exited before it was ready"),
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (Proc(child), url)
}

/// The run log's append time so far, in seconds (from /metrics).
async fn log_seconds(base: &str) -> f64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("metrics: {e}"))
        .text()
        .await
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("fedgate_flow_log_append_seconds_sum "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn flow(client: &RunningService<RoleClient, Bench>, name: &str) -> Duration {
    let t = Instant::now();
    let r = client
        .peer()
        .call_tool(CallToolRequestParams::new(name.to_owned()))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(r.is_error, Some(false), "{name}: {r:?}");
    t.elapsed()
}

async fn direct(client: &RunningService<RoleClient, Bench>) -> Duration {
    let t = Instant::now();
    for i in 0..NODES {
        let args = serde_json::json!({"text": format!("n{i}")});
        let r = client
            .peer()
            .call_tool(
                CallToolRequestParams::new("demo__echo")
                    .with_arguments(args.as_object().cloned().unwrap_or_default()),
            )
            .await
            .unwrap_or_else(|e| panic!("echo: {e}"));
        assert_eq!(r.is_error, Some(false));
    }
    t.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it once quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let runs: usize = if quick {
        1
    } else {
        std::env::var("BENCH_RUNS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5)
    };
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let (_gw, url) = start(dir.path());
    let base = url.trim_end_matches("/mcp").to_owned();
    let client = Bench
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(url.clone()),
            ClientLifecycleMode::Initialize,
        )
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    // Warm up: the upstream, the catalog, the database file.
    flow(&client, "flows__linear").await;
    direct(&client).await;

    println!("flows over demo.echo (stdio), {NODES} nodes per run, {runs} runs per cell, median:");
    let (mut lin, mut fan, mut dir_calls) = (Vec::new(), Vec::new(), Vec::new());
    let (mut log_lin, mut log_fan) = (0.0, 0.0);
    for _ in 0..runs {
        // Interleaved, so drift on this noisy machine hits every cell alike.
        let before = log_seconds(&base).await;
        lin.push(flow(&client, "flows__linear").await);
        let mid = log_seconds(&base).await;
        fan.push(flow(&client, "flows__fan").await);
        let after = log_seconds(&base).await;
        log_lin += mid - before;
        log_fan += after - mid;
        dir_calls.push(direct(&client).await);
    }
    let total = |v: &[Duration]| v.iter().map(Duration::as_secs_f64).sum::<f64>();
    let (lin_total, fan_total) = (total(&lin), total(&fan));
    let (lin, fan, dir_calls) = (median(lin), median(fan), median(dir_calls));
    let rate = |d: Duration| NODES as f64 / d.as_secs_f64();
    println!(
        "  linear      {:>8.1} ms  {:>7.0} nodes/s  run log {:>4.1} % of the time",
        lin.as_secs_f64() * 1e3,
        rate(lin),
        100.0 * log_lin / lin_total
    );
    println!(
        "  fan-out/in  {:>8.1} ms  {:>7.0} nodes/s  run log {:>4.1} % of the time (parallelism 16)",
        fan.as_secs_f64() * 1e3,
        rate(fan),
        100.0 * log_fan / fan_total
    );
    println!(
        "  baseline    {:>8.1} ms  {:>7.0} calls/s  ({NODES} sequential client calls of demo.echo through fedgate)",
        dir_calls.as_secs_f64() * 1e3,
        rate(dir_calls)
    );
    println!(
        "  ratio: a linear node takes {:.2}x a client's call",
        lin.as_secs_f64() / dir_calls.as_secs_f64()
    );
}
