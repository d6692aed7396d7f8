//! The literal agent (`tests/clients/python/literal_agent.py`): an agent on the official Python
//! SDK that does what `examples/envelope/system-prompt.md` says and nothing more. When its
//! scenario lets someone else act meanwhile (a reviewer, an operator in the console, a replica
//! dying while the user thinks), it says so on a line of its own and waits for a line back —
//! the test does that part, then answers.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const PYTHON: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/clients/python/.venv/bin/python"
);
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/clients/python/literal_agent.py"
);

/// Runs the agent against `url` (as `key`, when given) on one scenario; `meanwhile` is called
/// with what the agent waits for (a plan id) each time it waits. Its report.
pub async fn run_agent<F>(
    dir: &std::path::Path,
    url: &str,
    key: Option<&str>,
    scenario: &Value,
    mut meanwhile: F,
) -> Value
where
    F: AsyncFnMut(String),
{
    assert!(
        std::path::Path::new(PYTHON).exists(),
        "run `bash scripts/test.sh` (README's test command): it creates the venv"
    );
    let file = dir.join(format!("scenario-{:x}.json", rand_suffix()));
    std::fs::write(&file, scenario.to_string()).expect("scenario");
    let mut cmd = tokio::process::Command::new(PYTHON);
    cmd.arg(SCRIPT)
        .args(["--url", url, "--scenario"])
        .arg(&file);
    if let Some(key) = key {
        cmd.args(["--key", key]);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run the agent");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    while let Some(line) = lines.next_line().await.expect("agent output") {
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::String(line.clone()));
        if let Some(what) = v.get("waiting").and_then(Value::as_str) {
            meanwhile(what.to_owned()).await;
            stdin.write_all(b"go on\n").await.expect("answer the agent");
            stdin.flush().await.expect("flush");
            continue;
        }
        if v.get("final").is_some() {
            return v;
        }
        seen.push(line);
    }
    let out = child.wait_with_output().await.expect("agent exit");
    panic!(
        "no report: {}\n{}",
        seen.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
