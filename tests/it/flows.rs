//! Flows (F12) through a real fedgate: real demo upstreams see the node calls, a real MCP
//! client calls `flows.<id>`, the run log is read back with `fedgate flows show --json`, and a
//! SIGKILLed gateway resumes its run.

use crate::common;

use std::{path::Path, process::Command};

use common::{flows::WRITES, *};
use serde_json::{Value, json};

const ADMIN_TOKEN: &str = "admin-token-0123456789";
const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");

/// A gateway with `flows` (file name, text) in its flows folder and an admin listener.
fn gateway(upstreams: &str, flows: &[(&str, &str)]) -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = write(dir.path(), upstreams, flows);
    Gateway::start_file(&cfg, dir)
}

fn write(dir: &Path, upstreams: &str, flows: &[(&str, &str)]) -> std::path::PathBuf {
    write_with(dir, "", upstreams, flows)
}

/// Like `write`, with more `[flows]` settings.
fn write_with(
    dir: &Path,
    settings: &str,
    upstreams: &str,
    flows: &[(&str, &str)],
) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("flows")).expect("flows dir");
    for (name, text) in flows {
        std::fs::write(dir.join("flows").join(name), text).expect("flow file");
    }
    let cfg = dir.join("gateway.toml");
    let token = dir.join("admin.token");
    std::fs::write(&token, ADMIN_TOKEN).expect("token file");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\ntiers_dir = {TIERS:?}\n\n[flows]\ndir = \"flows\"\ndb = \"runs.db\"\n{settings}\n\
             [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"file:{}\"\n\n{upstreams}",
            token.display()
        ),
    )
    .expect("config");
    cfg
}

/// `fedgate flows show RUN --json`: the run as its log records it.
fn show(gw: &Gateway, run: &str) -> Value {
    let out = Command::new(FEDGATE)
        .args(["flows", "-c"])
        .arg(gw.dir.path().join("gateway.toml"))
        .args(["show", run, "--json"])
        .output()
        .expect("flows show");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("show --json prints JSON")
}

fn run_id(r: &rmcp::model::CallToolResult) -> String {
    r.meta
        .as_ref()
        .and_then(|m| m.0.get("io.fedgate/flow_run"))
        .and_then(Value::as_str)
        .expect("the result names its run")
        .to_owned()
}

/// The sequence number of the first event `kind` of `node`.
fn seq_of(run: &Value, kind: &str, node: &str) -> u64 {
    run["events"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["event"] == kind && e["node"] == node)
        .and_then(|e| e["seq"].as_u64())
        .unwrap_or_else(|| panic!("no {kind} of {node} in {run}"))
}

async fn admin(gw: &Gateway, method: &str, path: &str, body: Value) -> (u16, Value) {
    let url = format!("{}/admin/flows/{path}", gw.admin.as_deref().expect("admin"));
    let r = reqwest::Client::new()
        .request(method.parse().expect("method"), url)
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .expect("admin request");
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

const FAN: &str = r#"
id = "fan"
parallelism = 2
[[nodes]]
id = "a"
tool = "demo__meet"
params = { group = "fan", n = 2 }
[[nodes]]
id = "b"
tool = "demo__meet"
params = { group = "fan", n = 2 }
[[nodes]]
id = "c"
tool = "demo__meet"
params = { group = "fan", n = 4 }
[[nodes]]
id = "d"
tool = "demo__meet"
params = { group = "fan", n = 4 }
[[nodes]]
id = "join"
tool = "demo__add"
depends_on = ["a", "b", "c", "d"]
params = { a = "{{a.output.peak}}", b = "{{d.output.peak}}" }
[outputs]
peaks = ["{{a.output.peak}}", "{{b.output.peak}}", "{{c.output.peak}}", "{{d.output.peak}}"]
sum = "{{join.output.sum}}"
"#;

#[tokio::test(flavor = "multi_thread")]
async fn parallel_branches_meet_at_the_upstream_within_the_bound_and_the_join_waits() {
    let gw = gateway(&stdio_upstream("demo", &[], ""), &[("fan.toml", FAN)]);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "flows__fan", json!({}))
        .await
        .expect("flow call");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let out = r.structured_content.clone().expect("outputs");
    // `a` and `b` could only return once both were inside the upstream at once: they ran
    // concurrently. No call saw more than two inside: the flow's parallelism held.
    assert_eq!(out["peaks"], json!([2, 2, 2, 2]), "{out}");
    assert_eq!(
        out["sum"],
        json!(4.0),
        "templates keep numbers numbers: {out}"
    );
    let run = show(&gw, &run_id(&r));
    let join = seq_of(&run, "node_running", "join");
    for n in ["a", "b", "c", "d"] {
        assert!(
            seq_of(&run, "node_succeeded", n) < join,
            "join ran before {n} ended: {run}"
        );
    }
    assert_eq!(run["state"]["finished"], "succeeded");
}

/// Commands that only read work without the admin token (an `env:` variable not set in this
/// shell); those that need the serving gateway say why they cannot reach it, and never drive
/// the run themselves.
#[tokio::test(flavor = "multi_thread")]
async fn reading_commands_need_no_admin_token_and_the_others_say_why_not() {
    let gw = gateway(&stdio_upstream("demo", &[], ""), &[("fan.toml", FAN)]);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "flows__fan", json!({})).await.expect("call");
    let run = run_id(&r);
    let cfg = gw.dir.path().join("gateway.toml");
    let text = std::fs::read_to_string(&cfg).expect("config");
    let token_line = text
        .lines()
        .find(|l| l.starts_with("token = "))
        .expect("token line")
        .to_owned();
    let unset = gw.dir.path().join("unset.toml");
    std::fs::write(
        &unset,
        text.replace(&token_line, "token = \"env:FG_TOKEN_NOT_SET_HERE\""),
    )
    .expect("config");
    let fedgate = |args: &[&str]| {
        Command::new(FEDGATE)
            .args(args)
            .env_remove("FG_TOKEN_NOT_SET_HERE")
            .output()
            .expect("fedgate")
    };
    let path = unset.to_str().expect("path");
    let out = fedgate(&["flows", "-c", path, "show", &run, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(
        shown["run"].to_string().contains(&run) && shown["state"]["finished"] == "succeeded",
        "{shown}"
    );
    let out = fedgate(&["flows", "-c", path, "list"]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("flows__fan"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = fedgate(&["flows", "-c", path, "run", "fan"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("needs the serving gateway's admin API")
            && err.contains("`FG_TOKEN_NOT_SET_HERE` is not set"),
        "{err}"
    );
    let out = fedgate(&["plans", "-c", path, "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("cannot reach the serving gateway's admin API"),
        "{err}"
    );
    // The serving gateway's run is untouched: nobody here drove it.
    assert_eq!(show(&gw, &run)["events"], shown["events"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_upstream_gets_no_more_than_its_share_of_parallel_nodes() {
    // The flow would run four at once; the upstream's bound is two.
    let fan = FAN.replace("parallelism = 2", "parallelism = 4");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = write_with(
        dir.path(),
        "upstream_parallelism = 2\n",
        &stdio_upstream("demo", &[], ""),
        &[("fan.toml", &fan)],
    );
    let gw = Gateway::start_file(&cfg, dir);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "flows__fan", json!({}))
        .await
        .expect("flow call");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let out = r.structured_content.clone().expect("outputs");
    assert_eq!(out["peaks"], json!([2, 2, 2, 2]), "{out}");
}

const BRANCH: &str = r#"
id = "branch"
[inputs]
type = "object"
required = ["text"]
properties = { text = { type = "string" }, loud = { type = "boolean" } }
[[nodes]]
id = "say"
tool = "demo__echo"
params = { text = "{{inputs.text}}" }
[[nodes]]
id = "shout"
tool = "demo__echo"
depends_on = ["say"]
when = "inputs.loud == `true`"
params = { text = "LOUD {{say.output}}" }
[[nodes]]
id = "after"
tool = "demo__echo"
depends_on = ["shout"]
params = { text = "after {{shout.output}}" }
[outputs]
said = "{{say.output}}"
after = "{{after.output}}"
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_false_condition_skips_its_node_and_everything_after_it() {
    let gw = gateway(&stdio_upstream("demo", &[], ""), &[("branch.toml", BRANCH)]);
    let client = connect_legacy(&gw.url, TestClient::new()).await;

    let quiet = call(&client, "flows__branch", json!({"text": "hi"}))
        .await
        .expect("call");
    assert_eq!(quiet.is_error, Some(false), "{quiet:?}");
    assert_eq!(
        quiet.structured_content,
        Some(json!({"said": "echo: hi", "after": null}))
    );
    let run = show(&gw, &run_id(&quiet));
    let nodes = &run["state"]["nodes"];
    assert_eq!(nodes["shout"]["status"], "SKIPPED", "{run}");
    assert!(
        nodes["shout"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("is false")
    );
    assert_eq!(nodes["after"]["status"], "SKIPPED");
    assert_eq!(nodes["after"]["error"], "dependency `shout` was skipped");

    let loud = call(
        &client,
        "flows__branch",
        json!({"text": "hi", "loud": true}),
    )
    .await
    .expect("call");
    assert_eq!(
        loud.structured_content,
        Some(json!({"said": "echo: hi", "after": "echo: after echo: LOUD echo: hi"}))
    );
}

const TYPES: &str = r#"
id = "types"
[inputs]
type = "object"
properties = { n = { type = "number" } }
[[nodes]]
id = "sum"
tool = "demo__add"
params = { a = "{{inputs.n}}", b = 1 }
[[nodes]]
id = "lost"
tool = "demo__echo"
depends_on = ["sum"]
params = { text = "{{sum.output.total}}" }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn templates_keep_json_types_and_a_missing_path_names_node_and_path() {
    let gw = gateway(&stdio_upstream("demo", &[], ""), &[("types.toml", TYPES)]);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "flows__types", json!({"n": 41}))
        .await
        .expect("call");
    // `sum` ran (so `{{inputs.n}}` reached add as a number), `lost` could not start.
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let plan = valid_plan(r.structured_content.clone().expect("a plan"));
    assert_eq!(plan["status"], "partial", "{plan}");
    let steps = plan["partial_results"].as_array().expect("partial_results");
    let sum = steps.iter().find(|s| s["step"] == "sum").expect("sum");
    assert_eq!(sum["status"], "ok");
    assert_eq!(sum["output"], json!({"sum": 42.0}));
    let lost = steps.iter().find(|s| s["step"] == "lost").expect("lost");
    assert_eq!(lost["status"], "error");
    let msg = lost["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("node `lost`")
            && msg.contains("sum.output.total")
            && msg.contains("node `sum`"),
        "{msg}"
    );
}

#[test]
fn every_static_check_names_file_and_line_and_good_flows_still_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = [
        (
            "cycle.toml",
            "id = \"cycle\"\n[[nodes]]\nid = \"a\"\ntool = \"demo__echo\"\ndepends_on = [\"b\"]\n[[nodes]]\nid = \"b\"\ntool = \"demo__echo\"\ndepends_on = [\"a\"]\n",
        ),
        (
            "unknown_dep.toml",
            "id = \"unknown_dep\"\n[[nodes]]\nid = \"a\"\ntool = \"demo__echo\"\ndepends_on = [\n  \"ghost\",\n]\n",
        ),
        (
            "ancestor.toml",
            "id = \"ancestor\"\n[[nodes]]\nid = \"a\"\ntool = \"demo__echo\"\n[[nodes]]\nid = \"b\"\ntool = \"demo__echo\"\nparams = { text = \"{{a.output}}\" }\n",
        ),
        (
            "tool.toml",
            "id = \"tool\"\n[[nodes]]\nid = \"a\"\ntool = \"nowhere__echo\"\n",
        ),
        (
            "dotted.toml",
            "id = \"dotted\"\n[[nodes]]\nid = \"a\"\ntool = \"demo.echo\"\n",
        ),
        (
            "canonical.toml",
            "id = \"canonical\"\n[[nodes]]\nid = \"a\"\ntool = \"nowhere/echo\"\n",
        ),
        (
            "when.toml",
            "id = \"when\"\n[[nodes]]\nid = \"a\"\ntool = \"demo__echo\"\nwhen = \"inputs.[\"\n",
        ),
        (
            "dup.toml",
            "id = \"dup\"\n[[nodes]]\nid = \"a\"\ntool = \"demo__echo\"\n[[nodes]]\nid = \"a\"\ntool = \"demo__echo\"\n",
        ),
        ("syntax.toml", "id = \"syntax\"\nnodes = [\n"),
        (
            "field.toml",
            "id = \"field\"\n[[nodes]]\nid = \"a\"\ntool = \"demo__echo\"\nretries = 3\n",
        ),
    ];
    let mut all: Vec<(&str, &str)> = bad.to_vec();
    all.push((
        "good.toml",
        "id = \"good\"\n[[nodes]]\nid = \"a\"\ntool = \"demo/echo\"\n",
    ));
    let cfg = write(dir.path(), &stdio_upstream("demo", &[], ""), &all);
    let out = Command::new(FEDGATE)
        .arg("check")
        .arg(&cfg)
        .output()
        .expect("check");
    assert!(!out.status.success(), "a bad flow fails the check");
    let err = String::from_utf8_lossy(&out.stderr);
    let flows = dir.path().join("flows");
    // Today's form still loads, with a warning that names the canonical form.
    assert!(
        err.contains("warning: ") && err.contains("write tool `demo__echo` as `demo/echo`"),
        "{err}"
    );
    let at = |file: &str, line: usize| format!("{}:{line}: ", flows.join(file).display());
    for (file, line, what) in [
        ("cycle.toml", 2, "cycle: a -> b -> a"),
        ("unknown_dep.toml", 6, "depends on unknown node `ghost`"),
        (
            "ancestor.toml",
            5,
            "`b` uses `{{a.output}}`, but `a` is not among its dependencies",
        ),
        (
            "tool.toml",
            2,
            "tool `nowhere__echo` is in no configured upstream's namespace",
        ),
        (
            "dotted.toml",
            2,
            "tool `demo.echo`: the separator is `__`, so that name is in no upstream's namespace; write `demo/echo`",
        ),
        (
            "canonical.toml",
            2,
            "tool `nowhere/echo`: `nowhere` is no configured upstream (upstreams: demo)",
        ),
        ("when.toml", 2, "bad `when`"),
        ("dup.toml", 5, "node id `a` is used twice"),
        ("syntax.toml", 2, "unclosed array"),
        ("field.toml", 5, "unknown field `retries`"),
    ] {
        let prefix = at(file, line);
        assert!(
            err.lines()
                .any(|l| l.starts_with(&prefix) && l.contains(what)),
            "want `{prefix}…{what}` in:\n{err}"
        );
    }
    // A served gateway starts anyway, with the good flow as its only flow tool.
    let gw = Gateway::start_file(&cfg, tempfile::tempdir().expect("tempdir"));
    assert!(
        gw.stderr().contains("flow not loaded"),
        "bad flows are reported: {}",
        gw.stderr()
    );
    let stack = tokio::runtime::Runtime::new().expect("runtime");
    let tools: Vec<String> = stack.block_on(async {
        let client = connect_legacy(&gw.url, TestClient::new()).await;
        let tools = client.peer().list_all_tools().await.expect("list");
        tools
            .into_iter()
            .map(|t| t.name.to_string())
            .filter(|n| n.starts_with("flows__"))
            .collect()
    });
    assert_eq!(tools, ["flows__good"]);
    // The rest of the config loads: the good flow is listed.
    let list = Command::new(FEDGATE)
        .args(["flows", "-c"])
        .arg(&cfg)
        .arg("list")
        .output()
        .expect("list");
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        listed.contains("good") && listed.contains("flows__good"),
        "{listed}"
    );
    assert!(!listed.contains("cycle"), "{listed}");
}

/// The upstream's own count of effects, per idempotency key.
async fn executions(ledger: &str) -> Value {
    let c = connect_legacy(ledger, TestClient::new()).await;
    let r = call(&c, "executions", json!({})).await.expect("executions");
    r.structured_content.expect("counts")
}

/// Starts `writes`, waits until its second write has happened at the upstream (the upstream
/// meets the test's own `meet` call before it answers), and SIGKILLs the gateway.
async fn kill_during_second_write(gw: &mut Gateway, ledger: &str, signal: &str) -> String {
    let (status, started) = admin(
        gw,
        "POST",
        "writes/runs",
        json!({"inputs": {"signal": signal}}),
    )
    .await;
    assert_eq!(status, 202, "{started}");
    let run = started["run_id"].as_str().expect("run id").to_owned();
    let c = connect_legacy(ledger, TestClient::new()).await;
    let met = call(
        &c,
        "meet",
        json!({"group": signal, "n": 2, "timeout_ms": 20000}),
    )
    .await
    .expect("meet");
    assert_eq!(
        met.is_error,
        Some(false),
        "the second write never arrived: {met:?}"
    );
    gw.child.kill().expect("SIGKILL");
    gw.child.wait().expect("reaped");
    run
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_gateway_resumes_its_run_and_each_write_happens_once() {
    let ledger = HttpDemo::start("ledger", "--http");
    let upstream = format!(
        "[upstreams.ledger]\nkind = \"http\"\nurl = \"{}\"\ntier = \"high\"\nidempotency_keys = true\n",
        ledger.url
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = write(dir.path(), &upstream, &[("writes.toml", WRITES)]);
    let mut gw = Gateway::start_file(&cfg, dir);
    let run = kill_during_second_write(&mut gw, &ledger.url, "crash-once").await;
    let before = show(&gw, &run);
    assert_eq!(
        before["state"]["nodes"]["second"]["status"], "RUNNING",
        "{before}"
    );

    // The same config and run log: the run resumes, `second` is driven again with its key.
    let gw = Gateway::start_file(
        &cfg,
        std::mem::replace(&mut gw.dir, tempfile::tempdir().unwrap()),
    );
    let (_, after) = admin(&gw, "GET", &format!("runs/{run}?wait_ms=20000"), json!({})).await;
    assert_eq!(after["state"]["finished"], "succeeded", "{after}");
    assert_eq!(
        after["state"]["outputs"]["said"], "echo: wrote 1 and 2",
        "{after}"
    );
    assert_eq!(
        after["state"]["nodes"]["second"]["attempts"], 2,
        "re-driven once: {after}"
    );
    let counts = executions(&ledger.url).await;
    assert_eq!(
        counts,
        json!({"keys": {format!("{run}:first"): 1, format!("{run}:second"): 1}, "unkeyed": 0}),
        "each write ran once at the upstream"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_write_without_idempotency_keys_waits_for_a_decision() {
    let ledger = HttpDemo::start("ledger", "--http");
    let upstream = format!(
        "[upstreams.ledger]\nkind = \"http\"\nurl = \"{}\"\ntier = \"high\"\n",
        ledger.url
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = write(dir.path(), &upstream, &[("writes.toml", WRITES)]);
    let mut gw = Gateway::start_file(&cfg, dir);
    let run = kill_during_second_write(&mut gw, &ledger.url, "crash-blocked").await;
    let gw = Gateway::start_file(
        &cfg,
        std::mem::replace(&mut gw.dir, tempfile::tempdir().unwrap()),
    );
    let blocked = show(&gw, &run);
    let second = &blocked["state"]["nodes"]["second"];
    assert_eq!(second["status"], "BLOCKED", "{blocked}");
    assert!(
        second["error"]
            .as_str()
            .unwrap_or("")
            .contains("re-run or skip"),
        "{second}"
    );

    let (status, v) = admin(
        &gw,
        "POST",
        &format!("runs/{run}/nodes/second/skip"),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let (_, after) = admin(&gw, "GET", &format!("runs/{run}?wait_ms=20000"), json!({})).await;
    assert_eq!(after["state"]["finished"], "succeeded", "{after}");
    assert_eq!(
        after["state"]["nodes"]["done"]["status"], "SKIPPED",
        "{after}"
    );
    // Not re-run blindly: the interrupted write happened once.
    let counts = executions(&ledger.url).await;
    assert_eq!(counts["keys"][format!("{run}:second")], 1, "{counts}");
}

const COUNTED: &str = r#"
id = "counted"
[[nodes]]
id = "sum"
tool = "demo__add"
params = { a = 1, b = 2 }
[[nodes]]
id = "calls"
tool = "demo__stats"
depends_on = ["sum"]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn replay_reports_what_changed_and_rerun_appends_events() {
    let gw = gateway(
        &stdio_upstream("demo", &[], ""),
        &[("counted.toml", COUNTED)],
    );
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "flows__counted", json!({}))
        .await
        .expect("call");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let run = run_id(&r);
    let recorded = show(&gw, &run);

    // `sum` answers the same; `stats` counts calls, so its answer differs on every run.
    let (status, report) = admin(&gw, "POST", &format!("runs/{run}/replay"), json!({})).await;
    assert_eq!(status, 200, "{report}");
    let diverged: Vec<&str> = report["divergences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["node"].as_str())
        .collect();
    assert_eq!(diverged, ["calls"], "{report}");
    let replay = report["replay_run_id"].as_str().expect("replay run");
    assert_eq!(show(&gw, replay)["run"]["replay_of"], run.as_str());

    let (status, v) = admin(&gw, "POST", &format!("runs/{run}/rerun/calls"), json!({})).await;
    assert_eq!(status, 200, "{v}");
    let (_, after) = admin(&gw, "GET", &format!("runs/{run}?wait_ms=20000"), json!({})).await;
    assert_eq!(after["state"]["finished"], "succeeded", "{after}");
    let events = after["events"].as_array().expect("events");
    let recorded_events = recorded["events"].as_array().expect("events");
    assert_eq!(
        &events[..recorded_events.len()],
        &recorded_events[..],
        "a rerun only appends"
    );
    let kinds: Vec<&str> = events[recorded_events.len()..]
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"run_reopened"), "{kinds:?}");
    assert!(
        kinds.contains(&"node_reset") && kinds.last() == Some(&"run_finished"),
        "{kinds:?}"
    );
    assert_eq!(
        after["state"]["nodes"]["sum"], recorded["state"]["nodes"]["sum"],
        "upstream of the rerun node: untouched"
    );
    assert_ne!(
        after["state"]["nodes"]["calls"]["output"], recorded["state"]["nodes"]["calls"]["output"],
        "the rerun node ran again"
    );
}

const RECORDED: &str = r#"
id = "recorded"
idempotency = "off"
[[nodes]]
id = "write"
tool = "demo__record"
params = { value = "once" }
[[nodes]]
id = "sum"
tool = "demo__add"
depends_on = ["write"]
params = { a = 1, b = 2 }
[outputs]
wrote = "{{write.output.recorded}}"
"#;

#[tokio::test(flavor = "multi_thread")]
async fn replay_does_not_repeat_a_write_the_upstream_cannot_deduplicate_unless_allowed() {
    // No idempotency keys (the flow sends none, the demo upstream declares none): a replay
    // that called the write again would write twice.
    let gw = gateway(
        &stdio_upstream("demo", &[], ""),
        &[("recorded.toml", RECORDED)],
    );
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "flows__recorded", json!({}))
        .await
        .expect("call");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let run = run_id(&r);
    assert_eq!(common::flows::writes(&client, "demo").await, 1);

    let (status, report) = admin(&gw, "POST", &format!("runs/{run}/replay"), json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["not_replayed"], json!(["write"]), "{report}");
    assert_eq!(report["divergences"], json!([]), "{report}");
    assert_eq!(
        common::flows::writes(&client, "demo").await,
        1,
        "the write was not repeated"
    );
    let replay = report["replay_run_id"].as_str().expect("replay run");
    let shown = show(&gw, replay);
    assert_eq!(shown["state"]["finished"], "succeeded", "{shown}");
    assert_eq!(
        shown["state"]["outputs"],
        json!({"wrote": "once"}),
        "{shown}"
    );

    // Asked for: it writes again.
    let (status, report) = admin(
        &gw,
        "POST",
        &format!("runs/{run}/replay?allow_writes=true"),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["not_replayed"], json!([]), "{report}");
    assert_eq!(common::flows::writes(&client, "demo").await, 2);

    // Every node ran, but the outputs cannot be made (the flow now reads a field the write
    // does not answer): the replay diverged, it did not fail.
    std::fs::write(
        gw.dir.path().join("flows/recorded.toml"),
        RECORDED.replace("write.output.recorded", "write.output.written"),
    )
    .expect("flow");
    let reloaded = reqwest::Client::new()
        .post(format!(
            "{}/admin/reload",
            gw.admin.as_deref().expect("admin")
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("reload");
    assert_eq!(reloaded.status().as_u16(), 200);
    let (_, report) = admin(&gw, "POST", &format!("runs/{run}/replay"), json!({})).await;
    let replay = report["replay_run_id"].as_str().expect("replay run");
    let shown = show(&gw, replay);
    assert_eq!(shown["state"]["finished"], "diverged", "{shown}");
    assert!(
        shown["state"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("diverged") && e.contains("write.output.written")),
        "{shown}"
    );
}

const HELD: &str = r#"
id = "held"
[[nodes]]
id = "write"
tool = "demo__record"
params = { value = "v" }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn one_process_drives_a_run_log_the_others_only_read_it() {
    use rmcp::{ServiceExt, transport::TokioChildProcess};
    let gw = gateway(
        &stdio_upstream(
            "demo",
            &[],
            "tier = \"high\"\n[upstreams.demo.tools.record]\napproval = \"plan\"\n",
        ),
        &[("held.toml", HELD)],
    );
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    // A run the serving gateway drives, parked on its approval (unfinished).
    let parked = call(&client, "flows__held", json!({}))
        .await
        .expect("parked");
    let run = run_id(&parked);
    let before = show(&gw, &run)["events"].as_array().map(Vec::len);

    // Two `fedgate stdio` on the same config, as desktop clients spawn them.
    let cfg = gw.dir.path().join("gateway.toml");
    for i in 0..2 {
        let log = gw.dir.path().join(format!("stdio-{i}.log"));
        let mut cmd = tokio::process::Command::new(FEDGATE);
        cmd.args(["stdio", "--config"])
            .arg(&cfg)
            .env("FEDGATE_LOG", "info")
            .stderr(std::fs::File::create(&log).expect("log file"));
        let stdio = TestClient::new()
            .serve(TokioChildProcess::new(cmd).expect("spawn stdio"))
            .await
            .expect("stdio session");
        let refused = stdio
            .peer()
            .call_tool(rmcp::model::CallToolRequestParams::new("flows__held"))
            .await;
        let text = format!("{refused:?}");
        assert!(
            text.contains("is driven by pid") && text.contains("fedgate serve"),
            "a flow call names the process that drives the log: {text}"
        );
        stdio.cancel().await.expect("stop stdio");
        let logged = std::fs::read_to_string(&log).expect("stdio log");
        assert!(
            !logged.contains("resuming flow run"),
            "it resumed the gateway's run: {logged}"
        );
    }
    let after = show(&gw, &run);
    assert_eq!(
        after["events"].as_array().map(Vec::len),
        before,
        "nothing appended to the gateway's run: {after}"
    );
    // The gateway still drives it: approving runs the write.
    let (_, plan) = common::flows::held_run(&parked);
    let done = call(&client, "fedgate__approve", json!({"plan_id": plan}))
        .await
        .expect("approved");
    assert_eq!(done.is_error, Some(false), "{done:?}");
}

const GUARDED: &str = r#"
id = "guarded"
[[nodes]]
id = "sum"
tool = "demo__add"
params = { a = 1, b = 2 }
[[nodes]]
id = "secret"
tool = "demo__whoami"
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_node_refused_by_policy_shows_its_refusal_in_partial_results() {
    let key = "flow-user-key-0123456789";
    let auth = format!(
        "[auth]\n[[auth.api_keys]]\nname = \"user\"\nsha256 = \"{}\"\nroles = [\"runner\"]\n\n\
         [roles.runner]\ntools = [\"flows__*\", \"demo__add\"]\n\n",
        raw::sha(key)
    );
    let gw = gateway(
        &format!("{auth}{}", stdio_upstream("demo", &[], "")),
        &[("guarded.toml", GUARDED)],
    );
    let client = connect_with_token(&gw.url, key, TestClient::new())
        .await
        .expect("connect");
    let r = call(&client, "flows__guarded", json!({}))
        .await
        .expect("call");
    let plan = valid_plan(r.structured_content.clone().expect("plan"));
    assert_eq!(plan["status"], "partial", "{plan}");
    let steps = plan["partial_results"].as_array().expect("steps");
    let secret = steps
        .iter()
        .find(|s| s["step"] == "secret")
        .expect("secret");
    assert_eq!(secret["status"], "error");
    // The caller's roles do not reach demo.whoami: the node meets the same refusal as a
    // direct call (an unknown tool, to this caller).
    assert!(
        secret["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("demo__whoami"),
        "{secret}"
    );
    let sum = steps.iter().find(|s| s["step"] == "sum").expect("sum");
    assert_eq!(sum["status"], "ok", "{sum}");
}

const PUBLISH: &str = r#"
id = "publish"
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

fn ledger_with_approval() -> String {
    stdio_upstream(
        "ledger",
        &[],
        "tier = \"high\"\n[upstreams.ledger.tools.record]\napproval = \"plan\"\n",
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_that_needs_approval_parks_the_run_until_it_is_approved() {
    let gw = gateway(&ledger_with_approval(), &[("publish.toml", PUBLISH)]);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let parked = call(&client, "flows__publish", json!({}))
        .await
        .expect("call");
    let plan = valid_plan(parked.structured_content.clone().expect("plan"));
    // The same plan a held direct call gets: not run yet, the human confirms, with safety.
    assert_eq!(plan["status"], "ok", "{plan}");
    assert_eq!(parked.is_error, Some(false), "{parked:?}");
    assert_eq!(plan["next_actions"][0]["confirm"], true, "{plan}");
    assert!(plan["safety"].is_object(), "{plan}");
    assert!(
        plan["instruction"]
            .as_str()
            .is_some_and(|i| i.contains("value=\"v1\"")),
        "the held arguments are shown: {plan}"
    );
    assert_eq!(
        plan["partial_results"],
        json!([{"step": "entry", "status": "pending"}, {"step": "confirm", "status": "pending"}]),
        "nodes that have not run are pending: {plan}"
    );
    let run = run_id(&parked);
    assert_eq!(
        show(&gw, &run)["state"]["nodes"]["entry"]["status"],
        "AWAITING_APPROVAL"
    );
    let action = &plan["next_actions"][0];
    assert_eq!(action["tool"], "fedgate__approve", "{plan}");
    let plan_id = action["args"]["plan_id"].as_str().expect("plan id");

    // Approving runs the write, and the flow goes on: the answer is the flow's result.
    let done = call(&client, "fedgate__approve", json!({"plan_id": plan_id}))
        .await
        .expect("approve");
    assert_eq!(done.is_error, Some(false), "{done:?}");
    assert_eq!(
        done.structured_content,
        Some(json!({"said": "echo: published v1"}))
    );
    assert_eq!(show(&gw, &run)["state"]["finished"], "succeeded");

    // Denied: the write never runs, and the node says who denied it.
    let parked = call(&client, "flows__publish", json!({}))
        .await
        .expect("call");
    let plan = valid_plan(parked.structured_content.clone().expect("plan"));
    let plan_id = plan["next_actions"][0]["args"]["plan_id"]
        .as_str()
        .expect("plan id");
    let denied = call(
        &client,
        "fedgate__approve",
        json!({"plan_id": plan_id, "decision": "deny"}),
    )
    .await
    .expect("deny");
    assert!(first_text(&denied).contains("denied"), "{denied:?}");
    let (_, after) = admin(
        &gw,
        "GET",
        &format!("runs/{}?wait_ms=20000", run_id(&parked)),
        json!({}),
    )
    .await;
    assert_eq!(after["state"]["finished"], "failed", "{after}");
    assert!(
        after["state"]["nodes"]["entry"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("denied"),
        "{after}"
    );
}

const SLOW: &str = r#"
id = "slow"
[inputs]
type = "object"
properties = { ms = { type = "integer" } }
[[nodes]]
id = "wait"
tool = "demo__slow"
params = { ms = "{{inputs.ms}}" }
[[nodes]]
id = "after"
tool = "demo__echo"
depends_on = ["wait"]
params = { text = "waited" }
"#;

fn task_config() -> String {
    format!(
        "[auth]\n[[auth.api_keys]]\nname = \"ann\"\nsha256 = \"{}\"\nroles = [\"all\"]\n\
         [[auth.api_keys]]\nname = \"bob\"\nsha256 = \"{}\"\nroles = [\"all\"]\n\n\
         [roles.all]\ntools = [\"*\"]\n\n{}{}",
        raw::sha(ANN),
        raw::sha(BOB),
        stdio_upstream("demo", &[], ""),
        ledger_with_approval()
    )
}

const ANN: &str = "ann-key-0123456789";
const BOB: &str = "bob-key-0123456789";

#[tokio::test(flavor = "multi_thread")]
async fn a_flow_run_is_a_task_that_survives_a_restart_and_is_its_callers_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = write(
        dir.path(),
        &task_config(),
        &[("slow.toml", SLOW), ("publish.toml", PUBLISH)],
    );
    let key_file = dir.path().join("state.key");
    std::fs::write(&key_file, "flow-task-key-0123456789abcdef0123456789").expect("key");
    let key = format!("[gateway]\nstate_key = \"file:{}\"\n", key_file.display());
    let text = std::fs::read_to_string(&cfg)
        .expect("config")
        .replacen("[gateway]\n", &key, 1);
    std::fs::write(&cfg, text).expect("config");
    let mut gw = Gateway::start_file(&cfg, dir);

    let created = raw::raw_call(&gw.url, ANN, "flows__slow", json!({"ms": 0})).await;
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    let handle = task["taskId"].as_str().expect("task id").to_owned();
    assert!(handle.starts_with("fgt1."), "{handle}");

    // Another identity's request for the same handle: an unknown task.
    let theirs = raw::task_get(&gw.url, BOB, &handle).await;
    assert_eq!(raw::code(&theirs), -32602, "{theirs}");

    // The run is in the log: a restarted gateway (same state key) answers for it.
    gw.child.kill().expect("kill");
    gw.child.wait().expect("reaped");
    let gw = Gateway::start_file(
        &cfg,
        std::mem::replace(&mut gw.dir, tempfile::tempdir().unwrap()),
    );
    let done = raw::task_poll(&gw.url, ANN, &handle, |t| t["status"] == "completed").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(done["result"]["structuredContent"], json!({}), "{done}");

    // Cancel: a long run stops, its task says so.
    let created = raw::raw_call(&gw.url, ANN, "flows__slow", json!({"ms": 60000})).await;
    let handle = created["result"]["taskId"]
        .as_str()
        .expect("task id")
        .to_owned();
    let ack = raw::on_task(
        &gw.url,
        Some(ANN),
        "tasks/cancel",
        Some(&handle),
        &handle,
        true,
    )
    .await;
    assert!(ack.get("error").is_none(), "{ack}");
    let cancelled = raw::task_poll(&gw.url, ANN, &handle, |t| t["status"] != "working").await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");

    // A parked run asks for input; tasks/update with the approval runs the write.
    let created = raw::raw_call(&gw.url, ANN, "flows__publish", json!({})).await;
    let handle = created["result"]["taskId"]
        .as_str()
        .expect("task id")
        .to_owned();
    let asking = raw::task_poll(&gw.url, ANN, &handle, |t| t["status"] == "input_required").await;
    let requests = asking["inputRequests"].as_object().expect("input requests");
    let (plan_id, question) = requests.iter().next().expect("one question");
    assert_eq!(question["method"], "elicitation/create", "{asking}");
    let mut params = json!({"taskId": handle, "inputResponses": {}});
    params["inputResponses"][plan_id] = json!({"action": "accept", "content": {"approve": true}});
    let (_, ack) = raw::rpc(
        &gw.url,
        Some(ANN),
        "tasks/update",
        Some(&handle),
        params,
        true,
    )
    .await;
    assert!(ack.get("error").is_none(), "{ack}");
    let done = raw::task_poll(&gw.url, ANN, &handle, |t| t["status"] == "completed").await;
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"said": "echo: published v1"}),
        "{done}"
    );
}

#[test]
fn flows_check_judges_nodes_against_the_live_tools() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = "id = \"bad\"\n\
        [[nodes]]\nid = \"ghost\"\ntool = \"demo__ehco\"\n\
        [[nodes]]\nid = \"typed\"\ntool = \"demo__add\"\nparams = { a = \"one\", b = 2 }\n\
        [[nodes]]\nid = \"ticket\"\ntool = \"demo__file_ticket\"\nparams = { title = \"t\" }\n\
        [[nodes]]\nid = \"write\"\ntool = \"ext__write_note\"\nparams = { key = \"k\", value = \"v\" }\n";
    let good = "id = \"good\"\n[[nodes]]\nid = \"a\"\ntool = \"demo__add\"\nparams = { a = \"{{inputs.a}}\", b = 2 }\n";
    let upstreams = format!(
        "{}{}",
        stdio_upstream("demo", &[], "tier = \"high\""),
        stdio_upstream("ext", &[], "tier = \"low\"")
    );
    let cfg = write(
        dir.path(),
        &upstreams,
        &[("bad.toml", bad), ("good.toml", good)],
    );
    let out = Command::new(FEDGATE)
        .args(["flows", "-c"])
        .arg(&cfg)
        .arg("check")
        .env("FEDGATE_LOG", "error")
        .output()
        .expect("flows check");
    assert!(!out.status.success(), "problems fail the check");
    let err = String::from_utf8_lossy(&out.stderr);
    let file = dir.path().join("flows/bad.toml");
    for (line, what) in [
        (
            2,
            "node `ghost`: no tool `demo__ehco`; did you mean `demo__echo`?",
        ),
        (5, "node `typed`: parameter `a`:"),
        (9, "node `ticket`: missing required parameter `priority`"),
        (
            13,
            "node `write`: `ext__write_note` writes, and trust tier `low` refuses it (write_not_declared)",
        ),
    ] {
        let prefix = format!("{}:{line}: ", file.display());
        assert!(
            err.lines()
                .any(|l| l.starts_with(&prefix) && l.contains(what)),
            "want `{prefix}…{what}` in:\n{err}"
        );
    }
    assert!(
        !err.lines()
            .any(|l| l.contains("good.toml") && !l.starts_with("warning: ")),
        "a template may supply any value: {err}"
    );
}

const FLAKY: &str = r#"
id = "flaky"
[[nodes]]
id = "read"
tool = "demo__slow"
params = { ms = 2000 }
timeout_ms = 100
retry = { max_attempts = 3, base_ms = 10, max_ms = 20 }
[[nodes]]
id = "write"
tool = "demo__record"
params = { value = "x", ms = 2000 }
timeout_ms = 100
retry = { max_attempts = 3, base_ms = 10, max_ms = 20 }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn timeouts_are_retried_for_reads_and_never_for_writes() {
    let gw = gateway(
        &stdio_upstream("demo", &[], "tier = \"high\""),
        &[("flaky.toml", FLAKY)],
    );
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "flows__flaky", json!({}))
        .await
        .expect("call");
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let run = show(&gw, &run_id(&r));
    let nodes = &run["state"]["nodes"];
    assert_eq!(nodes["read"]["status"], "FAILED", "{run}");
    assert_eq!(
        nodes["read"]["attempts"], 3,
        "a read is retried up to max_attempts: {run}"
    );
    let retrying = run["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["event"] == "node_retrying" && e["node"] == "read")
        .count();
    assert_eq!(retrying, 2, "{run}");
    assert_eq!(
        nodes["write"]["attempts"], 1,
        "a write is never retried: {run}"
    );
    assert!(
        nodes["write"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("timed out"),
        "{run}"
    );
    // A node that hits its own timeout cancels its call: the upstream hears of every one.
    let stats = call(&client, "demo__stats", json!({}))
        .await
        .expect("stats");
    assert_eq!(
        stats.structured_content.as_ref().expect("stats")["cancelled"],
        3,
        "{stats:?}"
    );
}

const BIG: &str = r#"
id = "big"
[[nodes]]
id = "blob"
tool = "demo__huge"
params = { bytes = 5000 }
[[nodes]]
id = "size"
tool = "demo__echo"
depends_on = ["blob"]
params = { text = "{{blob.output}}" }
[outputs]
same = "{{size.output}}"
"#;

#[tokio::test(flavor = "multi_thread")]
async fn large_outputs_are_artifacts_by_reference_and_still_feed_templates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = write_with(
        dir.path(),
        "artifact_bytes = 1000\n",
        &stdio_upstream("demo", &[], ""),
        &[("big.toml", BIG)],
    );
    let gw = Gateway::start_file(&cfg, dir);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "flows__big", json!({})).await.expect("call");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let same = r
        .structured_content
        .as_ref()
        .and_then(|v| v["same"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        same.len(),
        "echo: ".len() + 5000,
        "the artifact's value reached the next node"
    );
    let run = show(&gw, &run_id(&r));
    let blob = &run["state"]["nodes"]["blob"]["output"]["artifact"];
    assert!(
        blob["id"].as_str().is_some() && blob["bytes"].as_u64() > Some(5000),
        "{blob}"
    );
    let stored = run["events"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["event"] == "node_succeeded" && e["node"] == "blob")
        .map(|e| e.to_string())
        .expect("blob's event");
    assert!(
        stored.len() < 500 && stored.contains("artifact"),
        "the event holds a reference, not the output: {stored}"
    );
    let metrics = gw.metrics().await;
    let counted: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("fedgate_flow_artifact_bytes_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the artifact counter");
    assert!(
        counted > 10_000,
        "both outputs (5,000 bytes and more each) are counted: {counted}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_flow_file_is_a_new_tool_after_a_reload() {
    let gw = gateway(&stdio_upstream("demo", &[], ""), &[("branch.toml", BRANCH)]);
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    let names = |tools: Vec<rmcp::model::Tool>| {
        tools
            .into_iter()
            .map(|t| t.name.to_string())
            .collect::<Vec<_>>()
    };
    let before = names(client.peer().list_all_tools().await.expect("list"));
    assert!(
        before.contains(&"flows__branch".to_owned())
            && !before.contains(&"flows__types".to_owned())
    );
    let changes = *seen.tool_changes.lock();
    std::fs::write(gw.dir.path().join("flows/types.toml"), TYPES).expect("new flow");
    let (status, v) = admin(&gw, "POST", "../reload", json!({})).await;
    assert_eq!(status, 200, "{v}");
    wait_for(&seen.tools_changed, "tools/list_changed", || {
        *seen.tool_changes.lock() > changes
    })
    .await;
    let after = names(client.peer().list_all_tools().await.expect("list"));
    assert!(after.contains(&"flows__types".to_owned()), "{after:?}");
    let r = call(&client, "flows__types", json!({"n": 1}))
        .await
        .expect("call");
    assert_eq!(run_id(&r).len(), "run-".len() + 24);
}

const HOLD: &str = r#"
id = "hold"
[[nodes]]
id = "arrive"
tool = "demo__meet"
params = { group = "hold", n = 2, timeout_ms = 20000 }
[[nodes]]
id = "wait"
tool = "demo__slow"
depends_on = ["arrive"]
params = { ms = 60000 }
[[nodes]]
id = "never"
tool = "demo__echo"
depends_on = ["wait"]
params = { text = "x" }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn progress_per_node_and_a_cancelled_call_cancels_its_run() {
    use rmcp::{model::*, service::PeerRequestOptions};
    let gw = gateway(
        &stdio_upstream("demo", &[], ""),
        &[("fan.toml", FAN), ("hold.toml", HOLD)],
    );
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    let r = call(&client, "flows__fan", json!({})).await.expect("call");
    assert_eq!(r.is_error, Some(false));
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while seen.progress.lock().len() < 5 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("a progress notification per node");
    let messages: Vec<String> = seen
        .progress
        .lock()
        .iter()
        .filter_map(|p| p.message.clone())
        .collect();
    assert!(
        messages.contains(&"node `join` succeeded".to_owned()),
        "{messages:?}"
    );
    assert!(seen.progress.lock().iter().all(|p| p.total == Some(5.0)));

    let req = ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(
        "flows__hold",
    )));
    let handle = client
        .peer()
        .send_request_with_option(req, PeerRequestOptions::no_options())
        .await
        .expect("send");
    // The run's first node is inside the upstream once this returns.
    let met = call(&client, "demo__meet", json!({"group": "hold", "n": 2}))
        .await
        .expect("meet");
    assert_eq!(met.is_error, Some(false));
    handle.cancel(Some("test".into())).await.expect("cancel");
    let (_, runs) = admin(&gw, "GET", "runs", json!({})).await;
    let run = runs
        .as_array()
        .and_then(|r| r.iter().find(|r| r["flow"] == "hold"))
        .expect("the run")["run_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (_, after) = admin(&gw, "GET", &format!("runs/{run}?wait_ms=20000"), json!({})).await;
    assert_eq!(after["state"]["finished"], "cancelled", "{after}");
    assert_eq!(
        after["state"]["nodes"]["never"]["status"], "CANCELLED",
        "{after}"
    );
}

/// `fedgate serve` on the flows config in `dir`: it must refuse to start; what it said.
fn refused_start(dir: &Path) -> String {
    let out = Command::new(FEDGATE)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(dir.join("gateway.toml"))
        .output()
        .expect("fedgate serve");
    assert!(!out.status.success(), "it started on a broken run log");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_run_log_that_is_corrupt_read_only_or_locked_is_refused_by_name_and_left_as_it_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        &stdio_upstream("demo", &[], ""),
        &[("held.toml", HELD)],
    );
    let db = dir.path().join("runs.db");

    // Corrupt: not a database.
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7919 % 251) as u8).collect();
    std::fs::write(&db, &garbage).expect("garbage");
    let said = refused_start(dir.path());
    assert!(
        said.contains("runs.db") && said.contains("not a database"),
        "{said}"
    );
    assert_eq!(std::fs::read(&db).expect("db"), garbage, "nothing written");

    // A valid SQLite file, made read-only (fedgate refuses it even as root).
    std::fs::remove_file(&db).expect("rm");
    let made = Command::new("python3")
        .args(["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('create table other(x)'); c.commit()"])
        .arg(&db)
        .status()
        .expect("python3");
    assert!(made.success());
    let before = std::fs::read(&db).expect("db");
    let mut perms = std::fs::metadata(&db).expect("meta").permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&db, perms.clone()).expect("chmod");
    let said = refused_start(dir.path());
    assert!(said.contains("runs.db is read-only"), "{said}");
    assert_eq!(std::fs::read(&db).expect("db"), before, "nothing written");
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&db, perms).expect("chmod");

    // Locked by another program's exclusive transaction: refused once SQLite's busy wait
    // ends, by name.
    let mut holder = std::process::Command::new("python3")
        .args(["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1], isolation_level=None); c.execute('begin exclusive'); print('locked', flush=True); sys.stdin.read()"])
        .arg(&db)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("ready line");
    assert_eq!(line.trim(), "locked");
    let said = refused_start(dir.path());
    drop(holder.stdin.take());
    holder.wait().expect("holder ends");
    assert!(
        said.contains("runs.db") && said.contains("locked"),
        "{said}"
    );
    assert_eq!(std::fs::read(&db).expect("db"), before, "nothing written");
}
