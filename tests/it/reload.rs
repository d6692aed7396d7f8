//! Hot reload: upstreams added, removed, restarted and re-tiered one by one while a client's
//! session stays open; a broken config keeps the running one. Triggered by SIGHUP, by the admin
//! API and by a change to a tier file.

use crate::common;

use std::{path::Path, process::Command, time::Duration};

use common::*;

const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");
const ADMIN_TOKEN: &str = "admin-token-test-only";

/// Replaces a file the way editors and config management do: write aside, then rename over.
fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp-write");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn config(tiers: &str, watch: bool, upstreams: &str) -> String {
    format!(
        "[gateway]\ntiers_dir = {tiers:?}\nwatch_config = {watch}\n\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         token = \"env:FEDGATE_ADMIN_TOKEN\"\n\n{upstreams}"
    )
}

async fn tool_names(client: &Client) -> Vec<String> {
    client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
}

/// Waits for `tools/list_changed` until the listed tools satisfy `pred` (bounded).
async fn until_tools(client: &Client, seen: &Seen, what: &str, pred: impl Fn(&[String]) -> bool) {
    let fut = async {
        loop {
            if pred(&tool_names(client).await) {
                return;
            }
            seen.tools_changed.notified().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

async fn pid_of(client: &Client, tool: &str) -> u32 {
    first_text(&call(client, tool, serde_json::json!({})).await.unwrap())
        .parse()
        .unwrap()
}

async fn admin_reload(gw: &Gateway) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/admin/reload", gw.admin.clone().unwrap()))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn scrape(gw: &Gateway) -> String {
    reqwest::get(format!("{}/metrics", gw.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn sighup(gw: &Gateway) {
    let ok = Command::new("kill")
        .arg("-HUP")
        .arg(gw.pid().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -HUP");
}

async fn write_note(client: &Client) -> Result<(), String> {
    let r = call(
        client,
        "a__write_note",
        serde_json::json!({"key": "k", "value": "v"}),
    )
    .await;
    match &r {
        Ok(ok) if ok.is_error != Some(true) => Ok(()),
        _ => Err(r.refused()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reload_by_signal_and_admin_api_keeps_the_session() {
    let v1 = config(
        TIERS,
        false,
        &format!(
            "{}{}",
            stdio_upstream("a", &[], "tier = \"high\""),
            stdio_upstream("c", &[], "")
        ),
    );
    let gw = Gateway::start_env(&v1, &[("FEDGATE_ADMIN_TOKEN", ADMIN_TOKEN)]);
    let cfg = gw.dir.path().join("gateway.toml");
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    let names = tool_names(&client).await;
    assert!(names.contains(&"c__echo".to_owned()), "{names:?}");
    write_note(&client).await.expect("high tier allows writes");
    let a_pid = pid_of(&client, "a__pid").await;
    let c_pid = pid_of(&client, "c__pid").await;
    // One internal error gives `c__error` a breaker of its own (and a gauge).
    let _ = call(&client, "c__error", serde_json::json!({})).await;
    let metrics = reqwest::get(format!("{}/metrics", gw.base))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(r#"fedgate_tool_breaker_state{tool="error",upstream="c"} 0"#),
        "{metrics}"
    );

    // SIGHUP: `a` moves to the low tier (no declared writes), `b` is added, `c` removed.
    let v2 = config(
        TIERS,
        false,
        &format!(
            "{}{}",
            stdio_upstream("a", &[], "tier = \"low\"\nread_only = [\"pid\", \"echo\"]"),
            stdio_upstream("b", &[], "")
        ),
    );
    replace_file(&cfg, &v2);
    sighup(&gw);
    until_tools(&client, &seen, "b added and c removed", |n| {
        n.contains(&"b__echo".to_owned()) && !n.iter().any(|t| t.starts_with("c."))
    })
    .await;
    let err = write_note(&client).await.unwrap_err();
    assert!(
        err.contains("tier"),
        "low tier refuses undeclared writes: {err}"
    );
    assert_eq!(
        pid_of(&client, "a__pid").await,
        a_pid,
        "a tier change applies without restarting the upstream"
    );
    let echoed = call(&client, "b__echo", serde_json::json!({"text": "hi"}))
        .await
        .unwrap();
    assert!(first_text(&echoed).contains("hi"));
    let gone = async {
        while alive(c_pid) {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), gone)
        .await
        .expect("the removed upstream's process is stopped");

    // A broken config is refused as a whole: the admin API answers 422 with the diagnostic,
    // the running config stays, and the failure is counted.
    replace_file(
        &cfg,
        &format!("{v2}\n[upstreams.d]\nkind = \"stdio\"\ncommand = \"x\"\nno_such_key = 1\n"),
    );
    let (status, body) = admin_reload(&gw).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["diagnostics"]
            .as_str()
            .unwrap()
            .contains("no_such_key"),
        "{body}"
    );
    // A SIGHUP with the same broken file is refused the same way.
    sighup(&gw);
    let echoed = call(&client, "b__echo", serde_json::json!({"text": "still"}))
        .await
        .unwrap();
    assert!(first_text(&echoed).contains("still"));
    assert!(
        !tool_names(&client)
            .await
            .iter()
            .any(|t| t.starts_with("d."))
    );

    // Through the admin API: `a` gets new arguments, so it (alone) is restarted.
    let v3 = config(
        TIERS,
        false,
        &format!(
            "{}{}",
            stdio_upstream(
                "a",
                &["--scheme", "reloaded"],
                "tier = \"low\"\nread_only = [\"pid\", \"echo\"]"
            ),
            stdio_upstream("b", &[], "")
        ),
    );
    replace_file(&cfg, &v3);
    let b_pid = pid_of(&client, "b__pid").await;
    let (status, body) = admin_reload(&gw).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["reloaded"]["restarted"],
        serde_json::json!(["a"]),
        "{body}"
    );
    assert_eq!(
        body["reloaded"]["unchanged"],
        serde_json::json!(["b"]),
        "{body}"
    );
    until_tools(&client, &seen, "a back after its restart", |n| {
        n.contains(&"a__pid".to_owned())
    })
    .await;
    let new_a = pid_of(&client, "a__pid").await;
    assert_ne!(new_a, a_pid, "a was restarted");
    assert!(!alive(a_pid), "the old process of a is gone");
    assert_eq!(pid_of(&client, "b__pid").await, b_pid, "b kept running");

    // The same session served every step; the metrics count two good and two bad reloads
    // (the SIGHUP of the broken file is counted before the process goes on: wait on it).
    let metrics = async {
        loop {
            let text = scrape(&gw).await;
            if text.contains("fedgate_config_reloads_total{result=\"error\"} 2") {
                return text;
            }
            tokio::task::yield_now().await;
        }
    };
    let text = tokio::time::timeout(Duration::from_secs(10), metrics)
        .await
        .expect("two failed reloads counted");
    assert!(
        text.contains("fedgate_config_reloads_total{result=\"ok\"} 2"),
        "{text}"
    );
    assert!(
        !text.contains("fedgate_upstream_up{upstream=\"c\"}")
            && !text.contains("fedgate_tool_breaker_state{tool=\"error\",upstream=\"c\"}"),
        "a removed upstream's gauges go away"
    );
    let log = gw.stderr();
    assert!(log.contains("config reload refused"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn editing_a_tier_file_reloads_it() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = dir.path().join("tiers");
    std::fs::create_dir(&tiers).unwrap();
    let tier = |writes: &str| {
        format!(
            "rank = 2\nwrites = {writes:?}\n[timeouts]\nread_ms = 5000\nwrite_ms = 5000\nlong_ms = 5000\n"
        )
    };
    std::fs::write(tiers.join("team.toml"), tier("always")).unwrap();
    let cfg_text = config(
        tiers.to_str().unwrap(),
        true,
        &stdio_upstream("a", &[], "tier = \"team\""),
    );
    let gw = Gateway::start_env(&cfg_text, &[("FEDGATE_ADMIN_TOKEN", ADMIN_TOKEN)]);
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    write_note(&client).await.expect("the tier allows writes");
    let changes = *seen.tool_changes.lock();

    replace_file(&tiers.join("team.toml"), &tier("never"));
    wait_for(
        &seen.tools_changed,
        "a reload after the tier file changed",
        || *seen.tool_changes.lock() > changes,
    )
    .await;
    let err = write_note(&client).await.unwrap_err();
    assert!(err.contains("tier"), "{err}");
    // Reads still work on the same session.
    let echoed = call(&client, "a__echo", serde_json::json!({"text": "ok"}))
        .await
        .unwrap();
    assert!(first_text(&echoed).contains("ok"));

    // A broken tier file keeps the running config.
    replace_file(&tiers.join("team.toml"), "rank = \"two\"\n");
    let text = async {
        loop {
            let text = scrape(&gw).await;
            if text.contains("fedgate_config_reloads_total{result=\"error\"} 1") {
                return text;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), text)
        .await
        .expect("the failed reload is counted");
    let err = write_note(&client).await.unwrap_err();
    assert!(err.contains("tier"), "the running tier stays: {err}");
    drop(dir);
}
