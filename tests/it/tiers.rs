//! Trust tiers (F6) through a real fedgate: write rules, untrusted annotations, per-class
//! timeouts, shipped tier files.

use crate::common;

use common::*;

const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");

fn refusal(err: &str) -> Option<String> {
    let start = err.find("\"code\":\"")? + 8;
    Some(err[start..].split('"').next()?.to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn write_rules_follow_the_tier() {
    let custom = tempfile::tempdir().unwrap();
    std::fs::write(
        custom.path().join("readonly.toml"),
        "writes = \"never\"\n[timeouts]\nread_ms = 300\nwrite_ms = 1000\nlong_ms = 5000\n",
    )
    .unwrap();
    for t in ["medium", "low"] {
        std::fs::copy(
            format!("{TIERS}/{t}.toml"),
            custom.path().join(format!("{t}.toml")),
        )
        .unwrap();
    }
    let config = format!(
        "[gateway]\ntiers_dir = {:?}\n{}{}{}{}",
        custom.path().display().to_string(),
        stdio_upstream("ro", &[], "tier = \"medium\""),
        stdio_upstream("rw", &[], "tier = \"medium\"\nwritable = [\"write_note\"]"),
        stdio_upstream("ext", &[], "tier = \"low\"\nread_only = [\"echo\"]"),
        stdio_upstream(
            "frozen",
            &[],
            "tier = \"readonly\"\nlong_running = [\"slow\"]"
        ),
    );
    let gw = Gateway::start(&config);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let note = serde_json::json!({"key": "k", "value": "v"});

    // medium: reads by annotation; undeclared writes refused, declared ones allowed.
    assert_eq!(
        first_text(
            &call(&client, "ro__echo", serde_json::json!({"text": "r"}))
                .await
                .unwrap()
        ),
        "echo: r"
    );
    let err = call(&client, "ro__write_note", note.clone())
        .await
        .refused();
    assert_eq!(
        refusal(&err).as_deref(),
        Some("write_not_declared"),
        "{err}"
    );
    assert!(err.contains("trust tier `medium`"), "{err}");
    assert_eq!(
        first_text(&call(&client, "rw__write_note", note.clone()).await.unwrap()),
        "stored k"
    );

    // low: annotations are not trusted; `add` says readOnlyHint but only `echo` is declared.
    assert_eq!(
        first_text(
            &call(&client, "ext__echo", serde_json::json!({"text": "e"}))
                .await
                .unwrap()
        ),
        "echo: e"
    );
    let err = call(&client, "ext__add", serde_json::json!({"a": 1, "b": 2}))
        .await
        .refused();
    assert_eq!(
        refusal(&err).as_deref(),
        Some("write_not_declared"),
        "{err}"
    );

    // A custom tier that allows no writes at all.
    let err = call(&client, "frozen__write_note", note).await.refused();
    assert_eq!(refusal(&err).as_deref(), Some("writes_never"), "{err}");

    // Per-class timeouts: reads get 300 ms here; `slow` is long-running and gets 5 s.
    let err = call(&client, "frozen__echo", serde_json::json!({"text": "fast"})).await;
    assert!(err.is_ok());
    let quick = call(&client, "frozen__progress", serde_json::json!({"steps": 1}))
        .await
        .unwrap();
    assert_eq!(first_text(&quick), "done 1");
    let r = call(&client, "frozen__slow", serde_json::json!({"ms": 600}))
        .await
        .unwrap();
    assert_eq!(
        first_text(&r),
        "slept 600",
        "long-running class has the long timeout"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn read_timeout_applies_to_reads() {
    let custom = tempfile::tempdir().unwrap();
    std::fs::write(
        custom.path().join("tight.toml"),
        "writes = \"always\"\n[timeouts]\nread_ms = 200\nwrite_ms = 1000\nlong_ms = 5000\n",
    )
    .unwrap();
    let config = format!(
        "[gateway]\ntiers_dir = {:?}\n{}",
        custom.path().display().to_string(),
        stdio_upstream("t", &[], "tier = \"tight\"")
    );
    let gw = Gateway::start(&config);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let err = call(&client, "t__slow", serde_json::json!({"ms": 30000}))
        .await
        .refused();
    assert!(err.contains("did not answer within 200ms"), "{err}");
    client.cancel().await.unwrap();
}

#[test]
fn unknown_tiers_and_bad_tier_files_are_config_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("trust-tiers")).unwrap();
    std::fs::write(
        dir.path().join("trust-tiers/odd.toml"),
        "writes = \"sometimes\"\n[timeouts]\nread_ms=1\nwrite_ms=1\nlong_ms=1\n",
    )
    .unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        "[upstreams.a]\nkind = \"stdio\"\ncommand = \"x\"\ntier = \"missing\"\n\n[upstreams.b]\nkind = \"stdio\"\ncommand = \"x\"\ntier = \"odd\"\n",
    )
    .unwrap();
    let out = check(&cfg);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(
            "gateway.toml:4: upstream `a`: unknown trust tier `missing`: known tiers are high, low, medium, odd"
        ),
        "{err}"
    );
    assert!(
        err.contains("odd.toml:1: writes: `sometimes` is not one of always, declared, never"),
        "{err}"
    );
}

#[test]
fn shipped_tiers_load() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    let mut text = format!("[gateway]\ntiers_dir = {TIERS:?}\n");
    for t in ["high", "medium", "low"] {
        text.push_str(&format!(
            "[upstreams.{t}]\nkind = \"stdio\"\ncommand = \"x\"\ntier = \"{t}\"\n"
        ));
    }
    std::fs::write(&cfg, text).unwrap();
    let out = check(&cfg);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn held_back_fingerprint(ready: &serde_json::Value, upstream: &str, tool: &str) -> Option<String> {
    ready["conflicts"].as_array()?.iter().find_map(|c| {
        (c["upstream"] == upstream && c["item"] == tool)
            .then(|| {
                c["reason"]
                    .as_str()?
                    .split("now ")
                    .nth(1)?
                    .split(')')
                    .next()
                    .map(str::to_owned)
            })
            .flatten()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn pinning_holds_back_a_changed_definition_until_accepted() {
    let pinned = format!("[gateway]\ntiers_dir = {TIERS:?}\n");
    let gw = Gateway::start(&format!(
        "{pinned}{}{}",
        stdio_upstream(
            "p",
            &[],
            "tier = \"medium\"\nera = \"legacy\"\nwritable = [\"evolve\"]"
        ),
        stdio_upstream("h", &[], "tier = \"high\"\nera = \"legacy\"")
    ));
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    let names = |tools: Vec<rmcp::model::Tool>| {
        tools
            .into_iter()
            .map(|t| t.name.to_string())
            .collect::<Vec<_>>()
    };
    assert!(names(client.peer().list_all_tools().await.unwrap()).contains(&"p__echo".to_owned()));

    for up in ["p", "h"] {
        let before = *seen.tool_changes.lock();
        call(&client, &format!("{up}__evolve"), serde_json::json!({}))
            .await
            .unwrap();
        wait_for(&seen.tools_changed, "list_changed after evolve", || {
            *seen.tool_changes.lock() > before
        })
        .await;
    }
    let tools = client.peer().list_all_tools().await.unwrap();
    let echo_h = tools
        .iter()
        .find(|t| t.name == "h__echo")
        .expect("unpinned tier takes the change");
    assert!(echo_h.description.as_deref().unwrap_or("").contains("(v2)"));
    assert!(
        !tools.iter().any(|t| t.name == "p__echo"),
        "pinned tier holds the changed echo back"
    );
    let err = call(&client, "p__echo", serde_json::json!({"text": "x"}))
        .await
        .refused();
    assert!(err.contains("unknown tool `p__echo`"), "{err}");
    let (_, ready) = gw.readyz().await;
    let fp = held_back_fingerprint(&ready, "p", "echo").unwrap_or_else(|| panic!("{ready}"));
    assert_eq!(fp.len(), 64, "{fp}");
    assert!(gw.stderr().contains("held back"), "the hold is logged");
    client.cancel().await.unwrap();

    // Accepting the new definition in config makes it callable again.
    let accepted = Gateway::start(&format!(
        "{pinned}{}",
        stdio_upstream(
            "p",
            &["--evolved"],
            &format!("tier = \"medium\"\npins = {{ echo = \"{fp}\" }}")
        )
    ));
    let client = connect_legacy(&accepted.url, TestClient::new()).await;
    assert_eq!(
        first_text(
            &call(&client, "p__echo", serde_json::json!({"text": "v2"}))
                .await
                .unwrap()
        ),
        "echo: v2"
    );
    client.cancel().await.unwrap();

    // A pin that does not match holds the tool back from the start.
    let mismatch = Gateway::start(&format!(
        "{pinned}{}",
        stdio_upstream(
            "p",
            &[],
            &format!("tier = \"medium\"\npins = {{ echo = \"{fp}\" }}")
        )
    ));
    let client = connect_legacy(&mismatch.url, TestClient::new()).await;
    assert!(!names(client.peer().list_all_tools().await.unwrap()).contains(&"p__echo".to_owned()));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn responses_larger_than_the_tier_allows_are_refused() {
    let custom = tempfile::tempdir().unwrap();
    std::fs::write(
        custom.path().join("small.toml"),
        "writes = \"always\"\nmax_response_bytes = 400\n[timeouts]\nread_ms = 5000\nwrite_ms = 5000\nlong_ms = 5000\n",
    )
    .unwrap();
    let gw = Gateway::start(&format!(
        "[gateway]\ntiers_dir = {:?}\n{}",
        custom.path().display().to_string(),
        stdio_upstream("s", &[], "tier = \"small\"")
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let ok = call(&client, "s__echo", serde_json::json!({"text": "short"}))
        .await
        .unwrap();
    assert_eq!(first_text(&ok), "echo: short");
    let big = "x".repeat(1000);
    let err = call(&client, "s__echo", serde_json::json!({"text": big}))
        .await
        .refused();
    assert!(
        err.contains("\"code\":\"response_too_large\"") && err.contains("tier allows (400)"),
        "{err}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_roles_max_tier_caps_which_upstreams_it_reaches() {
    use sha2::{Digest, Sha256};
    let key = "fgk_limited";
    let gw = Gateway::start(&format!(
        "[gateway]\ntiers_dir = {TIERS:?}\n\n[auth]\n[[auth.api_keys]]\nname = \"limited\"\nsha256 = \"{}\"\nroles = [\"capped\"]\n\n\
         [roles.capped]\nmax_tier = \"medium\"\ntools = [\"*\"]\n\n{}{}",
        hex::encode(Sha256::digest(key.as_bytes())),
        stdio_upstream("m", &[], "tier = \"medium\""),
        stdio_upstream("h", &[], "tier = \"high\"")
    ));
    let client = connect_with_token(&gw.url, key, TestClient::new())
        .await
        .unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "m__echo"));
    assert!(
        !tools.iter().any(|t| t.name.starts_with("h.")),
        "high-tier tools are not listed"
    );
    let err = call(&client, "h__echo", serde_json::json!({"text": "x"}))
        .await
        .refused();
    assert!(
        err.contains("unknown tool `h__echo`") && err.contains(r#""closest":["m__echo""#),
        "{err}"
    );
    assert_eq!(
        first_text(
            &call(&client, "m__echo", serde_json::json!({"text": "ok"}))
                .await
                .unwrap()
        ),
        "echo: ok"
    );
    client.cancel().await.unwrap();
}

#[test]
fn the_shipped_config_copied_elsewhere_still_finds_its_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/gateway.toml")).unwrap();
    let flows = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart/flows");
    std::fs::write(
        &cfg,
        shipped.replace("\"examples/quickstart/flows\"", &format!("{flows:?}")),
    )
    .unwrap();
    let out = check(&cfg);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `fedgate check` on a config file.
fn check(cfg: &std::path::Path) -> std::process::Output {
    std::process::Command::new(FEDGATE)
        .args(["check", cfg.to_str().unwrap()])
        .output()
        .unwrap()
}
