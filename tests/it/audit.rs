//! The audit log through a real fedgate: one JSON line per routed call, with identity,
//! decision, reason, outcome, latency, correlation id and hashed arguments; no secrets. And the
//! call lines of the ordinary log.

use crate::common;

use std::time::Duration;

use common::*;
use sha2::{Digest, Sha256};

const KEY: &str = "fgk_audit_key_secret";

#[tokio::test(flavor = "multi_thread")]
async fn one_record_per_call_with_the_decision() {
    let dir = tempfile::tempdir().unwrap();
    let audit_path = dir.path().join("audit.jsonl");
    let config = format!(
        "[audit]\npath = {:?}\n\n[auth]\n[[auth.api_keys]]\nname = \"auditor\"\nsha256 = \"{}\"\nroles = [\"r\"]\n\n\
         [roles.r]\ntools = [\"demo__echo\", \"demo__fail\"]\n\n{}",
        audit_path.display().to_string(),
        hex::encode(Sha256::digest(KEY.as_bytes())),
        stdio_upstream("demo", &[], "")
    );
    let gw = Gateway::start(&config);
    let client = connect_with_token(&gw.url, KEY, TestClient::new())
        .await
        .unwrap();
    call(
        &client,
        "demo__echo",
        serde_json::json!({"text": "secret-argument-value"}),
    )
    .await
    .unwrap();
    call(&client, "demo__fail", serde_json::json!({}))
        .await
        .unwrap();
    call(&client, "demo__crash", serde_json::json!({}))
        .await
        .unwrap_err();
    call(&client, "demo__nope", serde_json::json!({}))
        .await
        .unwrap_err();

    let records: Vec<serde_json::Value> = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let text = tokio::fs::read_to_string(&audit_path)
                .await
                .unwrap_or_default();
            let lines: Vec<_> = text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            if lines.len() >= 4 {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("four audit records");
    assert_eq!(records.len(), 4, "{records:?}");
    let [ok, is_error, hidden, unknown] = &records[..] else {
        unreachable!()
    };
    for r in &records {
        assert_eq!(r["identity"], "auditor");
        assert_eq!(r["identity_kind"], "api_key");
        assert_eq!(r["method"], "tools/call");
        assert!(r["latency_ms"].as_f64().unwrap() >= 0.0);
        assert_eq!(r["correlation_id"].as_str().unwrap().len(), 32);
        assert!(r["time"].as_str().unwrap().ends_with('Z'));
    }
    assert_eq!(
        (ok["name"].as_str(), ok["upstream"].as_str()),
        (Some("demo__echo"), Some("demo"))
    );
    assert_eq!(
        (ok["decision"].as_str(), ok["outcome"].as_str()),
        (Some("allowed"), Some("ok"))
    );
    let args_hash = hex::encode(Sha256::digest(
        serde_json::json!({"text": "secret-argument-value"})
            .to_string()
            .as_bytes(),
    ));
    assert_eq!(ok["arguments_sha256"], args_hash);
    assert!(
        ok.get("arguments").is_none(),
        "arguments only as a hash by default"
    );
    assert_eq!(is_error["outcome"], "is_error");
    assert_eq!(
        (hidden["decision"].as_str(), hidden["reason"].as_str()),
        (Some("refused"), Some("not_authorized"))
    );
    assert_eq!(
        (unknown["decision"].as_str(), unknown["reason"].as_str()),
        (Some("refused"), Some("unknown_tool"))
    );
    assert_eq!(unknown["upstream"], serde_json::Value::Null);

    let raw = std::fs::read_to_string(&audit_path).unwrap();
    assert!(
        !raw.contains(KEY) && !raw.contains("secret-argument-value"),
        "no secrets or arguments in the audit log"
    );
    assert!(!gw.stderr().contains(KEY));
    client.cancel().await.unwrap();
}

/// A full disk (here /dev/full, where every write fails with ENOSPC) is reported in the log,
/// and calls go on.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_audit_disk_never_stops_calls() {
    let config = format!(
        "[audit]\npath = \"/dev/full\"\n\n{}",
        stdio_upstream("demo", &[], "")
    );
    let gw = Gateway::start(&config);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    for i in 0..5 {
        let r = call(
            &client,
            "demo__echo",
            serde_json::json!({"text": format!("n{i}")}),
        )
        .await
        .unwrap();
        assert_eq!(first_text(&r), format!("echo: n{i}"));
    }
    let reported = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if gw.stderr().contains("audit log write failed") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        reported.is_ok(),
        "the write failure is reported: {}",
        gw.stderr()
    );
    client.cancel().await.unwrap();
}

/// At debug, every finished call is one log line with its upstream, tool, outcome and latency;
/// failures carry the upstream and tool too.
#[tokio::test(flavor = "multi_thread")]
async fn finished_calls_are_logged_with_their_fields() {
    let gw = Gateway::start_env(
        &stdio_upstream("demo", &[], ""),
        &[("FEDGATE_LOG", "debug,rmcp=warn")],
    );
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    call(&client, "demo__echo", serde_json::json!({"text": "x"}))
        .await
        .unwrap();
    call(&client, "demo__error", serde_json::json!({}))
        .await
        .unwrap_err();
    let log = gw.stderr();
    let finished = log
        .lines()
        .find(|l| l.contains("call finished") && l.contains("tool=demo__echo"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        finished.contains("upstream=\"demo\"") || finished.contains("upstream=demo"),
        "{finished}"
    );
    assert!(
        finished.contains("outcome=\"ok\"") || finished.contains("outcome=ok"),
        "{finished}"
    );
    assert!(finished.contains("latency_ms="), "{finished}");
    let failed = log
        .lines()
        .find(|l| l.contains("call failed") && l.contains("tool=demo__error"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(failed.contains("upstream"), "{failed}");
    client.cancel().await.unwrap();
}
