//! Federation (F13) with three real fedgate processes on loopback and certificates made by
//! `examples/federation/certs.sh`: A imports B's exported flows over mTLS, and B's flow calls a
//! tool B imports from C. The configs are the example's, with the test's ports.

use crate::common;

use std::{path::Path, process::Command};

use common::{agent::run_agent, *};
use serde_json::{Value, json};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/federation");
const ADMIN_TOKEN: &str = "admin-b-token-0123456789";

struct Federation {
    /// Certificates, configs, audit logs and B's run log.
    dir: tempfile::TempDir,
    c: Gateway,
    b: Gateway,
    a: Gateway,
    c_listen: String,
    b_listen: String,
}

fn read(name: &str) -> String {
    std::fs::read_to_string(Path::new(EXAMPLE).join(name)).expect("example file")
}

/// The example's three gateways; `b_extra` is appended to B's config.
fn start(b_extra: &str) -> Federation {
    start_with(b_extra, "", &[])
}

/// Like `start`; `a_extra` is appended to A's config, and `a_flows` (file name, content) go to
/// A's folder `flows-a`.
fn start_with(b_extra: &str, a_extra: &str, a_flows: &[(&str, &str)]) -> Federation {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let out = Command::new(Path::new(EXAMPLE).join("certs.sh"))
        .arg(d)
        .output()
        .expect("certs.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::create_dir_all(d.join("flows-b")).expect("flows dir");
    for f in ["report.toml", "wait.toml", "internal.toml", "publish.toml"] {
        std::fs::write(d.join("flows-b").join(f), read(&format!("flows-b/{f}"))).expect("flow");
    }
    std::fs::write(
        d.join("state-b.key"),
        "state-key-of-b-0123456789abcdef0123456789",
    )
    .expect("key");
    std::fs::write(d.join("admin-b.token"), ADMIN_TOKEN).expect("token");
    let (c_port, b_port) = (free_port(), free_port());
    let (c_listen, b_listen) = (format!("127.0.0.1:{c_port}"), format!("127.0.0.1:{b_port}"));
    let admin_port = free_port();
    std::fs::write(d.join("c.toml"), read("c.toml")).expect("c");
    std::fs::write(
        d.join("b.toml"),
        read("b.toml")
            .replace("127.0.0.1:8963", &c_listen)
            .replace("127.0.0.1:8962", &b_listen)
            .replace("127.0.0.1:8972", &format!("127.0.0.1:{admin_port}"))
            // `file:` references are read from the working directory, which run.sh sets.
            .replace("file:", &format!("file:{}/", d.display()))
            + b_extra,
    )
    .expect("b");
    std::fs::create_dir_all(d.join("flows-a")).expect("flows dir");
    for (name, flow) in a_flows {
        std::fs::write(d.join("flows-a").join(name), flow).expect("flow");
    }
    std::fs::write(
        d.join("a.toml"),
        read("a.toml")
            .replace("127.0.0.1:8962", &b_listen)
            .replace("file:", &format!("file:{}/", d.display()))
            + &a_extra.replace("DIR", &d.display().to_string()),
    )
    .expect("a");
    let keep = || tempfile::tempdir().expect("tempdir");
    let c = Gateway::start_file_at(&d.join("c.toml"), keep(), &c_listen);
    let b = Gateway::start_file_at(&d.join("b.toml"), keep(), &b_listen);
    let a = Gateway::start_file(&d.join("a.toml"), keep());
    Federation {
        dir,
        c,
        b,
        a,
        c_listen,
        b_listen,
    }
}

impl Federation {
    fn audit(&self, gw: &str) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join(format!("audit-{gw}.jsonl")))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The audit records of `gw` once one matches `wanted`: each gateway writes its audit log
    /// from a writer task, after the answer went out, so a record may trail the result a
    /// little. Bounded; the records as they are when it gives up.
    async fn audit_once(&self, gw: &str, wanted: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let records = self.audit(gw);
            if records.iter().any(&wanted) || tokio::time::Instant::now() >= deadline {
                return records;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// How many audit records of `gw` match `what`, once at least `n` do (or after 10 s): a
    /// record is written after its answer went out, so it may trail the result a little.
    async fn audit_count(&self, gw: &str, n: usize, what: impl Fn(&Value) -> bool) -> usize {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let count = self.audit(gw).iter().filter(|r| what(r)).count();
            if count >= n || tokio::time::Instant::now() >= deadline {
                return count;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    async fn admin_b(&self, method: &str, path: &str) -> (u16, Value) {
        let url = format!(
            "{}/admin/{path}",
            self.b.admin.as_deref().expect("B's admin")
        );
        let r = reqwest::Client::new()
            .request(method.parse().expect("method"), url)
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .expect("admin");
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// A stateless-era `tools/list` to B with curl, presenting `cert` (a file stem in `dir`).
    fn list_at_b(&self, cert: &str) -> (bool, String) {
        self.post_at_b(cert, "tools/list", json!({}))
    }

    /// A stateless-era request to B with curl, presenting `cert`; `params` may hold `_meta`.
    fn post_at_b(&self, cert: &str, method: &str, mut params: Value) -> (bool, String) {
        let meta = params
            .as_object_mut()
            .expect("params object")
            .entry("_meta")
            .or_insert_with(|| json!({}));
        meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "curl", "version": "0"});
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
        let name = params["name"].as_str().map(|n| format!("mcp-name: {n}"));
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let out = Command::new("curl")
            .current_dir(self.dir.path())
            .args([
                "-sS",
                "--cacert",
                "federation-ca.pem",
                "--cert",
                &format!("{cert}.pem"),
            ])
            .args(["--key", &format!("{cert}.key"), "-X", "POST"])
            .arg(format!("https://{}/mcp", self.b_listen))
            .args([
                "-H",
                "content-type: application/json",
                "-H",
                "accept: application/json, text/event-stream",
            ])
            .args(["-H", "mcp-protocol-version: 2026-07-28", "-H"])
            .arg(format!("mcp-method: {method}"))
            .args(name.iter().flat_map(|n| ["-H", n.as_str()]))
            .args(["--data", &body.to_string()])
            .output()
            .expect("curl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

fn names(tools: &[rmcp::model::Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_of_a_runs_bs_flow_through_c_under_one_correlation_id() {
    let f = start("[[auth.client_certs]]\nsubject = \"gateway-b\"\nroles = []\npeer = true\n");
    let client = connect_legacy(&f.a.url, TestClient::new()).await;
    let tools = client.peer().list_all_tools().await.expect("A's tools");
    let listed = names(&tools);
    // A peer's names, nested two hops deep, are portable like any other.
    assert_portable(listed.iter().map(String::as_str));
    for name in [
        "b__flows__report",
        "b__flows__wait",
        "b__c__demo__echo",
        "b__demo__add",
    ] {
        assert!(listed.contains(&name.to_owned()), "{name} in {listed:?}");
    }
    // What B does not export does not exist for A: not listed, not callable by exact name.
    for hidden in ["b__flows__internal", "b__demo__echo", "b__fedgate__approve"] {
        assert!(
            !listed.contains(&hidden.to_owned()),
            "{hidden} in {listed:?}"
        );
    }
    let refused = call(&client, "b__flows__internal", json!({})).await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("unknown tool `b__flows__internal`")),
        "{refused:?}"
    );
    let report = tools
        .iter()
        .find(|t| t.name == "b__flows__report")
        .expect("report");
    assert_eq!(
        report
            .meta
            .as_ref()
            .and_then(|m| m.0.get("io.fedgate/imported_from")),
        Some(&json!("b")),
        "imported tools say where they came from"
    );
    assert!(
        report.input_schema.get("required").is_some(),
        "the flow keeps its input schema"
    );

    let r = call(&client, "b__flows__report", json!({"a": 2, "b": 3}))
        .await
        .expect("call");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(
        r.structured_content,
        Some(json!({"sum": 5.0, "echoed": "echo: sum 5.0"}))
    );

    // One call across three gateways: one correlation id in every audit log.
    let at_a = f
        .audit_once("a", |r| r["name"] == "b__flows__report")
        .await
        .into_iter()
        .find(|r| r["name"] == "b__flows__report")
        .expect("A's record");
    let id = at_a["correlation_id"].as_str().expect("id").to_owned();
    let at_b: Vec<Value> = f
        .audit_once("b", |r| {
            r["correlation_id"] == id.as_str() && r["name"] == "flows__report"
        })
        .await
        .into_iter()
        .filter(|r| r["correlation_id"] == id.as_str())
        .collect();
    let flow = at_b
        .iter()
        .find(|r| r["name"] == "flows__report")
        .expect("B's flow record");
    assert_eq!(flow["identity"], "gateway-a", "{flow}");
    assert_eq!(flow["on_behalf_of"], "anonymous:anonymous", "{flow}");
    assert!(
        at_b.iter().any(|r| r["name"] == "c__demo__echo"),
        "B's node call: {at_b:?}"
    );
    let at_c = f
        .audit_once("c", |r| r["correlation_id"] == id.as_str())
        .await
        .into_iter()
        .find(|r| r["correlation_id"] == id.as_str())
        .expect("C's record");
    assert_eq!(at_c["name"], "demo__echo");
    assert_eq!(at_c["identity"], "gateway-b");

    // A known peer without an export grant sees nothing; a stranger's CA is refused.
    let (ok, listed) = f.list_at_b("gateway-b");
    assert!(ok && listed.contains("\"tools\":[]"), "{listed}");
    let (ok, refused) = f.list_at_b("stranger");
    assert!(
        !ok,
        "a certificate from an unknown CA gets no TLS session: {refused}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_loop_and_a_chain_longer_than_the_limit_are_refused_with_the_path() {
    // B imports itself (its own certificate may list its demo tools): A -> B -> B is a loop.
    let mut f = start(
        "[[auth.client_certs]]\nsubject = \"gateway-b\"\nroles = [\"itself\"]\npeer = true\n\
         [roles.itself]\ntools = [\"demo/*\"]\n",
    );
    let me = format!(
        "\n[upstreams.self]\nkind = \"peer\"\nurl = \"https://{}/mcp\"\ntier = \"high\"\n\
         tls = {{ ca = \"federation-ca.pem\", cert = \"gateway-b.pem\", key = \"gateway-b.key\" }}\n",
        f.b_listen
    );
    let cfg = f.dir.path().join("b.toml");
    let text = std::fs::read_to_string(&cfg)
        .expect("b.toml")
        .replace("tools = [\"flows/*\",", "tools = [\"self/*\", \"flows/*\",")
        + &me;
    std::fs::write(&cfg, text).expect("b.toml");
    let (status, v) = f.admin_b("POST", "reload").await;
    assert_eq!(status, 200, "{v}");
    let client = connect_legacy(&f.a.url, TestClient::new()).await;
    // B's list grows once it has connected to itself, then A's does: ask until A routes it.
    let r = until_answered(
        &client,
        "b__self__demo__add",
        json!({"a": 1, "b": 1}),
        |t| t.contains("passed this gateway"),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let text = first_text(&r);
    assert!(
        text.contains(
            "the request already passed this gateway (`gw-b`): path gw-a -> gw-b -> gw-b"
        ),
        "{text}"
    );
    let plan = r
        .meta
        .as_ref()
        .and_then(|m| m.0.get("io.fedgate/orchestrated_plan"))
        .cloned();
    assert_eq!(valid_plan(plan.expect("a plan"))["status"], "blocked");

    // C allows two gateways on a path: A -> B -> C is one too many.
    f.c.child.kill().expect("kill C");
    f.c.child.wait().expect("reaped");
    let c_cfg = f.dir.path().join("c.toml");
    let text = std::fs::read_to_string(&c_cfg)
        .expect("c.toml")
        .replace("id = \"gw-c\"", "id = \"gw-c\"\nmax_hops = 2");
    std::fs::write(&c_cfg, text).expect("c.toml");
    f.c = Gateway::start_file_at(&c_cfg, tempfile::tempdir().expect("tempdir"), &f.c_listen);
    let r = until_answered(&client, "b__flows__report", json!({"a": 1, "b": 1}), |t| {
        t.contains("at most 2 gateways")
    })
    .await;
    assert!(
        serde_json::to_string(&r).unwrap_or_default().contains(
            "a request may pass at most 2 gateways (the limit of `gw-c`): path gw-a -> gw-b -> gw-c"
        ),
        "{}",
        first_text(&r)
    );

    // Only a peer's path counts: a client of A claiming a path through A itself is no loop
    // (A starts the path afresh).
    let mut params = rmcp::model::CallToolRequestParams::new("b__demo__add")
        .with_arguments(json!({"a": 1, "b": 2}).as_object().cloned().expect("args"));
    params.meta = Some(
        serde_json::from_value(json!({"io.fedgate/path": ["gw-a", "gw-b", "gw-x"]})).expect("meta"),
    );
    let r = client.peer().call_tool(params).await.expect("answered");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(r.structured_content, Some(json!({"sum": 3.0})), "{r:?}");
}

/// Calls `tool` until its answer's text satisfies `done` (an upstream coming back), at most
/// about twenty seconds.
async fn until_answered(
    client: &Client,
    tool: &str,
    args: Value,
    done: impl Fn(&str) -> bool,
) -> rmcp::model::CallToolResult {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        // A name not routed yet is a JSON-RPC error: ask again.
        if let Ok(r) = call(client, tool, args.clone()).await
            && (done(&serde_json::to_string(&r).unwrap_or_default())
                || tokio::time::Instant::now() > deadline)
        {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "`{tool}` never answered as expected"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn c_down_is_a_partial_result_and_c_back_recovers_without_restarting_a_or_b() {
    let mut f = start("");
    let client = connect_legacy(&f.a.url, TestClient::new()).await;
    let ok = call(&client, "b__flows__report", json!({"a": 1, "b": 2}))
        .await
        .expect("call");
    assert_eq!(ok.is_error, Some(false), "{ok:?}");
    f.c.child.kill().expect("kill C");
    f.c.child.wait().expect("reaped");
    let r = until_answered(&client, "b__flows__report", json!({"a": 1, "b": 2}), |t| {
        t.contains("partial")
    })
    .await;
    let plan = valid_plan(r.structured_content.clone().expect("plan"));
    assert_eq!(plan["status"], "partial", "{plan}");
    let steps = plan["partial_results"].as_array().expect("steps");
    assert_eq!(
        steps
            .iter()
            .find(|s| s["step"] == "sum")
            .map(|s| &s["status"]),
        Some(&json!("ok"))
    );
    assert_eq!(
        steps
            .iter()
            .find(|s| s["step"] == "echo")
            .map(|s| &s["status"]),
        Some(&json!("error"))
    );
    let (a_pid, b_pid) = (f.a.pid(), f.b.pid());
    f.c = Gateway::start_file_at(
        &f.dir.path().join("c.toml"),
        tempfile::tempdir().expect("tempdir"),
        &f.c_listen,
    );
    let r = until_answered(&client, "b__flows__report", json!({"a": 1, "b": 2}), |t| {
        t.contains("\"isError\":false")
    })
    .await;
    assert_eq!(
        r.structured_content,
        Some(json!({"sum": 3.0, "echoed": "echo: sum 3.0"})),
        "{r:?}"
    );
    assert!(alive(a_pid) && alive(b_pid), "A and B kept running");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flow_exported_by_a_reload_of_b_appears_on_a_and_an_overlong_name_gets_a_portable_form() {
    let f = start("");
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&f.a.url, client).await;
    let before = *seen.tool_changes.lock();
    let long_id = "x".repeat(64);
    std::fs::write(
        f.dir.path().join("flows-b/more.toml"),
        "id = \"more\"\nexport = true\n[[nodes]]\nid = \"a\"\ntool = \"demo__add\"\nparams = { a = 1, b = 1 }\n",
    )
    .expect("flow");
    std::fs::write(
        f.dir.path().join("flows-b/long.toml"),
        format!("id = \"{long_id}\"\nexport = true\n[[nodes]]\nid = \"a\"\ntool = \"demo__add\"\nparams = {{ a = 1, b = 1 }}\n"),
    )
    .expect("flow");
    let (status, v) = f.admin_b("POST", "reload").await;
    assert_eq!(status, 200, "{v}");
    wait_for(&seen.tools_changed, "A's list changes", || {
        *seen.tool_changes.lock() > before
    })
    .await;
    let listed = names(&client.peer().list_all_tools().await.expect("list"));
    assert!(listed.contains(&"b__flows__more".to_owned()), "{listed:?}");
    let r = call(&client, "b__flows__more", json!({}))
        .await
        .expect("call");
    assert_eq!(r.is_error, Some(false), "{r:?}");

    // Under a longer peer name the long flow's name passes 64 characters: it gets a portable
    // form (cut, with a hash of the whole name), listed with its original, and answers by it.
    let a_cfg = f.dir.path().join("a.toml");
    let peer = "team_b_gateway_with_a_name_long_enough_to_break_the_limit_xx";
    let text = std::fs::read_to_string(&a_cfg)
        .expect("a.toml")
        .replace("[upstreams.b]", &format!("[upstreams.{peer}]"));
    std::fs::write(&a_cfg, text).expect("a.toml");
    let a2 = Gateway::start_file(&a_cfg, tempfile::tempdir().expect("tempdir"));
    let (_, ready) = a2.readyz().await;
    let original = format!("{peer}__flows__{}", &long_id[..40]);
    let form = ready["portable_forms"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| {
            f["original"]
                .as_str()
                .is_some_and(|o| o.starts_with(&original))
        })
        .unwrap_or_else(|| panic!("no portable form of {original}: {ready}"));
    let short = form["name"].as_str().unwrap_or_default().to_owned();
    assert!(
        short.len() <= 64
            && short
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
        "{short}"
    );
    let client2 = connect_legacy(&a2.url, TestClient::new()).await;
    assert!(names(&client2.peer().list_all_tools().await.expect("list")).contains(&short));
    let r = call(&client2, &short, json!({})).await.expect("call");
    assert_eq!(r.is_error, Some(false), "{r:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_federated_flow_called_as_a_task_survives_a_restart_of_b() {
    let mut f = start("");
    let created = raw::raw_call(&f.a.url, "unused", "b__flows__wait", json!({"ms": 1500})).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let handle = created["result"]["taskId"]
        .as_str()
        .expect("task id")
        .to_owned();
    // B restarts with the run in the middle of its wait (same port, state key and run log).
    f.b.child.kill().expect("kill B");
    f.b.child.wait().expect("reaped");
    f.b = Gateway::start_file_at(
        &f.dir.path().join("b.toml"),
        tempfile::tempdir().expect("tempdir"),
        &f.b_listen,
    );
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let done = loop {
        let v = raw::task_get(&f.a.url, "unused", &handle).await;
        let status = v["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if status == "completed" || tokio::time::Instant::now() > deadline {
            break v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["result"]["structuredContent"],
        json!({"done": "slept 1500"}),
        "{done}"
    );
}

/// B is killed under A and started again: A's `/readyz`, `fedgate_upstream_up`,
/// `/admin/upstreams` and the console (in a real Chromium) say B is down while it is, its tools
/// leave A's list and calls are refused at once by name; once B is back, all four say so again
/// and calls go through, with no restart of A.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_peer_is_down_everywhere_on_a_and_comes_back_by_itself() {
    let mut f = start_with(
        "",
        "\n[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"file:DIR/admin-b.token\"\n",
        &[],
    );
    let admin = f.a.admin.clone().expect("A's admin");
    let client = connect_legacy(&f.a.url, TestClient::new()).await;
    let sum = call(&client, "b__demo__add", json!({"a": 2, "b": 2}))
        .await
        .expect("through B");
    assert_eq!(sum.structured_content, Some(json!({"sum": 4.0})), "{sum:?}");
    let browser = common::browser::Browser::start().await;
    browser.goto(&format!("{admin}/console")).await;
    browser.type_into("#token", ADMIN_TOKEN).await;
    browser.click("#login-submit").await;
    let row = |state: &str| {
        format!(
            "document.querySelector('#upstream-rows tr[data-upstream=b][data-state={state}]') !== null"
        )
    };
    browser.until("B ready in the console", &row("ready")).await;

    // Where A says what B is: readyz, the admin API, the metric.
    let said = |a: &Gateway| {
        let (base, admin) = (a.base.clone(), admin.clone());
        async move {
            let ready: Value = reqwest::get(format!("{base}/readyz"))
                .await
                .expect("readyz")
                .json()
                .await
                .expect("json");
            let ups: Value = reqwest::Client::new()
                .get(format!("{admin}/admin/upstreams"))
                .bearer_auth(ADMIN_TOKEN)
                .send()
                .await
                .expect("admin")
                .json()
                .await
                .expect("json");
            let metrics = reqwest::get(format!("{base}/metrics"))
                .await
                .expect("metrics")
                .text()
                .await
                .expect("text");
            let up = metrics
                .lines()
                .find(|l| l.starts_with(r#"fedgate_upstream_up{upstream="b"}"#))
                .map(|l| l.ends_with(" 1"));
            (ready["upstreams"]["b"].clone(), ups["b"].clone(), up)
        }
    };
    let (ready, listed, up) = said(&f.a).await;
    assert_eq!(
        (ready["phase"].clone(), listed["phase"].clone(), up),
        (json!("ready"), json!("ready"), Some(true))
    );

    f.b.child.kill().expect("kill B");
    f.b.child.wait().expect("reaped");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let (ready, listed, up) = loop {
        let (ready, listed, up) = said(&f.a).await;
        if ready["phase"] != "ready" && listed["phase"] != "ready" && up == Some(false) {
            break (ready, listed, up);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "A still says B is up 30 s after B died: {ready} {listed} {up:?}\n{}",
            f.a.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let why = ready["last_error"].as_str().unwrap_or_default();
    assert!(
        !why.is_empty() && !why.contains("::"),
        "a reason in plain words: {ready}"
    );
    assert_eq!(listed["last_error"], ready["last_error"], "{listed}");
    assert_eq!(up, Some(false));
    browser
        .until(
            "B down in the console",
            "document.querySelector('#upstream-rows tr[data-upstream=b]:not([data-state=ready])') !== null",
        )
        .await;
    let refused = call(&client, "b__demo__add", json!({"a": 1, "b": 1}))
        .await
        .refused();
    assert!(refused.contains("upstream `b` is unavailable"), "{refused}");
    let tools = client.peer().list_all_tools().await.expect("list");
    assert!(
        !tools.iter().any(|t| t.name.starts_with("b__")),
        "B's tools left A's list"
    );

    // B again, on its address: A reconnects by itself.
    f.b = Gateway::start_file_at(
        &f.dir.path().join("b.toml"),
        tempfile::tempdir().expect("tempdir"),
        &f.b_listen,
    );
    let sum = until_answered(&client, "b__demo__add", json!({"a": 3, "b": 4}), |t| {
        t.contains("\"sum\"")
    })
    .await;
    assert_eq!(sum.structured_content, Some(json!({"sum": 7.0})), "{sum:?}");
    let (ready, listed, up) = said(&f.a).await;
    assert_eq!(
        (ready["phase"].clone(), listed["phase"].clone(), up),
        (json!("ready"), json!("ready"), Some(true))
    );
    browser
        .until("B ready again in the console", &row("ready"))
        .await;
    client.cancel().await.expect("close");
}

/// `examples/federation/run.sh` as a reader runs it: certificates, three gateways on the
/// example's ports, and team B's flow called through A.
#[tokio::test(flavor = "multi_thread")]
async fn the_example_script_starts_a_federation_that_answers() {
    use std::{io::BufRead, os::unix::process::CommandExt};
    let mut script = Command::new("bash")
        .arg(Path::new(EXAMPLE).join("run.sh"))
        .env("FEDGATE", FEDGATE)
        .env("FEDGATE_LOG", "warn")
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run.sh");
    let stdout = script.stdout.take().expect("stdout");
    let line = std::io::BufReader::new(stdout)
        .lines()
        .next()
        .and_then(Result::ok)
        .unwrap_or_default();
    // The script and the three gateways it started share its process group.
    let group = nix::unistd::Pid::from_raw(script.id() as i32);
    let stop = || {
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
    };
    if !line.starts_with("federation in ") {
        stop();
        panic!("run.sh did not start the federation: {line}");
    }
    let client = connect_legacy("http://127.0.0.1:8961/mcp", TestClient::new()).await;
    let r = call(&client, "b__flows__report", json!({"a": 20, "b": 22})).await;
    stop();
    let _ = script.wait();
    let r = r.expect("call");
    assert_eq!(
        r.structured_content,
        Some(json!({"sum": 42.0, "echoed": "echo: sum 42.0"})),
        "{r:?}"
    );
}

/// The approve action of a held answer: its plan id (and that it asks to confirm).
fn approve_action(r: &rmcp::model::CallToolResult) -> (String, Value) {
    let plan = &r.meta.as_ref().expect("_meta").0[PLAN_KEY];
    let action = plan["next_actions"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["tool"] == "fedgate__approve"))
        .unwrap_or_else(|| panic!("an approve action: {plan}"));
    (
        action["args"]["plan_id"]
            .as_str()
            .expect("plan id")
            .to_owned(),
        plan.clone(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_held_on_b_is_decided_from_a_through_as_approve_tool() {
    let f = start("");
    let client = connect_legacy(&f.a.url, TestClient::new()).await;
    // Writes B ran, once at least `n` are in its audit log.
    let ran_at_b = async |f: &Federation, n: usize| {
        f.audit_count("b", n, |r| {
            r["decision"] == "plan_executed" && r["outcome"] == "ok"
        })
        .await
    };

    // A direct write held on B: A's caller gets a plan it can approve on A.
    let held = call(&client, "b__demo__record", json!({"value": "direct"}))
        .await
        .expect("held");
    assert_eq!(held.is_error, Some(false), "{held:?}");
    let (id, plan) = approve_action(&held);
    assert!(id.starts_with("b/plan_"), "a relayed id: {id}");
    assert_eq!(plan["status"], "ok", "{plan}");
    assert_eq!(plan["next_actions"][0]["confirm"], true, "{plan}");
    assert!(plan["safety"].is_object(), "{plan}");
    let remote = id.trim_start_matches("b/").to_owned();

    // B binds the plan to the caller A served: A (or anyone holding A's certificate) claiming
    // another caller cannot decide it.
    let (ok, refused) = f.post_at_b(
        "gateway-a",
        "tools/call",
        json!({"name": "fedgate__approve", "arguments": {"plan_id": remote},
               "_meta": {"io.fedgate/caller": "key:mallory"}}),
    );
    assert!(ok && refused.contains("plan_unknown"), "{refused}");
    assert_eq!(ran_at_b(&f, 0).await, 0);

    let done = call(&client, "fedgate__approve", json!({"plan_id": id}))
        .await
        .expect("approved");
    assert_eq!(done.is_error, Some(false), "{done:?}");
    assert_eq!(
        done.structured_content,
        Some(json!({"recorded": "direct"})),
        "{done:?}"
    );
    assert_eq!(ran_at_b(&f, 1).await, 1);
    // Once: a repeat is refused by B, and says so through A.
    let again = call(&client, "fedgate__approve", json!({"plan_id": id}))
        .await
        .expect("answer");
    assert_eq!(again.is_error, Some(true), "{again:?}");
    assert_eq!(
        again.meta.as_ref().expect("_meta").0[PLAN_KEY]["errors"][0]["code"],
        "plan_used",
        "{again:?}"
    );
    assert_eq!(ran_at_b(&f, 1).await, 1);

    // B's flow parked on the write: the same `ok` plan, approved from A; the flow goes on.
    let parked = call(&client, "b__flows__publish", json!({"value": "v7"}))
        .await
        .expect("parked");
    let (id, plan) = approve_action(&parked);
    assert!(id.starts_with("b/plan_"), "{id}");
    assert_eq!(plan["status"], "ok", "{plan}");
    assert_eq!(plan["next_actions"][0]["confirm"], true, "{plan}");
    assert!(
        plan["instruction"]
            .as_str()
            .is_some_and(|t| t.contains(&id)),
        "the instruction names the id A's caller uses: {plan}"
    );
    let finished = call(&client, "fedgate__approve", json!({"plan_id": id}))
        .await
        .expect("flow result");
    assert_eq!(
        finished.structured_content,
        Some(json!({"said": "echo: published v7"})),
        "{finished:?}"
    );
    assert_eq!(ran_at_b(&f, 2).await, 2);

    // Denied from A: B's run does not write.
    let parked = call(&client, "b__flows__publish", json!({"value": "no"}))
        .await
        .expect("parked");
    let (id, _) = approve_action(&parked);
    let denied = call(
        &client,
        "fedgate__approve",
        json!({"plan_id": id, "decision": "deny"}),
    )
    .await
    .expect("denied");
    assert!(
        format!("{denied:?}").contains("denied"),
        "the denial comes back: {denied:?}"
    );
    assert_eq!(ran_at_b(&f, 2).await, 2);
    // An agent that follows the rule text and nothing else gets B's flow done from A.
    let scenario = json!({"tool": "b__flows__publish", "args": {"value": "agent"},
                          "human": {"confirm": true}});
    let r = run_agent(f.dir.path(), &f.a.url, None, &scenario, async |w| {
        panic!("nobody else decides here, yet the agent waits for {w}")
    })
    .await;
    assert_eq!(
        r["final"]["result"]["structured"],
        json!({"said": "echo: published agent"}),
        "{r}"
    );
    assert_eq!(ran_at_b(&f, 3).await, 3, "{r}");

    // An id naming an upstream that is no peer is no plan here.
    let unknown = call(
        &client,
        "fedgate__approve",
        json!({"plan_id": format!("nope/{remote}")}),
    )
    .await
    .expect("answer");
    assert_eq!(
        unknown.meta.as_ref().expect("_meta").0[PLAN_KEY]["errors"][0]["code"],
        "plan_unknown",
        "{unknown:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flow_on_a_parked_on_bs_plan_goes_on_once_as_caller_approves_it() {
    let flow = "id = \"relay\"\n\
        [[nodes]]\nid = \"write\"\ntool = \"b/demo__record\"\nparams = { value = \"via a\" }\n\
        [outputs]\nwrote = \"{{write.output.recorded}}\"\n";
    let f = start_with(
        "",
        "\n[flows]\ndir = \"DIR/flows-a\"\ndb = \"DIR/runs-a.db\"\n",
        &[("relay.toml", flow)],
    );
    let client = connect_legacy(&f.a.url, TestClient::new()).await;
    let parked = call(&client, "flows__relay", json!({}))
        .await
        .expect("parked");
    let (id, plan) = approve_action(&parked);
    assert!(
        id.starts_with("b/plan_"),
        "A's run waits on B's plan: {plan}"
    );
    assert_eq!(plan["status"], "ok", "{plan}");
    assert_eq!(plan["next_actions"][0]["confirm"], true, "{plan}");
    let done = call(&client, "fedgate__approve", json!({"plan_id": id}))
        .await
        .expect("flow result");
    assert_eq!(
        done.structured_content,
        Some(json!({"wrote": "via a"})),
        "the run on A went on with B's answer: {done:?}"
    );
    let executed = |r: &Value| r["decision"] == "plan_executed" && r["outcome"] == "ok";
    let ran = f
        .audit_once("b", executed)
        .await
        .iter()
        .filter(|r| executed(r))
        .count();
    assert_eq!(ran, 1);
}

/// A's guardrail hooks see calls to the peer's tools like any other: asked before and after,
/// told the peer as the upstream; a hook that cannot answer refuses the peer's tool too.
#[tokio::test(flavor = "multi_thread")]
async fn calls_to_a_peer_go_through_as_guardrail_hooks() {
    let guardrail = UrlProcess::testkit(&["demo-guardrail"]);
    let f = start_with(
        "[[auth.client_certs]]\nsubject = \"gateway-b\"\nroles = []\npeer = true\n",
        &format!(
            "\n[guardrail_hooks.check]\nurl = {:?}\n\n[upstreams.b.guardrails]\nhooks = [\"check\"]\n",
            guardrail.url
        ),
        &[],
    );
    let client = connect_legacy(&f.a.url, TestClient::new()).await;
    let r = until_answered(&client, "b__flows__report", json!({"a": 2, "b": 3}), |t| {
        t.contains("sum 5")
    })
    .await;
    let said = serde_json::to_value(&r).unwrap()["_meta"]["io.fedgate/guardrails"]["hooks"].clone();
    assert_eq!(
        said,
        json!([{"hook": "check", "phase": "request", "decision": "pass"},
               {"hook": "check", "phase": "response", "decision": "pass"}]),
        "{r:?}"
    );
    let seen: Value = reqwest::get(&guardrail.url)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (&seen["upstream"], &seen["tool"], &seen["arguments"]["a"]),
        (&json!("b"), &json!("b__flows__report"), &json!(2)),
        "{seen}"
    );
    drop(guardrail);
    let err = call(&client, "b__flows__report", json!({"a": 1, "b": 1}))
        .await
        .refused();
    assert!(
        err.contains("guardrail_unavailable") && err.contains("`check`"),
        "{err}"
    );
}
