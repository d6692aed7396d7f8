//! Approval of writes (F11) end to end: a held call does not reach the upstream; the plan runs
//! once, with the frozen arguments, for its caller only; reviewers decide through
//! `fedgate__approve` or the admin API; denial, expiry and a reload that changes the tool's
//! policy end a plan. Metrics and the audit log record every decision.

use crate::common;

use common::*;
use rmcp::model::{CallToolResult, ReadResourceRequestParams, ResourceContents};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");
const ADMIN_TOKEN: &str = "admin-token-test-only";
const KEYS: [(&str, &str, &str); 3] = [
    ("alice", "fgk_alice_test_only", "[\"agent\"]"),
    ("bob", "fgk_bob_test_only", "[\"agent\"]"),
    ("rita", "fgk_rita_test_only", "[\"agent\", \"reviewer\"]"),
];

fn config(audit: &std::path::Path, ttl_ms: u64, touches: &str) -> String {
    config_with(audit, ttl_ms, touches, "[\"*\"]", "")
}

/// The approvals config with the `agent` role's tool globs and extra top-level TOML.
fn config_with(
    audit: &std::path::Path,
    ttl_ms: u64,
    touches: &str,
    agent_tools: &str,
    extra: &str,
) -> String {
    let keys: String = KEYS
        .iter()
        .map(|(name, key, roles)| {
            format!(
                "[[auth.api_keys]]\nname = \"{name}\"\nsha256 = \"{}\"\nroles = {roles}\n",
                hex::encode(Sha256::digest(key.as_bytes()))
            )
        })
        .collect();
    format!(
        "[gateway]\ntiers_dir = {TIERS:?}\nplan_ttl_ms = {ttl_ms}\n\n{extra}\n\
         [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"env:FEDGATE_ADMIN_TOKEN\"\n\n\
         [audit]\npath = {:?}\n\n[auth]\n{keys}\n\
         [roles.agent]\ntools = {agent_tools}\nresources = [\"*\"]\n[roles.reviewer]\ntools = [\"fedgate__approve\"]\n\n{}\
         [upstreams.notes.tools.write_note]\napproval = \"plan\"\ntouches_files = [{touches:?}]\n\n\
         [upstreams.notes.tools.file_ticket]\napproval = \"plan\"\napprovers = [\"reviewer\"]\nwrites_code = true\n",
        audit.display().to_string(),
        stdio_upstream("notes", &[], "tier = \"high\""),
    )
}

async fn client(gw: &Gateway, who: usize) -> Client {
    connect_with_token(&gw.url, KEYS[who].1, TestClient::new())
        .await
        .unwrap()
}

async fn approve(c: &Client, plan_id: &str, decision: &str) -> CallToolResult {
    call(
        c,
        "fedgate__approve",
        json!({"plan_id": plan_id, "decision": decision}),
    )
    .await
    .unwrap()
}

fn code(r: &CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "{r:?}");
    plan_of(r)["errors"][0]["code"].as_str().unwrap().to_owned()
}

async fn upstream_calls(c: &Client) -> u64 {
    let r = call(c, "notes__stats", json!({})).await.unwrap();
    r.structured_content.unwrap()["calls"].as_u64().unwrap()
}

async fn admin(gw: &Gateway, method: reqwest::Method, path: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .request(method, format!("{}{path}", gw.admin.as_ref().unwrap()))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

/// Holds a call and returns its plan id.
async fn held(c: &Client, tool: &str, args: Value) -> String {
    let r = call(c, tool, args).await.unwrap();
    let p = plan_of(&r);
    assert_eq!(p["status"], "ok", "{p}");
    let action = &p["next_actions"][0];
    assert_eq!(
        (&action["tool"], &action["confirm"]),
        (&json!("fedgate__approve"), &json!(true)),
        "{p}"
    );
    action["args"]["plan_id"].as_str().unwrap().to_owned()
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {series}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_wait_for_approval_and_run_once_with_the_frozen_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let gw = Gateway::start_env(
        &config(&audit, 600_000, "notes/**"),
        &[("FEDGATE_ADMIN_TOKEN", ADMIN_TOKEN)],
    );
    let (alice, bob, rita) = (
        client(&gw, 0).await,
        client(&gw, 1).await,
        client(&gw, 2).await,
    );
    let listed = alice.peer().list_all_tools().await.unwrap();
    assert!(
        listed.iter().any(|t| t.name == "fedgate__approve"),
        "listed to callers with plans to approve"
    );

    // The held call does not reach the upstream; its plan says what would run.
    let before = upstream_calls(&alice).await;
    let r = call(
        &alice,
        "notes__write_note",
        json!({"key": "k1", "value": "frozen"}),
    )
    .await
    .unwrap();
    assert_ne!(r.is_error, Some(true), "an `ok` plan, not an error: {r:?}");
    let p = plan_of(&r);
    assert_eq!(
        p["safety"],
        json!({"writes_code": false, "touches_files": ["notes/**"], "destructive": false})
    );
    let instruction = p["instruction"].as_str().unwrap();
    assert!(
        instruction.contains("notes__write_note") && instruction.contains("value=\"frozen\""),
        "{instruction}"
    );
    let id = p["next_actions"][0]["args"]["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        upstream_calls(&alice).await,
        before + 1,
        "only the stats call reached it"
    );

    // Nobody else can run or decide it; its caller runs it exactly once.
    assert_eq!(code(&approve(&bob, &id, "approve").await), "plan_unknown");
    let ran = approve(&alice, &id, "approve").await;
    assert_eq!(first_text(&ran), "stored k1");
    assert_eq!(code(&approve(&alice, &id, "approve").await), "plan_used");
    let read = alice
        .peer()
        .read_resource(ReadResourceRequestParams::new("notes://notes/k1"))
        .await
        .unwrap();
    match &read.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => assert_eq!(text, "frozen"),
        other => panic!("{other:?}"),
    }

    // The caller may withdraw a plan.
    let id = held(
        &alice,
        "notes__write_note",
        json!({"key": "k2", "value": "v"}),
    )
    .await;
    let r = approve(&alice, &id, "deny").await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert_eq!(code(&approve(&alice, &id, "approve").await), "plan_denied");

    // A reviewer role decides file_ticket; the caller then runs it. The held result of a tool
    // with an output schema is an error result (no structured content), its plan still `ok`.
    let r = call(
        &alice,
        "notes__file_ticket",
        json!({"title": "T", "priority": "high"}),
    )
    .await
    .unwrap();
    assert_eq!(r.is_error, Some(true));
    let p = plan_of(&r);
    assert_eq!(
        (&p["status"], &p["safety"]["writes_code"]),
        (&json!("ok"), &json!(true))
    );
    assert!(
        p["instruction"].as_str().unwrap().contains("role reviewer"),
        "{p}"
    );
    let id = p["next_actions"][0]["args"]["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let waiting = approve(&alice, &id, "approve").await;
    assert_eq!(
        (code(&waiting), plan_of(&waiting)["status"].clone()),
        ("awaiting_approval".into(), json!("blocked"))
    );
    assert_eq!(code(&approve(&bob, &id, "approve").await), "not_approver");
    let decided = approve(&rita, &id, "approve").await;
    assert!(first_text(&decided).contains("approved"), "{decided:?}");
    assert_eq!(
        code(&approve(&bob, &id, "approve").await),
        "not_approver",
        "bob cannot run it either"
    );
    let ran = approve(&alice, &id, "approve").await;
    assert_eq!(
        ran.structured_content.as_ref().unwrap()["title"],
        "T",
        "{ran:?}"
    );

    // The admin API lists waiting plans and decides them.
    let denied = held(
        &alice,
        "notes__file_ticket",
        json!({"title": "D", "priority": "low"}),
    )
    .await;
    let approved = held(
        &alice,
        "notes__file_ticket",
        json!({"title": "A", "priority": "low"}),
    )
    .await;
    let (status, list) = admin(&gw, reqwest::Method::GET, "/admin/plans").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&denied.as_str()) && ids.contains(&approved.as_str()),
        "{list}"
    );
    assert!(
        list.to_string().find("\"D\"").is_none(),
        "arguments are not shown: {list}"
    );
    assert_eq!(
        admin(
            &gw,
            reqwest::Method::POST,
            &format!("/admin/plans/{denied}/deny")
        )
        .await
        .0,
        200
    );
    assert_eq!(
        admin(
            &gw,
            reqwest::Method::POST,
            &format!("/admin/plans/{approved}/approve")
        )
        .await
        .0,
        200
    );
    assert_eq!(
        admin(&gw, reqwest::Method::POST, "/admin/plans/plan_nope/approve")
            .await
            .0,
        404
    );
    assert_eq!(
        code(&approve(&alice, &denied, "approve").await),
        "plan_denied"
    );
    let ran = approve(&alice, &approved, "approve").await;
    assert_eq!(ran.structured_content.as_ref().unwrap()["title"], "A");

    // A reload that changes the tool's policy voids the plans made under the old one.
    let id = held(
        &alice,
        "notes__write_note",
        json!({"key": "k3", "value": "v"}),
    )
    .await;
    std::fs::write(
        gw.dir.path().join("gateway.toml"),
        config(&audit, 600_000, "notes/other/**"),
    )
    .unwrap();
    assert_eq!(
        admin(&gw, reqwest::Method::POST, "/admin/reload").await.0,
        200
    );
    assert_eq!(
        code(&approve(&alice, &id, "approve").await),
        "plan_invalidated"
    );

    let metrics = gw.metrics_as(KEYS[0].1).await;
    assert_eq!(
        metric(&metrics, "fedgate_approvals_total{outcome=\"approved\"}"),
        3.0,
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "fedgate_approvals_total{outcome=\"denied\"}"),
        2.0
    );
    assert_eq!(
        metric(&metrics, "fedgate_approvals_total{outcome=\"invalidated\"}"),
        1.0
    );
    assert_eq!(metric(&metrics, "fedgate_plans_pending"), 0.0);
    assert!(
        metric(
            &metrics,
            "fedgate_envelopes_total{code=\"approval_required\",status=\"ok\"}"
        ) >= 6.0
    );

    // Every decision is audited with the plan and who decided.
    drop((alice, bob, rita));
    drop(gw);
    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by = |decision: &str| -> Vec<String> {
        records
            .iter()
            .filter(|r| r["decision"] == decision)
            .map(|r| r["approver"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(by("plan_approved"), ["api_key:rita", "admin"]);
    assert_eq!(by("plan_denied"), ["api_key:alice", "admin"]);
    assert_eq!(
        by("plan_executed"),
        ["api_key:alice", "api_key:rita", "admin"]
    );
    assert!(
        records
            .iter()
            .filter(|r| r["decision"] == "plan_executed")
            .all(|r| r["outcome"] == "ok" && r["latency_ms"].as_f64() > Some(0.0)),
        "the executed call's own outcome and latency"
    );
    let held_records = records.iter().filter(|r| r["decision"] == "held").count();
    assert_eq!(held_records, 6, "one per held call, with its plan id");
    assert!(records.iter().filter(|r| r["decision"] == "held").all(|r| {
        r["plan_id"]
            .as_str()
            .is_some_and(|p| p.starts_with("plan_"))
    }));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_plan_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    // Plans live one millisecond: expired before anyone can approve them.
    let gw = Gateway::start_env(
        &config(&dir.path().join("a.jsonl"), 1, "x"),
        &[("FEDGATE_ADMIN_TOKEN", ADMIN_TOKEN)],
    );
    let alice = client(&gw, 0).await;
    let id = held(
        &alice,
        "notes__write_note",
        json!({"key": "k", "value": "v"}),
    )
    .await;
    assert_eq!(code(&approve(&alice, &id, "approve").await), "plan_expired");
    let metrics = gw.metrics_as(KEYS[0].1).await;
    assert_eq!(
        metric(&metrics, "fedgate_approvals_total{outcome=\"expired\"}"),
        1.0,
        "{metrics}"
    );
    drop(alice);
    drop(gw);
    let records = std::fs::read_to_string(dir.path().join("a.jsonl")).unwrap();
    let expired: Vec<Value> = records
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["decision"] == "plan_expired")
        .collect();
    assert_eq!(expired.len(), 1, "{records}");
    assert_eq!(
        (&expired[0]["plan_id"], &expired[0]["identity"]),
        (&json!(id), &json!("alice"))
    );
    // A gateway where nothing needs approval does not list fedgate__approve.
    let plain = Gateway::start(&stdio_upstream("demo", &[], ""));
    let c = connect_legacy(&plain.url, TestClient::new()).await;
    let tools = c.peer().list_all_tools().await.unwrap();
    assert!(!tools.iter().any(|t| t.name == "fedgate__approve"));
    assert!(
        call(&c, "fedgate__approve", json!({"plan_id": "x"}))
            .await
            .unwrap_err()
            .to_string()
            .contains("unknown tool")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn interactive_callers_are_asked_directly_in_either_era() {
    let gw = Gateway::start(&format!(
        "[gateway]\ntiers_dir = {TIERS:?}\n\n{}[upstreams.notes.tools.write_note]\napproval = \"elicit\"\ntouches_files = [\"notes/**\"]\n",
        stdio_upstream("notes", &[], "tier = \"high\""),
    ));
    for modern in [false, true] {
        let era = if modern { "stateless" } else { "handshake" };
        let url = gw.url.clone();
        let connect = |handler: TestClient| {
            let url = url.clone();
            async move {
                if modern {
                    connect_modern(&url, handler).await
                } else {
                    connect_legacy(&url, handler).await
                }
            }
        };
        // Accepted: the call runs, once, with its own arguments.
        let yes = TestClient::new();
        let seen = yes.seen.clone();
        let c = connect(yes).await;
        let before = upstream_calls(&c).await;
        // rmcp's client answers the question itself, as a request (handshake era) or by
        // retrying with the answer (stateless era).
        let r = c
            .call_tool(
                rmcp::model::CallToolRequestParams::new("notes__write_note")
                    .with_arguments(args(json!({"key": "e1", "value": "yes"}))),
            )
            .await
            .unwrap_or_else(|e| panic!("{era}: {e}"));
        assert_eq!(first_text(&r), "stored e1", "{era}: {r:?}");
        let asked = seen.elicitations.lock().clone();
        assert_eq!(asked.len(), 1, "{era}: {asked:?}");
        assert!(
            asked[0].contains("notes__write_note")
                && asked[0].contains("value=\"yes\"")
                && asked[0].contains("notes/**"),
            "{era}: {asked:?}"
        );
        assert_eq!(
            upstream_calls(&c).await,
            before + 2,
            "{era}: the write ran once"
        );
        c.cancel().await.unwrap();

        // Declined: the call does not run, and the answer says it was denied.
        let no = TestClient {
            decline: true,
            ..TestClient::new()
        };
        let c = connect(no).await;
        let before = upstream_calls(&c).await;
        let r = c
            .call_tool(
                rmcp::model::CallToolRequestParams::new("notes__write_note")
                    .with_arguments(args(json!({"key": "e2", "value": "no"}))),
            )
            .await
            .unwrap();
        assert_eq!(code(&r), "plan_denied", "{era}");
        assert_eq!(
            upstream_calls(&c).await,
            before + 1,
            "{era}: only the stats call ran"
        );
        c.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_call_meets_authorization_and_rate_limits_again() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("a.jsonl");
    let limit =
        "[[rate_limits]]\nby = [\"upstream\"]\nupstream = \"notes\"\nper_second = 1\nburst = 1\n";
    let gw = Gateway::start_env(
        &config_with(&audit, 600_000, "x", "[\"*\"]", limit),
        &[("FEDGATE_ADMIN_TOKEN", ADMIN_TOKEN)],
    );
    let alice = client(&gw, 0).await;
    // The first approved write uses the upstream's only token; the second is refused by the
    // rate limit before it reaches the upstream, and its plan stays valid.
    let first = held(
        &alice,
        "notes__write_note",
        json!({"key": "a", "value": "1"}),
    )
    .await;
    let second = held(
        &alice,
        "notes__write_note",
        json!({"key": "b", "value": "2"}),
    )
    .await;
    assert_eq!(
        first_text(&approve(&alice, &first, "approve").await),
        "stored a"
    );
    let limited = approve(&alice, &second, "approve").await;
    assert_eq!(code(&limited), "rate_limited");
    assert_eq!(
        code(&approve(&alice, &second, "approve").await),
        "rate_limited",
        "not plan_used"
    );

    // Roles narrowed by a reload: the plan (same tool policy) no longer runs for this caller.
    let third = held(
        &alice,
        "notes__write_note",
        json!({"key": "c", "value": "3"}),
    )
    .await;
    std::fs::write(
        gw.dir.path().join("gateway.toml"),
        config_with(
            &audit,
            600_000,
            "x",
            "[\"fedgate__approve\", \"notes__stats\"]",
            limit,
        ),
    )
    .unwrap();
    let base = gw.admin.clone().unwrap();
    let r = reqwest::Client::new()
        .post(format!("{base}/admin/reload"))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let e = call(&alice, "fedgate__approve", json!({"plan_id": third})).await;
    let text = e.refused();
    assert!(text.contains("\"plan_not_allowed\""), "{text}");
    assert!(
        text.contains("no longer allow `notes__write_note`"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_call_that_asks_for_input_finishes_in_either_era() {
    let gw = Gateway::start(&format!(
        "[gateway]\ntiers_dir = {TIERS:?}\n\n{}[upstreams.notes.tools.ask]\napproval = \"plan\"\n",
        stdio_upstream("notes", &[], "tier = \"high\""),
    ));
    for modern in [false, true] {
        let handler = TestClient::new();
        let seen = handler.seen.clone();
        let c = if modern {
            connect_modern(&gw.url, handler).await
        } else {
            connect_legacy(&gw.url, handler).await
        };
        let id = held(&c, "notes__ask", json!({})).await;
        // The approved `ask` elicits the caller's name: a request in the handshake era, an
        // input-required round (a retry of this same fedgate__approve) in the stateless era.
        let r = c
            .call_tool(
                rmcp::model::CallToolRequestParams::new("fedgate__approve")
                    .with_arguments(args(json!({"plan_id": id}))),
            )
            .await
            .unwrap_or_else(|e| panic!("modern={modern}: {e}"));
        assert_eq!(first_text(&r), "hello ada", "modern={modern}: {r:?}");
        assert_eq!(seen.elicitations.lock().as_slice(), ["What is your name?"]);
        assert_eq!(code(&approve(&c, &id, "approve").await), "plan_used");
        c.cancel().await.unwrap();
    }
}
