//! What the soak and scale benchmarks share: a fedgate process on a config of their own, its
//! RSS, and their knobs from the environment.
// Each bench binary uses part of this module.
#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
};

pub const FEDGATE: &str = env!("CARGO_BIN_EXE_fedgate");
/// The demo with its test modes (`--filler-tools`, `--start-delay-ms`): the workspace's
/// `fedgate-testkit`, built beside `fedgate` in the same profile when a benchmark starts.
pub static TESTKIT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let built = Command::new(cargo)
        .args(["build", "--release", "--quiet", "-p", "fedgate-testkit"])
        .status();
    assert!(
        built.is_ok_and(|s| s.success()),
        "cannot build fedgate-testkit"
    );
    let path = std::path::Path::new(FEDGATE).with_file_name("fedgate-testkit");
    path.to_string_lossy().into_owned()
});

pub fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A running fedgate; killed when dropped.
pub struct Gateway {
    pub child: Child,
    pub url: String,
    /// Its ready line (`fedgate ready: listening on … (N/M upstreams ready)`).
    pub ready: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The folder of a bench's config (and of the tier files beside it).
pub fn dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("fedgate-{tag}-{}", std::process::id()));
    let _ = std::fs::create_dir_all(dir.join("trust-tiers"));
    dir
}

/// Starts fedgate on `config` (written to a file of the bench's own) and waits for its ready
/// line, which it prints once every upstream has settled.
pub fn start(tag: &str, config: &str) -> Gateway {
    let dir = dir(tag);
    let cfg = dir.join("gateway.toml");
    std::fs::write(&cfg, config).unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(FEDGATE);
    cmd.args(["serve", "--config"])
        .arg(&cfg)
        .args(["--listen", "127.0.0.1:0"]);
    let (child, ready, url) = spawn_until_url(cmd, "its ready line");
    Gateway { child, url, ready }
}

/// `[upstreams.<prefix>N]` tables of stdio demo upstreams, `args` added to each.
pub fn demo_upstreams(n: usize, prefix: &str, args: impl Fn(usize) -> String) -> String {
    (0..n)
        .map(|i| {
            format!(
                "[upstreams.{prefix}{i}]\nkind = \"stdio\"\ncommand = {testkit:?}\nargs = [\"demo-upstream\", \"--faults\", \"--name\", \"{prefix}{i}\"{}]\nera = \"legacy\"\n\n",
                args(i),
                testkit = *TESTKIT
            )
        })
        .collect()
}

/// A bare rmcp Streamable HTTP server (the demo upstream, `--http`): the baseline for what a
/// session costs in rmcp alone.
pub struct DemoHttp {
    pub child: Child,
    pub url: String,
}

impl Drop for DemoHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_demo_http() -> DemoHttp {
    let mut cmd = Command::new(FEDGATE);
    cmd.args(["demo-upstream", "--http", "127.0.0.1:0"]);
    let (child, _, url) = spawn_until_url(cmd, "its listening line");
    DemoHttp { child, url }
}

/// Spawns `cmd` and reads its first stdout line (`what`), which names its URL; its stdout is
/// drained from then on. The child, the line, the URL.
fn spawn_until_url(mut cmd: Command, what: &str) -> (Child, String, String) {
    let mut child = cmd
        .env("FEDGATE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let out = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = BufReader::new(out).lines();
    let line = lines
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("exited before {what}"));
    std::thread::spawn(move || for _ in lines {});
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line}"))
        .to_owned();
    (child, line, url)
}
