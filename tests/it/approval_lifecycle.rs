//! One approval lifecycle on every path (F11, F12): a flow node held for approval gets the
//! same `ok` plan a direct call gets; whoever may decide — the caller, a reviewer, the
//! operator through the admin API — resumes the parked run, the write runs exactly once, and
//! a second equal decision is refused with the plan's state. Real fedgate, real demo
//! upstreams counting their writes, real MCP clients.

use crate::common;

use std::time::Duration;

use common::{
    flows::{OWN, REVIEWED, held_run, writes},
    *,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const ADMIN_TOKEN: &str = "admin-token-lifecycle";
const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");
const ALICE: &str = "fgk_alice_lifecycle";
const RITA: &str = "fgk_rita_lifecycle";

/// A gateway with both flows, an admin listener, and (with `auth`) API keys for alice
/// (agent) and rita (agent, reviewer).
fn gateway(admin_extra: &str, solo_extra: &str) -> Gateway {
    gateway_on("127.0.0.1:0", admin_extra, solo_extra)
}

/// Like `gateway`, with the admin listener on `listen` (the CLI finds it through the config).
fn gateway_on(listen: &str, admin_extra: &str, solo_extra: &str) -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("flows")).expect("flows dir");
    std::fs::write(dir.path().join("flows/reviewed.toml"), REVIEWED).expect("flow");
    std::fs::write(dir.path().join("flows/own.toml"), OWN).expect("flow");
    let token = dir.path().join("admin.token");
    std::fs::write(&token, ADMIN_TOKEN).expect("token");
    let auth = {
        let key = |name: &str, k: &str, roles: &str| {
            format!(
                "[[auth.api_keys]]\nname = \"{name}\"\nsha256 = \"{}\"\nroles = {roles}\n",
                hex::encode(Sha256::digest(k.as_bytes()))
            )
        };
        format!(
            "[auth]\n{}{}\n",
            key("alice", ALICE, "[\"agent\"]"),
            key("rita", RITA, "[\"agent\", \"reviewer\"]"),
        )
    };
    let auth = format!(
        "{auth}[roles.agent]\ntools = [\"*\"]\n[roles.reviewer]\ntools = [\"fedgate__approve\"]\n\n"
    );
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\ntiers_dir = {TIERS:?}\n\n[flows]\ndir = \"flows\"\ndb = \"runs.db\"\n\n\
             [admin]\nlisten = \"{listen}\"\ntoken = \"file:{}\"\n{admin_extra}\n\n{auth}{}{}",
            token.display(),
            stdio_upstream(
                "ledger",
                &[],
                "tier = \"high\"\n[upstreams.ledger.tools.record]\napproval = \"plan\"\napprovers = [\"reviewer\"]\n",
            ),
            stdio_upstream(
                "solo",
                &[],
                &format!("tier = \"high\"\n{solo_extra}\n[upstreams.solo.tools.record]\napproval = \"plan\"\n"),
            ),
        ),
    )
    .expect("config");
    Gateway::start_file(&cfg, dir)
}

async fn alice(gw: &Gateway) -> Client {
    connect_with_token(&gw.url, ALICE, TestClient::new())
        .await
        .expect("alice")
}

async fn admin(gw: &Gateway, method: &str, path: &str) -> (u16, Value) {
    let url = format!("{}/admin/{path}", gw.admin.as_deref().expect("admin"));
    let r = reqwest::Client::new()
        .request(method.parse().expect("method"), url)
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({}))
        .send()
        .await
        .expect("admin request");
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Starts a run of `flow` as the operator and waits until it parks; its id and plan id.
async fn parked_admin_run(gw: &Gateway, flow: &str) -> (String, String) {
    let (status, started) = admin(gw, "POST", &format!("flows/{flow}/runs")).await;
    assert_eq!(status, 202, "{started}");
    let run = started["run_id"].as_str().expect("run id").to_owned();
    let plan = parked_plan(gw, &run).await;
    (run, plan)
}

/// Waits (on the admin API's own wait) until run `run` parks on a plan; the plan's id.
async fn parked_plan(gw: &Gateway, run: &str) -> String {
    let (_, v) = admin(
        gw,
        "GET",
        &format!("flows/runs/{run}?wait_ms=20000&until=parked"),
    )
    .await;
    assert_eq!(v["parked"], true, "{v}");
    assert_eq!(
        v["state"]["nodes"]["entry"]["status"], "AWAITING_APPROVAL",
        "{v}"
    );
    v["waiting"][0]["plan_id"]
        .as_str()
        .expect("a waiting node names its plan")
        .to_owned()
}

async fn finished(gw: &Gateway, run: &str) -> Value {
    let (_, v) = admin(gw, "GET", &format!("flows/runs/{run}?wait_ms=20000")).await;
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_approval_resumes_a_parked_run_once() {
    let gw = gateway("", "");
    let client = alice(&gw).await;

    // A plan with approver roles, decided by the operator.
    let (run, plan) = parked_admin_run(&gw, "reviewed").await;
    let (_, listed) = admin(&gw, "GET", "plans").await;
    assert!(
        listed
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["id"] == plan.as_str()),
        "{listed}"
    );
    let (status, decided) = admin(&gw, "POST", &format!("plans/{plan}/approve")).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["state"], "approved", "{decided}");
    let done = finished(&gw, &run).await;
    assert_eq!(done["state"]["finished"], "succeeded", "{done}");
    assert_eq!(
        done["state"]["outputs"]["said"], "echo: published v1",
        "{done}"
    );
    assert_eq!(writes(&client, "ledger").await, 1);

    // The same decision again: refused with the plan's state, never a second 200.
    let (status, again) = admin(&gw, "POST", &format!("plans/{plan}/approve")).await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["code"], "plan_used", "{again}");
    assert_eq!(again["state"], "ran", "{again}");

    // A plan without approver roles (its caller's own) is the operator's to decide too.
    let mcp = call(&client, "flows__own", json!({})).await.expect("call");
    let held = plan_of(&mcp);
    assert_eq!(held["status"], "ok", "{held}");
    let (run, plan) = held_run(&mcp);
    let (status, decided) = admin(&gw, "POST", &format!("plans/{plan}/approve")).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(finished(&gw, &run).await["state"]["finished"], "succeeded");
    assert_eq!(writes(&client, "solo").await, 1);

    // The caller approving it after that gets the run's result, and nothing runs twice.
    let late = call(&client, "fedgate__approve", json!({"plan_id": plan}))
        .await
        .expect("approve");
    assert_eq!(late.is_error, Some(false), "{late:?}");
    assert_eq!(late.structured_content, Some(json!({"wrote": "v2"})));
    assert_eq!(writes(&client, "solo").await, 1);

    // Unknown plans and wrong tokens are refused.
    let (status, _) = admin(
        &gw,
        "POST",
        "plans/plan_00000000000000000000000000000000/approve",
    )
    .await;
    assert_eq!(status, 404);
    let r = reqwest::Client::new()
        .post(format!(
            "{}/admin/plans/{plan}/approve",
            gw.admin.as_deref().unwrap()
        ))
        .bearer_auth("wrong-token")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_limited_to_denials_cannot_approve_a_callers_plan() {
    let gw = gateway("approve_plans = false", "");
    let client = alice(&gw).await;
    let mcp = call(&client, "flows__own", json!({})).await.expect("call");
    assert_eq!(plan_of(&mcp)["status"], "ok");
    let (run, plan) = held_run(&mcp);
    let (status, refused) = admin(&gw, "POST", &format!("plans/{plan}/approve")).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["code"], "not_approver", "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or("")
            .contains("caller approves"),
        "the refusal says who can decide: {refused}"
    );
    let (status, denied) = admin(&gw, "POST", &format!("plans/{plan}/deny")).await;
    assert_eq!(status, 200, "{denied}");
    let done = finished(&gw, &run).await;
    assert_eq!(done["state"]["finished"], "failed", "{done}");
    assert!(
        done["state"]["nodes"]["entry"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("denied by admin"),
        "{done}"
    );
    assert_eq!(writes(&client, "solo").await, 0);

    // Runs the operator started are its own to approve.
    let (run, plan) = parked_admin_run(&gw, "own").await;
    let (status, decided) = admin(&gw, "POST", &format!("plans/{plan}/approve")).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(finished(&gw, &run).await["state"]["finished"], "succeeded");
    assert_eq!(writes(&client, "solo").await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reviewers_approval_resumes_the_callers_run() {
    let gw = gateway("", "");
    let alice = alice(&gw).await;
    let rita = connect_with_token(&gw.url, RITA, TestClient::new())
        .await
        .expect("rita");
    let mcp = call(&alice, "flows__reviewed", json!({}))
        .await
        .expect("call");
    let held = plan_of(&mcp);
    assert_eq!(held["status"], "ok", "{held}");
    assert_eq!(held["next_actions"][0]["confirm"], true, "{held}");
    let (run, plan) = held_run(&mcp);

    // The caller cannot run it before a reviewer approved.
    let early = call(&alice, "fedgate__approve", json!({"plan_id": plan}))
        .await
        .expect("approve");
    assert_eq!(plan_of(&early)["errors"][0]["code"], "awaiting_approval");

    // The reviewer approves; the run goes on by itself.
    let ok = call(&rita, "fedgate__approve", json!({"plan_id": plan}))
        .await
        .expect("review");
    assert_eq!(ok.is_error, Some(false), "{ok:?}");
    let done = finished(&gw, &run).await;
    assert_eq!(done["state"]["finished"], "succeeded", "{done}");
    assert_eq!(writes(&alice, "ledger").await, 1);

    // The caller's next approval gets the flow's result; a second review is refused.
    let late = call(&alice, "fedgate__approve", json!({"plan_id": plan}))
        .await
        .expect("approve");
    assert_eq!(
        late.structured_content,
        Some(json!({"said": "echo: published v1"})),
        "{late:?}"
    );
    let again = call(&rita, "fedgate__approve", json!({"plan_id": plan}))
        .await
        .expect("review");
    assert_eq!(
        plan_of(&again)["errors"][0]["code"],
        "plan_used",
        "{again:?}"
    );
    assert_eq!(writes(&alice, "ledger").await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn flow_approvals_do_not_depend_on_the_upstreams_envelope_mode() {
    let gw = gateway("", "envelope = \"off\"");
    let client = alice(&gw).await;
    let mcp = call(&client, "flows__own", json!({})).await.expect("call");
    let held = plan_of(&mcp);
    assert_eq!(held["status"], "ok", "the node parks: {held}");
    let (_, plan) = held_run(&mcp);
    let done = call(&client, "fedgate__approve", json!({"plan_id": plan}))
        .await
        .expect("approve");
    assert_eq!(
        done.structured_content,
        Some(json!({"wrote": "v2"})),
        "{done:?}"
    );
    assert_eq!(writes(&client, "solo").await, 1);
}

const HANG: &str = r#"
id = "hang"
[[nodes]]
id = "wait"
tool = "demo__slow"
params = { ms = 30000 }
retry = { max_attempts = 3, base_ms = 10, max_ms = 20 }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_timeout_is_retried_by_its_class() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("flows")).expect("flows dir");
    std::fs::write(dir.path().join("flows/hang.toml"), HANG).expect("flow");
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\n\n[flows]\ndir = \"flows\"\ndb = \"runs.db\"\n\n{}",
            stdio_upstream(
                "demo",
                &[],
                "call_timeout_ms = 200\nretry = { attempts = 1 }\n"
            )
        ),
    )
    .expect("config");
    let gw = Gateway::start_file(&cfg, dir);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        call(&client, "flows__hang", json!({})),
    )
    .await
    .expect("bounded")
    .expect("call");
    let plan = plan_of(&r);
    let step = &plan["partial_results"][0];
    assert_eq!(step["status"], "error", "{plan}");
    assert_eq!(
        step["error"]["code"], "timeout",
        "the refusal's own code: {plan}"
    );
    let out = std::process::Command::new(FEDGATE)
        .args(["flows", "-c"])
        .arg(gw.dir.path().join("gateway.toml"))
        .args(["show", &plan_run(&r), "--json"])
        .output()
        .expect("flows show");
    let run: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        run["state"]["nodes"]["wait"]["attempts"], 3,
        "an upstream timeout is transient: {run}"
    );
    // Every timed-out attempt was cancelled at the upstream.
    let stats = call(&client, "demo__stats", json!({}))
        .await
        .expect("stats");
    assert_eq!(
        stats.structured_content.as_ref().unwrap()["cancelled"],
        3,
        "{stats:?}"
    );
}

fn plan_run(r: &rmcp::model::CallToolResult) -> String {
    r.meta.as_ref().unwrap().0["io.fedgate/flow_run"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_lists_and_decides_plans_and_names_them_while_it_waits() {
    let gw = gateway_on(&format!("127.0.0.1:{}", free_port()), "", "");
    let client = alice(&gw).await;
    let (run, plan) = parked_admin_run(&gw, "own").await;
    let cfg = gw.dir.path().join("gateway.toml");
    let plans = |args: &[&str]| {
        let mut all = vec!["plans", "-c", cfg.to_str().unwrap()];
        all.extend_from_slice(args);
        std::process::Command::new(FEDGATE)
            .args(&all)
            .env("FEDGATE_LOG", "warn")
            .output()
            .expect("fedgate plans")
    };
    let list = plans(&["list"]);
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success() && listed.contains(&plan),
        "{listed}{}",
        String::from_utf8_lossy(&list.stderr)
    );
    assert!(listed.contains("solo__record"), "{listed}");
    let ok = plans(&["approve", &plan]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(finished(&gw, &run).await["state"]["finished"], "succeeded");
    let again = plans(&["approve", &plan]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && err.contains("plan is ran"),
        "{err}"
    );
    let bad = plans(&["deny", "../../etc"]);
    assert!(!bad.status.success());
    assert_eq!(writes(&client, "solo").await, 1);

    // `flows run --wait` through the serving gateway names the plan and how to decide it.
    let mut child = std::process::Command::new(FEDGATE)
        .args(["flows", "-c", cfg.to_str().unwrap(), "run", "own", "--wait"])
        .env("FEDGATE_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("flows run");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let reader = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(stdout).lines();
        let plan = lines.by_ref().map_while(Result::ok).find_map(|l| {
            l.split("(plan ")
                .nth(1)
                .and_then(|r| r.split(')').next())
                .map(str::to_owned)
        });
        let _ = tx.send(plan);
        lines.map_while(Result::ok).collect::<Vec<_>>()
    });
    // The CLI names the plan while it waits; decide it with another command.
    let plan = rx.await.expect("reader").expect("the CLI names the plan");
    let (_, listed) = admin(&gw, "GET", "plans").await;
    assert!(
        listed
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["id"] == plan.as_str() && p["tool"] == "solo__record"),
        "{listed}"
    );
    let ok = plans(&["approve", &plan]);
    assert!(ok.status.success());
    let rest = reader.await.expect("reader");
    let status = child.wait().expect("exit");
    assert!(status.success(), "{rest:?}");
    assert!(rest.iter().any(|l| l.contains("outputs:")), "{rest:?}");
    assert_eq!(writes(&client, "solo").await, 2);
}

#[test]
fn without_a_serving_gateway_flows_run_asks_on_the_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("flows")).expect("flows dir");
    std::fs::write(dir.path().join("flows/own.toml"), OWN).expect("flow");
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\ntiers_dir = {TIERS:?}\n\n[flows]\ndir = \"flows\"\ndb = \"runs.db\"\n\n{}",
            stdio_upstream(
                "solo",
                &[],
                "tier = \"high\"\n[upstreams.solo.tools.record]\napproval = \"plan\"\n"
            )
        ),
    )
    .expect("config");
    let run = |answer: Option<&str>| {
        use std::io::Write;
        let mut child = std::process::Command::new(FEDGATE)
            .args(["flows", "-c", cfg.to_str().unwrap(), "run", "own", "--wait"])
            .env("FEDGATE_LOG", "warn")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("flows run");
        let mut stdin = child.stdin.take().expect("stdin");
        if let Some(a) = answer {
            stdin.write_all(a.as_bytes()).expect("answer");
        }
        drop(stdin);
        child.wait_with_output().expect("exit")
    };
    let yes = run(Some("y\n"));
    let out = String::from_utf8_lossy(&yes.stdout);
    assert!(
        yes.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&yes.stderr)
    );
    assert!(out.contains("approve it? [y/N]"), "{out}");
    assert!(out.contains("outputs: {\"wrote\":\"v2\"}"), "{out}");
    let no = run(Some("n\n"));
    assert!(!no.status.success());
    assert!(
        String::from_utf8_lossy(&no.stdout).contains("denied by local"),
        "{}",
        String::from_utf8_lossy(&no.stdout)
    );
    let closed = run(None);
    assert!(!closed.status.success());
    assert!(
        String::from_utf8_lossy(&closed.stderr).contains("nobody answered"),
        "{}",
        String::from_utf8_lossy(&closed.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_concurrent_approvals_run_the_write_once() {
    let gw = gateway("", "");
    let client = alice(&gw).await;
    let (run, plan) = parked_admin_run(&gw, "own").await;
    let path = format!("plans/{plan}/approve");
    let answers =
        futures::future::join_all((0..20).map(|_| admin(&gw, "POST", path.as_str()))).await;
    let ok = answers.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(ok, 1, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|(s, v)| *s == 200 || (*s == 409 && v["state"].is_string())),
        "every other answer is a 409 with the plan's state: {answers:?}"
    );
    assert_eq!(finished(&gw, &run).await["state"]["finished"], "succeeded");
    assert_eq!(writes(&client, "solo").await, 1);
}
