//! Flow definitions several test files run.

/// Two writes through `ledger.record`, the second of which meets `inputs.signal` (so a test
/// knows it reached the upstream) and then waits 30 s; then an echo of both.
pub const WRITES: &str = r#"
id = "writes"
[inputs]
type = "object"
required = ["signal"]
properties = { signal = { type = "string" } }
[[nodes]]
id = "first"
tool = "ledger__record"
params = { value = 1 }
[[nodes]]
id = "second"
tool = "ledger__record"
depends_on = ["first"]
params = { value = 2, signal = "{{inputs.signal}}", ms = 30000 }
[[nodes]]
id = "done"
tool = "ledger__echo"
depends_on = ["second"]
params = { text = "wrote {{first.output.recorded}} and {{second.output.recorded}}" }
[outputs]
said = "{{done.output}}"
"#;

/// One write through `solo.record` that needs approval (its caller's own).
pub const OWN: &str = r#"
id = "own"
[[nodes]]
id = "entry"
tool = "solo__record"
params = { value = "v2" }
[outputs]
wrote = "{{entry.output.recorded}}"
"#;

/// A write through `ledger.record` (which names approver roles), then an echo of it.
pub const REVIEWED: &str = r#"
id = "reviewed"
[[nodes]]
id = "entry"
tool = "ledger__record"
params = { value = "v1" }
[[nodes]]
id = "confirm"
tool = "ledger__echo"
depends_on = ["entry"]
params = { text = "published {{entry.output.recorded}}" }
[outputs]
said = "{{confirm.output}}"
"#;

/// How often `upstream.record` really ran, keyed or not (the demo's `executions`).
pub async fn writes(client: &super::Client, upstream: &str) -> u64 {
    let r = super::call(
        client,
        &format!("{upstream}__executions"),
        serde_json::json!({}),
    )
    .await
    .expect("executions");
    let v = r.structured_content.expect("counts");
    let keyed: u64 = v["keys"]
        .as_object()
        .map(|m| m.values().filter_map(serde_json::Value::as_u64).sum())
        .unwrap_or(0);
    keyed + v["unkeyed"].as_u64().unwrap_or(0)
}

/// The plan a held flow call answered with: the run's id and the plan's id.
pub fn held_run(r: &rmcp::model::CallToolResult) -> (String, String) {
    let meta = r.meta.as_ref().expect("_meta");
    let run = meta.0["io.fedgate/flow_run"]
        .as_str()
        .expect("the result names its run")
        .to_owned();
    let plan = meta.0[super::PLAN_KEY]["next_actions"][0]["args"]["plan_id"]
        .as_str()
        .expect("an approve action")
        .to_owned();
    (run, plan)
}
