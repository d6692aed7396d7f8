//! `examples/flows` runs as its README shows: the CLI's run, show, replay and rerun, a task
//! round trip through a serving gateway, and the flow that parks on an approval.

use crate::common;

use std::{path::Path, process::Command};

use common::*;
use serde_json::json;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/flows");
const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");

/// The example in a folder of its own (its run log stays out of the checkout).
fn copy() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("flows")).expect("flows dir");
    for entry in std::fs::read_dir(Path::new(EXAMPLE).join("flows")).expect("example flows") {
        let p = entry.expect("entry").path();
        std::fs::copy(
            &p,
            dir.path().join("flows").join(p.file_name().expect("name")),
        )
        .expect("copy");
    }
    let cfg = std::fs::read_to_string(Path::new(EXAMPLE).join("gateway.toml"))
        .expect("example config")
        .replace("\"../../trust-tiers\"", &format!("{TIERS:?}"));
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, cfg).expect("config");
    (dir, path)
}

fn flows(cfg: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(FEDGATE)
        .args(["flows", "-c"])
        .arg(cfg)
        .args(args)
        .env("FEDGATE_LOG", "warn")
        .output()
        .expect("fedgate flows");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_cli_runs_shows_replays_and_reruns_as_documented() {
    let (_dir, cfg) = copy();
    let check = Command::new(FEDGATE)
        .arg("check")
        .arg(&cfg)
        .output()
        .expect("check");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(String::from_utf8_lossy(&check.stdout).contains("3 flows"));

    let (ok, out, err) = flows(
        &cfg,
        &[
            "run",
            "sums",
            "--input",
            r#"{"a":1,"b":2,"c":3,"d":4}"#,
            "--wait",
        ],
    );
    assert!(ok, "{out}{err}");
    assert!(
        out.contains(r#"outputs: {"message":"echo: total is 10.0","total":10.0}"#),
        "{out}"
    );
    let run = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("run "))
        .expect("run id")
        .trim()
        .to_owned();

    let (ok, shown, _) = flows(&cfg, &["show", &run]);
    assert!(
        ok && shown.contains("node_succeeded total") && shown.contains("status succeeded"),
        "{shown}"
    );
    let (ok, replay, err) = flows(&cfg, &["replay", &run]);
    assert!(
        ok && replay.contains("4 nodes, 0 divergence(s)"),
        "{replay}{err}"
    );
    let (ok, rerun, err) = flows(&cfg, &["rerun", &run, "total"]);
    assert!(
        ok && rerun.contains("node_reset total") && rerun.contains("node_reset say"),
        "{rerun}{err}"
    );
    assert!(
        !rerun.contains("node_reset left"),
        "upstream of `total` stays: {rerun}"
    );

    let (ok, out, err) = flows(
        &cfg,
        &["run", "loud", "--input", r#"{"text":"hi"}"#, "--wait"],
    );
    assert!(
        ok && out.contains(r#""confirmed":null"#) && out.contains("node_skipped confirm"),
        "{out}{err}"
    );
    let (ok, listed, _) = flows(&cfg, &["list"]);
    assert!(
        ok && listed.contains("flows__publish") && listed.contains(&run),
        "{listed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_served_example_runs_a_flow_as_a_task_and_parks_on_approval() {
    let (dir, cfg) = copy();
    let gw = Gateway::start_file(&cfg, dir);
    let created = raw::raw_call(
        &gw.url,
        "unused",
        "flows__sums",
        json!({"a": 1, "b": 2, "c": 3, "d": 4}),
    )
    .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let handle = created["result"]["taskId"]
        .as_str()
        .expect("task id")
        .to_owned();
    let done = raw::task_poll(&gw.url, "unused", &handle, |t| t["status"] == "completed").await;
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"message": "echo: total is 10.0", "total": 10.0}),
        "{done}"
    );

    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let parked = call(&client, "flows__publish", json!({"text": "hello"}))
        .await
        .expect("call");
    let plan = valid_plan(parked.structured_content.clone().expect("plan"));
    assert_eq!(
        plan["status"], "ok",
        "the same plan as a held direct call: {plan}"
    );
    assert_eq!(plan["next_actions"][0]["confirm"], true, "{plan}");
    let plan_id = plan["next_actions"][0]["args"]["plan_id"]
        .as_str()
        .expect("plan id");
    let done = call(&client, "fedgate__approve", json!({"plan_id": plan_id}))
        .await
        .expect("approve");
    assert_eq!(
        done.structured_content,
        Some(json!({"published": "echo: published: echo: hello"})),
        "{done:?}"
    );
}
