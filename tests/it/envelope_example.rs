//! `examples/envelope/` runs as documented: its gateway.toml against the demo upstreams, the
//! exchanges its README shows (invalid arguments, unknown tool, self-approval, reviewer
//! approval, an envelope on a success), and agent rules that say the same in both files.

use crate::common;

use common::*;
use serde_json::{Value, json};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/envelope");
const AGENT: &str = "fgk_example_agent_NOT_A_SECRET";
const REVIEWER: &str = "fgk_example_reviewer_NOT_A_SECRET";

/// The answer as the agent sees it (a tool result, or a JSON-RPC error), printed for the README.
fn show(what: &str, r: &Result<rmcp::model::CallToolResult, rmcp::ServiceError>) -> Value {
    let v = match r {
        Ok(r) => serde_json::to_value(r).unwrap(),
        Err(rmcp::ServiceError::McpError(e)) => json!({"error": e}),
        Err(e) => panic!("{what}: {e}"),
    };
    println!("--- {what}\n{}", serde_json::to_string_pretty(&v).unwrap());
    v
}

fn plan_in(v: &Value) -> &Value {
    let plan = v
        .get("_meta")
        .or_else(|| v["error"].get("data"))
        .and_then(|m| m.get(PLAN_KEY))
        .unwrap_or_else(|| panic!("no plan in {v}"));
    valid_plan(plan.clone());
    plan
}

#[tokio::test(flavor = "multi_thread")]
async fn the_envelope_example_runs_as_documented() {
    let readme = std::fs::read_to_string(format!("{DIR}/README.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::copy(format!("{DIR}/gateway.toml"), &cfg).unwrap();
    let gw = Gateway::start_file(&cfg, dir);
    let agent = connect_with_token(&gw.url, AGENT, TestClient::new())
        .await
        .unwrap();
    let reviewer = connect_with_token(&gw.url, REVIEWER, TestClient::new())
        .await
        .unwrap();

    // 1. Invalid arguments.
    let r = call(
        &agent,
        "demo__file_ticket",
        json!({"title": "Printer on fire", "priority": "asap"}),
    )
    .await;
    let v = show("invalid arguments", &r);
    let plan = plan_in(&v);
    assert_eq!(
        (&plan["status"], &v["isError"]),
        (&json!("invalid"), &json!(true))
    );
    assert_eq!(plan["errors"][0]["field"], "/priority");
    assert_eq!(
        plan["ask"]["fields"][0]["options"],
        json!(["low", "normal", "high"])
    );

    // 2. Unknown tool.
    let r = call(&agent, "demo__fil_ticket", json!({})).await;
    let v = show("unknown tool", &r);
    assert_eq!(v["error"]["code"], -32602);
    assert_eq!(
        plan_in(&v)["recovery_actions"][0]["tool"],
        "demo__file_ticket"
    );

    // 3. Self-approval.
    let r = call(
        &agent,
        "demo__write_note",
        json!({"key": "standup", "value": "10:00"}),
    )
    .await;
    let v = show("held write", &r);
    let plan = plan_in(&v);
    assert_eq!(plan["next_actions"][0]["tool"], "fedgate__approve");
    let id = plan["next_actions"][0]["args"]["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = call(&agent, "fedgate__approve", json!({"plan_id": id})).await;
    let v = show("approved and run", &r);
    assert_eq!(v["content"][0]["text"], "stored standup");

    // 4. Reviewer approval.
    let r = call(
        &agent,
        "demo__file_ticket",
        json!({"title": "Printer on fire", "priority": "high"}),
    )
    .await;
    let v = show("held for a reviewer", &r);
    let id = plan_in(&v)["next_actions"][0]["args"]["plan_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = call(&agent, "fedgate__approve", json!({"plan_id": id})).await;
    let v = show("agent asks too early", &r);
    assert_eq!(plan_in(&v)["status"], "blocked");
    let r = call(&reviewer, "fedgate__approve", json!({"plan_id": id})).await;
    let v = show("reviewer approves", &r);
    assert_eq!(plan_in(&v)["status"], "ok");
    let r = call(&agent, "fedgate__approve", json!({"plan_id": id})).await;
    let v = show("agent runs it", &r);
    assert_eq!(v["structuredContent"]["title"], "Printer on fire");

    // 5. Mode `always`: the upstream's content, then the plan, with the follow-up.
    let r = call(&agent, "notes__echo", json!({"text": "hi"})).await;
    let v = show("always", &r);
    assert_eq!(v["content"][0]["text"], "echo: hi");
    assert_eq!(plan_in(&v)["follow_up"], "Anything else to echo?");

    // The README shows these exchanges.
    for needle in [
        "\"status\": \"invalid\"",
        "\"code\": \"enum\"",
        "did you mean `demo__file_ticket`",
        "\"tool\": \"fedgate__approve\"",
        "\"confirm\": true",
        "stored standup",
        "\"code\": \"awaiting_approval\"",
        "Anything else to echo?",
        PLAN_KEY,
    ] {
        assert!(readme.contains(needle), "README lacks {needle}");
    }

    // The agent rule is one text, in Cursor's format and as a plain system prompt.
    let cursor = std::fs::read_to_string(format!("{DIR}/fedgate-plans.mdc")).unwrap();
    let prompt = std::fs::read_to_string(format!("{DIR}/system-prompt.md")).unwrap();
    let body = cursor
        .splitn(3, "---\n")
        .nth(2)
        .expect("front matter, then the rule");
    assert_eq!(body.trim(), prompt.trim());
    for rule in [
        "next_actions",
        "confirm",
        "follow_up",
        "ask",
        "recovery_actions",
        "blocked",
    ] {
        assert!(prompt.contains(rule), "the rule covers {rule}");
    }
}
