//! The trust boundary (docs/guarantees.md): a held call that comes to run — its caller's
//! `fedgate__approve` after a reviewer's, an operator's or its own decision — passes every
//! check of the stack as things stand when it runs: result guardrails and their hooks, the
//! stage gate, the caller's roles after a reload. A check that no longer holds refuses it and
//! the write does not run.

use crate::common;

use common::*;
use rmcp::model::CallToolResult;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");
const ADMIN_TOKEN: &str = "admin-token-test-only";
const AWS: &str = "AKIAQWERTYUIOPASDFGH";
const ALICE: &str = "fgk_alice_trust_test_only";
const RITA: &str = "fgk_rita_trust_test_only";

fn key(name: &str, key: &str, roles: &str) -> String {
    format!(
        "[[auth.api_keys]]\nname = \"{name}\"\nsha256 = \"{}\"\nroles = {roles}\n",
        hex::encode(Sha256::digest(key.as_bytes()))
    )
}

/// `vault`: a medium upstream whose answers are screened (redact) and hooked, with a held read
/// (its caller decides) and a held echo (a reviewer decides); `up`: a high upstream gated by workflow `wf` (state `a` allows its write,
/// `b` does not), its write held.
fn config(dir: &std::path::Path, hook: &str, agent_tools: &str) -> String {
    format!(
        "[gateway]\ntiers_dir = {TIERS:?}\nstage_db = {:?}\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"env:FEDGATE_ADMIN_TOKEN\"\n\n\
         [guardrail_hooks.h]\nurl = {hook:?}\nphases = [\"response\"]\n\n\
         [auth]\nanonymous = false\n{}{}\
         [roles.agent]\ntools = {agent_tools}\n[roles.reviewer]\ntools = [\"*\"]\n\n{}{}\
         [upstreams.vault.tools.read_note]\napproval = \"plan\"\n\
         [upstreams.vault.tools.echo]\napproval = \"plan\"\napprovers = [\"reviewer\"]\n\
         [upstreams.up.tools.write_note]\napproval = \"plan\"\n\
         [upstreams.up.tools.echo]\napproval = \"elicit\"\n\n\
         [stages.wf]\ninitial = \"a\"\n[stages.wf.states.a]\ntools = [\"up/write_note\", \"up/stats\"]\n\
         [stages.wf.states.b]\ntools = [\"up/stats\"]\n\
         [[stages.wf.transitions]]\nfrom = \"a\"\nto = \"b\"\nroles = [\"reviewer\"]\n",
        dir.join("stages.db").display().to_string(),
        key("alice", ALICE, "[\"agent\"]"),
        key("rita", RITA, "[\"agent\", \"reviewer\"]"),
        stdio_upstream(
            "vault",
            &[],
            "tier = \"medium\"\nwritable = [\"write_note\"]\n\
             guardrails = { secrets_in_arguments = \"audit\", hooks = [\"h\"] }"
        ),
        stdio_upstream("up", &[], "tier = \"high\""),
    )
}

struct Setup {
    gw: Gateway,
    _hook: UrlProcess,
    alice: Client,
    rita: Client,
}

async fn start(agent_tools: &str) -> Setup {
    let hook = UrlProcess::testkit(&["demo-guardrail"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(&cfg, config(dir.path(), &hook.url, agent_tools)).unwrap();
    let gw = Gateway::start_file_env(&cfg, dir, &[("FEDGATE_ADMIN_TOKEN", ADMIN_TOKEN)]);
    let alice = connect_with_token(&gw.url, ALICE, TestClient::new())
        .await
        .unwrap();
    let rita = connect_with_token(&gw.url, RITA, TestClient::new())
        .await
        .unwrap();
    Setup {
        gw,
        _hook: hook,
        alice,
        rita,
    }
}

/// Holds a call and returns its plan id (the plan's next action is the caller's approve).
async fn held(c: &Client, tool: &str, args: Value) -> String {
    let r = call(c, tool, args).await.unwrap();
    let p = plan_of(&r);
    assert_eq!(p["status"], "ok", "{p}");
    let action = &p["next_actions"][0];
    assert_eq!(action["tool"], "fedgate__approve", "{p}");
    action["args"]["plan_id"].as_str().unwrap().to_owned()
}

async fn approve(c: &Client, id: &str) -> CallToolResult {
    call(
        c,
        "fedgate__approve",
        json!({"plan_id": id, "decision": "approve"}),
    )
    .await
    .unwrap()
}

async fn upstream_calls(c: &Client, up: &str) -> u64 {
    let r = call(c, &format!("{up}__stats"), json!({})).await.unwrap();
    r.structured_content.unwrap()["calls"].as_u64().unwrap()
}

async fn admin_post(gw: &Gateway, path: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("{}{path}", gw.admin.as_ref().unwrap()))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn text_of(r: &CallToolResult) -> String {
    serde_json::to_string(r).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_call_is_screened_and_hooked_like_a_direct_one() {
    let s = start("[\"*\"]").await;
    let stored = call(
        &s.alice,
        "vault__write_note",
        json!({"key": "k", "value": format!("deploy with {AWS}")}),
    )
    .await
    .unwrap();
    assert_ne!(stored.is_error, Some(true), "{stored:?}");

    // The caller's own approval: the result's secret is masked as a direct answer's would be.
    let id = held(&s.alice, "vault__read_note", json!({"key": "k"})).await;
    let ran = approve(&s.alice, &id).await;
    let text = text_of(&ran);
    assert!(text.contains("[REDACTED:aws_access_key]"), "{text}");
    assert!(!text.contains(AWS), "the approved result leaks: {text}");

    // A reviewer's decision first, then the caller runs it: the same.
    let id = held(
        &s.alice,
        "vault__echo",
        json!({"text": format!("key {AWS}")}),
    )
    .await;
    let decided = call(
        &s.rita,
        "fedgate__approve",
        json!({"plan_id": id, "decision": "approve"}),
    )
    .await
    .unwrap();
    assert_ne!(decided.is_error, Some(true), "{decided:?}");
    let text = text_of(&approve(&s.alice, &id).await);
    assert!(
        text.contains("echo: key [REDACTED:aws_access_key]") && !text.contains(AWS),
        "{text}"
    );

    // The operator's decision: the response hook still decides on the approved answer.
    let id = held(&s.alice, "vault__echo", json!({"text": "withhold-me"})).await;
    assert_eq!(
        admin_post(&s.gw, &format!("/admin/plans/{id}/approve")).await,
        200
    );
    let refused = approve(&s.alice, &id).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let text = text_of(&refused);
    assert!(text.contains("not for this caller"), "{text}");
    assert!(!text.contains("echo: withhold-me"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stage_move_between_hold_and_approval_refuses_the_write() {
    let s = start("[\"*\"]").await;
    for c in [&s.alice, &s.rita] {
        let st = call(c, "fedgate__stage_status", json!({"workspace": "w1"}))
            .await
            .unwrap();
        assert_eq!(st.structured_content.unwrap()["state"], "a");
    }
    let before = upstream_calls(&s.alice, "up").await;
    let id = held(
        &s.alice,
        "up__write_note",
        json!({"key": "k", "value": "v"}),
    )
    .await;
    let moved = call(
        &s.rita,
        "fedgate__stage_advance",
        json!({"workspace": "w1", "to": "b", "reason": "closing"}),
    )
    .await
    .unwrap();
    assert_ne!(moved.is_error, Some(true), "{moved:?}");
    let refused = approve(&s.alice, &id).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let p = plan_of(&refused);
    assert_eq!(p["status"], "blocked", "{p}");
    let text = p.to_string();
    assert!(text.contains("`b`"), "the refusal names the stage: {text}");
    assert_eq!(
        upstream_calls(&s.alice, "up").await,
        before + 1,
        "only the stats call itself reached the upstream: the write did not run"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_role_removed_by_a_reload_before_the_operators_approval_refuses_the_write() {
    let s = start("[\"up/*\", \"vault/*\", \"fedgate/stage_*\"]").await;
    let st = call(&s.alice, "fedgate__stage_status", json!({"workspace": "w"}))
        .await
        .unwrap();
    assert_ne!(st.is_error, Some(true), "{st:?}");
    let names: Vec<String> = s
        .alice
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(
        names.iter().any(|n| n == "fedgate__approve"),
        "the caller's plans are decidable without a role glob for it: {names:?}"
    );
    let id = held(
        &s.alice,
        "up__write_note",
        json!({"key": "k", "value": "v"}),
    )
    .await;
    // The operator reloads a config whose agent role no longer has the write, then approves.
    let cfg = s.gw.dir.path().join("gateway.toml");
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "tools = [\"up/*\", \"vault/*\", \"fedgate/stage_*\"]",
        "tools = [\"up/stats\", \"vault/*\", \"fedgate/stage_*\"]",
    );
    std::fs::write(&cfg, text).unwrap();
    assert_eq!(admin_post(&s.gw, "/admin/reload").await, 200);
    assert_eq!(
        admin_post(&s.gw, &format!("/admin/plans/{id}/approve")).await,
        200
    );
    let before = upstream_calls(&s.alice, "up").await;
    let refused = approve(&s.alice, &id).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let p = plan_of(&refused);
    assert_eq!(p["status"], "blocked", "{p}");
    assert_eq!(p["errors"][0]["code"], "plan_not_allowed", "{p}");
    assert!(
        p.to_string().contains("no longer allow `up__write_note`"),
        "{p}"
    );
    assert_eq!(
        upstream_calls(&s.alice, "up").await,
        before + 1,
        "the write did not run"
    );
}

async fn env_names(c: &Client, up: &str) -> Vec<String> {
    let r = call(c, &format!("{up}__environment"), json!({}))
        .await
        .unwrap();
    serde_json::from_value(r.structured_content.unwrap()["names"].clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stdio_upstream_sees_only_the_base_its_env_and_nothing_else_of_fedgates() {
    let config = format!(
        "[gateway]\ntiers_dir = {TIERS:?}\n\n{}{}",
        stdio_upstream(
            "low",
            &[],
            "tier = \"low\"\nread_only = [\"environment\"]\n\
             env = { NEEDED = \"env:FG_TEST_NEEDED\", PLAIN = \"x\" }"
        ),
        stdio_upstream("legacy", &[], "tier = \"high\"\ninherit_env = true"),
    );
    let gw = Gateway::start_env(
        &config,
        &[
            ("FG_TEST_NEEDED", "needed-value"),
            ("OPENAI_API_KEY", "sk-test-only-not-for-low"),
        ],
    );
    let c = connect_legacy(&gw.url, TestClient::new()).await;
    let low = env_names(&c, "low").await;
    for name in ["PATH", "HOME", "NEEDED", "PLAIN"] {
        assert!(low.iter().any(|n| n == name), "{name} missing: {low:?}");
    }
    for name in ["OPENAI_API_KEY", "FG_TEST_NEEDED", "CARGO_MANIFEST_DIR"] {
        assert!(!low.iter().any(|n| n == name), "{name} leaked: {low:?}");
    }
    // Opted in: the whole environment, as before.
    let legacy = env_names(&c, "legacy").await;
    assert!(legacy.iter().any(|n| n == "OPENAI_API_KEY"), "{legacy:?}");

    // `fedgate check` says what inheriting means, and an unset reference is a problem.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("g.toml");
    std::fs::write(
        &cfg,
        config.replace("env:FG_TEST_NEEDED", "env:FG_TEST_SURELY_UNSET"),
    )
    .unwrap();
    let out = std::process::Command::new(FEDGATE)
        .args(["check", cfg.to_str().unwrap()])
        .env("FEDGATE_LOG", "warn")
        .env_remove("FG_TEST_SURELY_UNSET")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("upstream `low`: env `NEEDED`") && said.contains("FG_TEST_SURELY_UNSET"),
        "{said}"
    );
    assert!(
        said.contains("upstream `legacy`: inherit_env = true"),
        "{said}"
    );
}

/// A caller that, asked to approve, first has the operator narrow its roles (config written,
/// reloaded), then says yes: the elicitation decider's approval meets the roles of that moment.
#[derive(Clone)]
struct NarrowedWhileAsked {
    inner: TestClient,
    config: std::path::PathBuf,
    admin: String,
}

impl rmcp::ClientHandler for NarrowedWhileAsked {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        self.inner.get_info()
    }

    async fn create_elicitation(
        &self,
        params: rmcp::model::ElicitRequestParams,
        ctx: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let text = std::fs::read_to_string(&self.config).unwrap().replace(
            "tools = [\"up/*\", \"vault/*\", \"fedgate/stage_*\"]",
            "tools = [\"up/stats\", \"vault/*\", \"fedgate/stage_*\"]",
        );
        std::fs::write(&self.config, text).unwrap();
        let r = reqwest::Client::new()
            .post(format!("{}/admin/reload", self.admin))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        self.inner.create_elicitation(params, ctx).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_by_elicitation_meets_the_roles_of_the_moment_it_is_given() {
    let s = start("[\"up/*\", \"vault/*\", \"fedgate/stage_*\"]").await;
    let handler = NarrowedWhileAsked {
        inner: TestClient::new(),
        config: s.gw.dir.path().join("gateway.toml"),
        admin: s.gw.admin.clone().unwrap(),
    };
    let seen = handler.inner.seen.clone();
    let st = call(&s.alice, "fedgate__stage_status", json!({"workspace": "w"}))
        .await
        .unwrap();
    assert_ne!(st.is_error, Some(true), "{st:?}");
    let alice = {
        use rmcp::{
            ServiceExt,
            transport::{
                StreamableHttpClientTransport,
                streamable_http_client::StreamableHttpClientTransportConfig,
            },
        };
        let cfg = StreamableHttpClientTransportConfig::with_uri(s.gw.url.clone())
            .auth_header(ALICE.to_owned());
        handler
            .serve(StreamableHttpClientTransport::from_config(cfg))
            .await
            .unwrap()
    };
    let before = upstream_calls(&s.alice, "up").await;
    let r = alice
        .peer()
        .call_tool(
            rmcp::model::CallToolRequestParams::new("up__echo")
                .with_arguments(args(json!({"text": "after the reload"}))),
        )
        .await
        .unwrap();
    assert_eq!(seen.elicitations.lock().len(), 1, "she was asked");
    let said = text_of(&r);
    assert_eq!(r.is_error, Some(true), "{said}");
    assert!(!said.contains("\"after the reload\"}]"), "{said}");
    assert!(said.contains("plan_not_allowed"), "{said}");
    assert_eq!(
        upstream_calls(&s.alice, "up").await,
        before + 1,
        "only the stats call ran: the echo did not"
    );
}
