//! The plan envelope (F11) end to end: a real fedgate in front of real demo upstreams, called by
//! rmcp's client. Every envelope is checked against `schemas/orchestrated_plan.v1.json`.

use crate::common;

use common::*;
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");

/// Asserts `plan` matches the published schema, and returns it.
fn valid(plan: Value) -> Value {
    valid_plan(plan)
}

/// A plan's status and first error code.
fn outcome(plan: &Value) -> (&str, &str) {
    (
        plan["status"].as_str().unwrap_or_default(),
        plan["errors"][0]["code"].as_str().unwrap_or_default(),
    )
}

/// The plan of a refusal that travelled as a tool result; checks it is there three times over
/// (text block, `_meta`, and `structuredContent` unless the tool has an output schema).
fn refusal(r: &CallToolResult, output_schema: bool) -> Value {
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let meta = r.meta.as_ref().and_then(|m| m.0.get(PLAN_KEY)).cloned();
    let plan = valid(meta.expect("plan in _meta"));
    let text: Value = serde_json::from_str(&first_text(r)).expect("the text block is the plan");
    assert_eq!(text, plan);
    match output_schema {
        true => assert_eq!(r.structured_content, None, "would break the outputSchema"),
        false => assert_eq!(r.structured_content.as_ref(), Some(&plan)),
    }
    plan
}

/// The plan of a refusal that stays a JSON-RPC error.
fn error_plan(e: &rmcp::ServiceError) -> (rmcp::ErrorData, Value) {
    match e {
        rmcp::ServiceError::McpError(e) => {
            let plan = e.data.as_ref().and_then(|d| d.get(PLAN_KEY)).cloned();
            (e.clone(), valid(plan.expect("plan in error.data")))
        }
        other => panic!("not a JSON-RPC error: {other}"),
    }
}

async fn upstream_calls(client: &Client, stats_tool: &str) -> u64 {
    let r = call(client, stats_tool, json!({})).await.unwrap();
    r.structured_content.unwrap()["calls"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_arguments_are_refused_before_forwarding_with_fields_and_a_form() {
    let gw = Gateway::start(&format!(
        "[gateway]\ntiers_dir = {TIERS:?}\n{}{}",
        stdio_upstream("demo", &["--broken-schema"], "tier = \"high\""),
        stdio_upstream("raw", &[], "validate_arguments = false"),
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let before = upstream_calls(&client, "demo__stats").await;

    // Missing required fields.
    let r = call(&client, "demo__file_ticket", json!({})).await.unwrap();
    let plan = refusal(&r, true);
    assert_eq!(plan["status"], "invalid");
    assert_eq!(plan["missing"], json!(["title", "priority"]), "{plan}");
    let mut fields: Vec<(String, String)> = plan["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["field"].as_str().unwrap().into(),
                e["code"].as_str().unwrap().into(),
            )
        })
        .collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            ("/priority".into(), "required".into()),
            ("/title".into(), "required".into())
        ]
    );
    let ask = &plan["ask"]["fields"];
    let priority = ask
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "priority")
        .unwrap();
    assert_eq!(
        (&priority["type"], &priority["required"], &priority["label"]),
        (&json!("select"), &json!(true), &json!("Priority"))
    );
    assert_eq!(priority["options"], json!(["low", "normal", "high"]));

    // Wrong type, enum, nested format, array item, unknown property.
    let r = call(
        &client,
        "demo__file_ticket",
        json!({"title": 5, "priority": "urgent", "owner": {"email": "nope"},
               "labels": ["a", 2], "estimate": "soon", "colour": "red"}),
    )
    .await
    .unwrap();
    let plan = refusal(&r, true);
    let mut got: Vec<(String, String)> = plan["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["field"].as_str().unwrap().into(),
                e["code"].as_str().unwrap().into(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("".into(), "additional_properties".into()),
            ("/estimate".into(), "type".into()),
            ("/labels/1".into(), "type".into()),
            ("/owner/email".into(), "format".into()),
            ("/priority".into(), "enum".into()),
            ("/title".into(), "type".into()),
        ],
        "{plan}"
    );
    let names: Vec<&str> = plan["ask"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    for want in ["title", "priority", "owner.email", "labels.1", "estimate"] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    let estimate = plan["ask"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "estimate")
        .unwrap();
    assert_eq!(
        (&estimate["type"], &estimate["label"]),
        (&json!("number"), &json!("Hours of work"))
    );
    assert!(plan.get("follow_up").is_none());

    // A draft-07 schema: `items` as a tuple.
    let r = call(&client, "demo__legacy_form", json!({"pair": ["a", "b"]}))
        .await
        .unwrap();
    let plan = refusal(&r, false);
    assert_eq!(plan["errors"][0]["field"], "/pair/1", "{plan}");
    let ok = call(&client, "demo__legacy_form", json!({"pair": ["a", 1]}))
        .await
        .unwrap();
    assert_eq!(first_text(&ok), "pair: [\"a\",1]");

    // None of the refused calls reached the upstream (stats and legacy_form did).
    assert_eq!(upstream_calls(&client, "demo__stats").await, before + 2);

    // A schema that does not compile: served unchecked, reported once and in /readyz.
    let r = call(&client, "demo__broken_schema", json!({"code": 5}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "code: 5");
    let (_, ready) = gw.readyz().await;
    assert_eq!(
        ready["upstreams"]["demo"]["unchecked_tools"][0]["tool"], "broken_schema",
        "{ready}"
    );
    assert_eq!(
        gw.stderr()
            .matches("upstream=demo tool=broken_schema")
            .count(),
        1,
        "{}",
        gw.stderr()
    );

    // `validate_arguments = false`: the upstream judges the arguments itself.
    let r = call(&client, "raw__file_ticket", json!({})).await.unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert_eq!(r.structured_content.unwrap()["title"], Value::Null);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_and_failures_carry_a_plan_with_what_to_do() {
    let custom = tempfile::tempdir().unwrap();
    std::fs::copy(
        format!("{TIERS}/medium.toml"),
        custom.path().join("medium.toml"),
    )
    .unwrap();
    let gw = Gateway::start(&format!(
        "[gateway]\ntiers_dir = {:?}\n\n[[rate_limits]]\nby = [\"upstream\"]\nupstream = \"lim\"\nper_second = 1\nburst = 1\n\n{}{}{}{}{}{}",
        custom.path().display().to_string(),
        stdio_upstream("demo", &[], ""),
        stdio_upstream("lim", &[], ""),
        stdio_upstream("ro", &[], "tier = \"medium\""),
        stdio_upstream(
            "flaky",
            &[],
            "call_timeout_ms = 300\nretry = { attempts = 1 }\nbreaker = { consecutive_failures = 1, cooldown_ms = 600000, count_is_error = true }"
        ),
        stdio_upstream(
            "gone",
            &["--crash-after", "0"],
            "restart = { max_restarts = 0 }"
        ),
        stdio_upstream("w", &["--crash-after", "0"], ""),
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;

    // Unknown tool: a JSON-RPC invalid-params error; the closest names are in the message and
    // are the plan's recovery actions.
    let e = call(&client, "demo__ecoh", json!({})).await.unwrap_err();
    let (err, plan) = error_plan(&e);
    assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    assert!(
        err.message.contains("did you mean `demo__echo`"),
        "{}",
        err.message
    );
    assert_eq!(outcome(&plan), ("error", "unknown_tool"));
    assert_eq!(plan["recovery_actions"][0]["tool"], "demo__echo", "{plan}");
    // A bare tool name: the same tool in the namespaces first, with the caller's arguments.
    let e = call(&client, "echo", json!({"text": "hi"}))
        .await
        .unwrap_err();
    let (_, plan) = error_plan(&e);
    let actions = plan["recovery_actions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!actions.is_empty(), "{plan}");
    for a in &actions {
        assert!(
            a["tool"].as_str().unwrap_or("").ends_with("__echo"),
            "{plan}"
        );
        assert_eq!(a["args"], json!({"text": "hi"}), "{plan}");
    }
    // An unknown upstream part is named; a write elsewhere is never offered as recovery.
    let e = call(&client, "ledgr__record", json!({"value": 1}))
        .await
        .unwrap_err();
    let (err, plan) = error_plan(&e);
    assert!(
        err.message.contains("no upstream is named `ledgr`"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("record`"),
        "the names are still suggested: {}",
        err.message
    );
    assert!(
        plan["recovery_actions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|a| !a["tool"].as_str().unwrap_or("").ends_with(".record")),
        "{plan}"
    );
    // A mistyped name of the same upstream's write is offered (its call meets its policy).
    let e = call(&client, "demo__recrd", json!({})).await.unwrap_err();
    assert_eq!(
        error_plan(&e).1["recovery_actions"][0]["tool"],
        "demo__record"
    );
    // Prompts, resources and completions: JSON-RPC errors with the plan in `error.data`.
    let e = client
        .peer()
        .get_prompt(rmcp::model::GetPromptRequestParams::new("demo__nope"))
        .await
        .unwrap_err();
    assert_eq!(error_plan(&e).1["errors"][0]["code"], "unknown_prompt");
    let e = client
        .peer()
        .read_resource(rmcp::model::ReadResourceRequestParams::new("nowhere://x"))
        .await
        .unwrap_err();
    assert_eq!(error_plan(&e).1["errors"][0]["code"], "unknown_resource");
    // A name longer than any tool name is not compared with every tool.
    // ...and is never echoed whole: the answer names its length instead.
    let e = call(&client, &format!("demo__{}", "x".repeat(5000)), json!({}))
        .await
        .unwrap_err();
    let (err, plan) = error_plan(&e);
    assert!(plan.get("recovery_actions").is_none());
    assert!(
        err.message.contains("…(5006 characters)"),
        "{}",
        err.message
    );
    assert!(
        serde_json::to_string(&err).unwrap().len() < 4000,
        "bounded answer"
    );
    // A newline in a name cannot forge a log line.
    call(&client, "demo__x\nFORGED log line", json!({}))
        .await
        .refused();

    // Rate limited: blocked, with the wait in the hint.
    call(&client, "lim__add", json!({"a": 1, "b": 2}))
        .await
        .unwrap();
    let plan = refusal(
        &call(&client, "lim__add", json!({"a": 1, "b": 2}))
            .await
            .unwrap(),
        false,
    );
    assert_eq!(outcome(&plan), ("blocked", "rate_limited"));
    assert!(
        plan["errors"][0]["hint"]
            .as_str()
            .unwrap()
            .starts_with("retry_after_ms="),
        "{plan}"
    );

    // Tier: medium refuses an undeclared write.
    let plan = refusal(
        &call(&client, "ro__write_note", json!({"key": "k", "value": "v"}))
            .await
            .unwrap(),
        false,
    );
    assert_eq!(outcome(&plan), ("blocked", "write_not_declared"));
    assert_eq!(plan["errors"][0]["recoverable"], false);
    // The hint names the config change an operator would make, where it goes.
    let hint = plan["errors"][0]["hint"].as_str().unwrap_or("");
    assert!(
        hint.contains("[upstreams.ro]")
            && hint.contains("writable = [\"write_note\"]")
            && hint.contains("read_only = [\"write_note\"]"),
        "{plan}"
    );

    // The upstream's own isError passes as it is in mode `errors`.
    let failed = call(&client, "demo__fail", json!({})).await.unwrap();
    assert_eq!(
        (failed.is_error, failed.meta.is_none()),
        (Some(true), true),
        "{failed:?}"
    );

    // A read that times out may be repeated; it also opens flaky's breaker (one failure).
    let plan = refusal(
        &call(&client, "flaky__slow", json!({"ms": 30000}))
            .await
            .unwrap(),
        false,
    );
    assert_eq!(outcome(&plan), ("error", "timeout"));
    assert_eq!(plan["errors"][0]["recoverable"], true, "{plan}");
    let plan = refusal(
        &call(&client, "flaky__echo", json!({"text": "x"}))
            .await
            .unwrap(),
        false,
    );
    assert_eq!(outcome(&plan), ("blocked", "breaker_open"));
    assert!(
        plan["errors"][0]["hint"]
            .as_str()
            .unwrap()
            .contains("probes the upstream again at"),
        "{plan}"
    );

    // A write whose connection is lost mid-call: the outcome is uncertain, never retried.
    let plan = refusal(
        &call(&client, "w__write_note", json!({"key": "k", "value": "v"}))
            .await
            .unwrap(),
        false,
    );
    assert_eq!(outcome(&plan), ("error", "outcome_uncertain"));
    assert_eq!(plan["errors"][0]["recoverable"], false);
    assert!(
        plan["errors"][0]["hint"]
            .as_str()
            .unwrap()
            .contains("before repeating"),
        "{plan}"
    );

    // An upstream that is down: blocked, naming its state.
    call(&client, "gone__echo", json!({"text": "x"}))
        .await
        .refused();
    for _ in 0..200 {
        if gw.readyz().await.1["upstreams"]["gone"]["phase"] == "failed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let plan = refusal(
        &call(&client, "gone__echo", json!({"text": "x"}))
            .await
            .unwrap(),
        false,
    );
    assert_eq!(outcome(&plan), ("blocked", "upstream_unavailable"));
    assert!(
        plan["errors"][0]["hint"]
            .as_str()
            .unwrap()
            .contains("upstream `gone` is failed"),
        "{plan}"
    );
    assert_eq!(plan["correlation_id"].as_str().unwrap().len(), 32);
    client.cancel().await.unwrap();
    let log = gw.stderr();
    assert!(
        log.contains("demo__x\\nFORGED"),
        "escaped in the log: {log}"
    );
    assert!(!log.lines().any(|l| l.starts_with("FORGED")), "{log}");
}

/// A result as JSON, for byte-for-byte comparison.
fn json_of(r: &CallToolResult) -> Value {
    serde_json::to_value(r).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn mode_off_is_a_direct_call_and_mode_always_keeps_the_upstream_content() {
    let demo = HttpDemo::start("d", "--http");
    let up = |name: &str, extra: &str| {
        format!(
            "[upstreams.{name}]\nkind = \"http\"\nurl = \"{}\"\n{extra}\n",
            demo.url
        )
    };
    let gw = Gateway::start(&format!(
        "[[rate_limits]]\nby = [\"upstream\"]\nupstream = \"off\"\nper_second = 1\nburst = 2\n\n{}{}{}",
        up("off", "envelope = \"off\""),
        up("all", "envelope = \"always\""),
        up(
            "fu",
            "[upstreams.fu.tools.echo]\nfollow_up = \"Shall I echo something else?\"",
        ),
    ));
    let direct = connect_legacy(&demo.url, TestClient::new()).await;
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let add = json!({"a": 2, "b": 3});

    // Mode off: the same bytes as the upstream's own answer, success and isError alike.
    let want_add = json_of(&call(&direct, "add", add.clone()).await.unwrap());
    let want_fail = json_of(&call(&direct, "fail", json!({})).await.unwrap());
    assert_eq!(
        json_of(&call(&client, "off__add", add.clone()).await.unwrap()),
        want_add
    );
    assert_eq!(
        json_of(&call(&client, "off__fail", json!({})).await.unwrap()),
        want_fail
    );
    // ...and refusals stay plain JSON-RPC errors (the burst of 2 is used up by now).
    let e = call(&client, "off__add", add.clone()).await.unwrap_err();
    match e {
        rmcp::ServiceError::McpError(e) => {
            assert!(e.message.contains("rate limited"), "{}", e.message);
            assert!(
                e.data.as_ref().and_then(|d| d.get(PLAN_KEY)).is_none(),
                "{e:?}"
            );
        }
        other => panic!("{other}"),
    }

    // Mode always: the upstream's content and structured content are kept as they are; the
    // plan is added in `_meta` and as one more text block.
    let r = call(&client, "all__add", add.clone()).await.unwrap();
    assert_eq!(r.content.len(), 2, "{r:?}");
    assert_eq!(json!(r.content[0]), want_add["content"][0]);
    assert_eq!(json!(r.structured_content), want_add["structuredContent"]);
    assert_eq!(json_of(&r)["isError"], want_add["isError"]);
    let plan = valid(r.meta.as_ref().unwrap().0[PLAN_KEY].clone());
    assert_eq!(plan["status"], "ok");
    let text: Value = serde_json::from_str(r.content[1].as_text().unwrap().text.as_str()).unwrap();
    assert_eq!(text, plan);
    // An upstream isError becomes an `error` plan, and keeps the upstream's content.
    let r = call(&client, "all__fail", json!({})).await.unwrap();
    assert_eq!(
        (r.is_error, json!(r.content[0])),
        (Some(true), want_fail["content"][0].clone())
    );
    let plan = valid(r.meta.as_ref().unwrap().0[PLAN_KEY].clone());
    assert_eq!(outcome(&plan), ("error", "tool_error"));
    assert_eq!(plan["errors"][0]["message"], "this tool always fails");
    assert!(plan.get("follow_up").is_none());

    // Mode errors with a configured follow-up: an `ok` plan in `_meta`, and the question as
    // one more text block (desktop clients give the model content, never `_meta`).
    let r = call(&client, "fu__echo", json!({"text": "hi"}))
        .await
        .unwrap();
    assert_eq!((r.content.len(), first_text(&r).as_str()), (2, "echo: hi"));
    assert_eq!(
        r.content[1].as_text().map(|t| t.text.as_str()),
        Some("Follow-up for the user: Shall I echo something else?")
    );
    let plan = valid(r.meta.as_ref().unwrap().0[PLAN_KEY].clone());
    assert_eq!(plan["follow_up"], "Shall I echo something else?");
    // Other tools of that upstream get nothing added.
    let r = call(&client, "fu__add", add).await.unwrap();
    assert_eq!(json_of(&r), want_add);
    direct.cancel().await.unwrap();
    client.cancel().await.unwrap();
}
