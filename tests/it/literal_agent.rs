//! The plan contract judged as an agent would: `tests/clients/python/literal_agent.py`, built
//! on the official Python SDK, does what `examples/envelope/system-prompt.md` says and nothing
//! more, with a stub user that answers yes or no. Each scenario must end with the right effect
//! counted at the upstream, each write at most once.

use crate::common;

use common::{
    agent::run_agent,
    browser::Browser,
    flows::{OWN, REVIEWED, writes},
    round_robin::RoundRobin,
    stores::RedisServer,
    *,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const ADMIN_TOKEN: &str = "admin-token-literal";
const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");
const ALICE: &str = "fgk_alice_literal";
const RITA: &str = "fgk_rita_literal";

fn gateway() -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("flows")).expect("flows dir");
    std::fs::write(dir.path().join("flows/own.toml"), OWN).expect("flow");
    std::fs::write(dir.path().join("flows/reviewed.toml"), REVIEWED).expect("flow");
    let token = dir.path().join("admin.token");
    std::fs::write(&token, ADMIN_TOKEN).expect("token");
    let key = api_key;
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\ntiers_dir = {TIERS:?}\n\n[flows]\ndir = \"flows\"\ndb = \"runs.db\"\n\n\
             [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"file:{}\"\n\n[auth]\n{}{}\n\
             [roles.agent]\ntools = [\"*\"]\n[roles.reviewer]\ntools = [\"fedgate__approve\"]\n\n{}{}{}",
            token.display(),
            key("alice", ALICE, "[\"agent\"]"),
            key("rita", RITA, "[\"agent\", \"reviewer\"]"),
            stdio_upstream(
                "solo",
                &[],
                "tier = \"high\"\n[upstreams.solo.tools.record]\napproval = \"plan\"\n"
            ),
            stdio_upstream(
                "ledger",
                &[],
                "tier = \"high\"\n[upstreams.ledger.tools.record]\napproval = \"plan\"\napprovers = [\"reviewer\"]\n"
            ),
            stdio_upstream("lowt", &[], "tier = \"low\""),
        ),
    )
    .expect("config");
    Gateway::start_file(&cfg, dir)
}

/// Runs the literal agent as alice on one scenario; its report.
async fn agent(gw: &Gateway, scenario: Value) -> Value {
    run_agent(
        gw.dir.path(),
        &gw.url,
        Some(ALICE),
        &scenario,
        async |what| {
            panic!("the scenario lets nobody act meanwhile, yet the agent waits for {what}")
        },
    )
    .await
}

fn confirmations(report: &Value) -> usize {
    report["asked"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a.as_str().is_some_and(|s| s.starts_with("confirm:")))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_follows_the_rule_text_gets_every_job_done() {
    let gw = gateway();
    let alice = connect_with_token(&gw.url, ALICE, TestClient::new())
        .await
        .expect("alice");
    let yes = json!({"confirm": true});
    let no = json!({"confirm": false});
    let admin = json!({"admin_url": gw.admin.clone().expect("admin"), "admin_token": ADMIN_TOKEN});

    // A direct write its caller approves: the user is asked once, the write runs once.
    let r = agent(
        &gw,
        json!({"tool": "solo__record", "args": {"value": "d"}, "human": yes}),
    )
    .await;
    assert_eq!(r["final"]["outcome"], "done", "{r}");
    assert_eq!(confirmations(&r), 1, "{r}");
    assert_eq!(writes(&alice, "solo").await, 1, "{r}");
    // Declined: denied, nothing runs.
    let r = agent(
        &gw,
        json!({"tool": "solo__record", "args": {"value": "x"}, "human": no}),
    )
    .await;
    assert_eq!(r["final"]["outcome"], "denied", "{r}");
    assert_eq!(writes(&alice, "solo").await, 1, "{r}");

    // A write a reviewer approves: the agent waits as told, then runs it.
    let r = agent(
        &gw,
        json!({"tool": "ledger__record", "args": {"value": "r"}, "human": yes,
               "later": {"reviewer_key": RITA}}),
    )
    .await;
    assert_eq!(r["final"]["outcome"], "done", "{r}");
    let tools: Vec<&str> = r["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["tool"].as_str())
        .collect();
    assert_eq!(
        tools,
        ["ledger__record", "fedgate__approve", "fedgate__approve"],
        "held, waiting for the reviewer, then run: {r}"
    );
    assert_eq!(writes(&alice, "ledger").await, 1, "{r}");

    // A flow node its caller approves; the same flow declined.
    let r = agent(&gw, json!({"tool": "flows__own", "args": {}, "human": yes})).await;
    assert_eq!(
        r["final"]["result"]["structured"],
        json!({"wrote": "v2"}),
        "{r}"
    );
    assert_eq!(confirmations(&r), 1, "{r}");
    assert_eq!(writes(&alice, "solo").await, 2, "{r}");
    let r = agent(&gw, json!({"tool": "flows__own", "args": {}, "human": no})).await;
    assert_eq!(r["final"]["outcome"], "denied", "{r}");
    assert_eq!(writes(&alice, "solo").await, 2, "{r}");

    // The same flow as a task: the client puts the task's question to its user and answers
    // with tasks/update; the write runs once.
    let r = agent(
        &gw,
        json!({"tool": "flows__own", "args": {}, "human": yes, "tasks": true}),
    )
    .await;
    assert_eq!(
        r["final"]["result"]["structured"],
        json!({"wrote": "v2"}),
        "{r}"
    );
    assert_eq!(confirmations(&r), 1, "{r}");
    assert_eq!(writes(&alice, "solo").await, 3, "{r}");
    let r = agent(
        &gw,
        json!({"tool": "flows__own", "args": {}, "human": no, "tasks": true}),
    )
    .await;
    assert_eq!(r["final"]["outcome"], "reported", "{r}");
    assert!(
        r["final"]["plan"]["partial_results"][0]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("denied")),
        "{r}"
    );
    assert_eq!(writes(&alice, "solo").await, 3, "{r}");

    // A flow node that needs a reviewer, approved by the operator meanwhile.
    let r = agent(
        &gw,
        json!({"tool": "flows__reviewed", "args": {}, "human": yes, "later": admin}),
    )
    .await;
    assert_eq!(
        r["final"]["result"]["structured"],
        json!({"said": "echo: published v1"}),
        "{r}"
    );
    assert_eq!(writes(&alice, "ledger").await, 2, "{r}");

    // The same flow, approved meanwhile by an operator clicking Approve in the console.
    let browser = Browser::start().await;
    browser
        .goto(&format!("{}/console", gw.admin.as_deref().expect("admin")))
        .await;
    browser.type_into("#token", ADMIN_TOKEN).await;
    browser.click("#login-submit").await;
    let scenario =
        json!({"tool": "flows__reviewed", "args": {}, "human": yes, "later": {"test": true}});
    let r = run_agent(
        gw.dir.path(),
        &gw.url,
        Some(ALICE),
        &scenario,
        async |plan_id| {
            let row = format!("#plan-rows tr[data-plan='{plan_id}']");
            browser
                .until(
                    "the pending plan",
                    &format!(
                        "document.querySelector(\"{row}[data-state=pending] button.approve\")"
                    ),
                )
                .await;
            browser.click(&format!("{row} button.approve")).await;
            browser
                .until(
                    "the plan decided",
                    &format!("!document.querySelector(\"{row}[data-state=pending]\")"),
                )
                .await;
        },
    )
    .await;
    assert_eq!(
        r["final"]["result"]["structured"],
        json!({"said": "echo: published v1"}),
        "{r}"
    );
    assert_eq!(writes(&alice, "ledger").await, 3, "{r}");

    // An array argument of the wrong type, fixed through the `ask` form.
    let r = agent(
        &gw,
        json!({"tool": "solo__file_ticket",
               "args": {"title": "T", "priority": "high", "labels": "urgent"},
               "human": {"knows": {"labels": "urgent"}}}),
    )
    .await;
    assert_eq!(r["final"]["outcome"], "done", "{r}");
    assert_eq!(r["final"]["result"]["structured"]["title"], "T", "{r}");
    assert_eq!(r["steps"][1]["args"]["labels"], json!(["urgent"]), "{r}");

    // A bare tool name, corrected through a recovery action with the caller's arguments.
    let r = agent(
        &gw,
        json!({"tool": "echo", "args": {"text": "hi"}, "human": {}}),
    )
    .await;
    assert_eq!(r["final"]["outcome"], "done", "{r}");
    assert_eq!(r["final"]["result"]["texts"][0], "echo: hi", "{r}");

    // A tier refusal: not repeated, and the user hears the config change that would allow it.
    let r = agent(
        &gw,
        json!({"tool": "lowt__write_note", "args": {"key": "k", "value": "v"}, "human": {}}),
    )
    .await;
    assert_eq!(r["final"]["outcome"], "reported", "{r}");
    assert_eq!(r["steps"].as_array().map(Vec::len), Some(1), "{r}");
    assert!(
        r["told"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t.as_str().is_some_and(|t| t.contains("[upstreams.lowt]"))),
        "{r}"
    );
}

/// An API key entry of `name` with roles `roles` (TOML).
fn api_key(name: &str, k: &str, roles: &str) -> String {
    format!(
        "[[auth.api_keys]]\nname = \"{name}\"\nsha256 = \"{}\"\nroles = {roles}\n",
        hex::encode(Sha256::digest(k.as_bytes()))
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_a_load_balancer_the_write_runs_once_after_the_replica_that_held_it_died() {
    let redis = RedisServer::start();
    let (solo, _demo) = http_upstream(
        "solo",
        "tier = \"high\"\n[upstreams.solo.tools.record]\napproval = \"plan\"\n",
    );
    let replica = || {
        Gateway::start_env(
            &format!(
                "[gateway]\nstate_key = \"env:FG_STATE_KEY\"\ntiers_dir = {TIERS:?}\n\n\
             [cluster]\nredis = \"{}\"\n\n[auth]\n{}\n[roles.agent]\ntools = [\"*\"]\n\n{solo}",
                redis.url(),
                api_key("alice", ALICE, "[\"agent\"]"),
            ),
            &[("FG_STATE_KEY", "literal-agent-state-key-0123456789abcdef")],
        )
    };
    let (mut a, b) = (replica(), replica());
    let (lb, url) = RoundRobin::start(vec![a.base.clone(), b.base.clone()]).await;
    lb.send_all_to(0);
    // The user thinks before saying yes; meanwhile A, which holds the plan, is killed and the
    // load balancer sends everything to B.
    let scenario = json!({"tool": "solo__record", "args": {"value": "once"},
                          "human": {"confirm": true, "thinks": true}});
    let r = run_agent(b.dir.path(), &url, Some(ALICE), &scenario, async |_| {
        a.child.kill().expect("SIGKILL A");
        a.child.wait().expect("A gone");
        lb.send_all_to(1);
    })
    .await;
    assert_eq!(r["final"]["outcome"], "done", "{r}");
    assert_eq!(
        r["final"]["result"]["structured"],
        json!({"recorded": "once"}),
        "{r}"
    );
    assert_eq!(confirmations(&r), 1, "{r}");
    let hits = lb.hits.lock().clone();
    assert!(
        hits.contains(&0) && hits.last() == Some(&1),
        "held on A, approved on B: {hits:?}"
    );
    let on_b = connect_with_token(&b.url, ALICE, TestClient::new())
        .await
        .expect("alice on B");
    assert_eq!(writes(&on_b, "solo").await, 1, "{r}");
}
