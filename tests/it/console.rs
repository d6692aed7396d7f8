//! The operator console in a real headless Chromium (Debian's, over chromedriver) against a
//! live fedgate with two demo upstreams: sign-in, upstream states, the live call timeline and
//! its filters, escaping, approvals, a flow run's graph, an upstream killed under it; and, over
//! plain HTTP, that nothing answers without the token and that the page's headers are strict.

use crate::common;

use common::{browser::Browser, *};
use serde_json::{Value, json};

const ADMIN_TOKEN: &str = "console-admin-token-test-only";
const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");

const FLOW: &str = r#"
id = "relay"
description = "echo on one upstream, then on the other"
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
tool = "notes__echo"
depends_on = ["say"]
when = "inputs.loud == `true`"
params = { text = "LOUD {{say.output}}" }
[[nodes]]
id = "relay"
tool = "notes__echo"
depends_on = ["say"]
params = { text = "relayed {{say.output}}" }
[outputs]
relayed = "{{relay.output}}"
"#;

/// The console's gateway; `extra` goes at the top of its config.
fn gateway(extra: &str) -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("flows")).expect("flows dir");
    std::fs::write(dir.path().join("flows/relay.toml"), FLOW).expect("flow file");
    let token = dir.path().join("admin.token");
    std::fs::write(&token, ADMIN_TOKEN).expect("token file");
    let cfg = dir.path().join("gateway.toml");
    // `demo` restarts only after a minute: a killed process stays visibly down.
    std::fs::write(
        &cfg,
        format!(
            "{extra}\n[gateway]\ntiers_dir = {TIERS:?}\n\n[flows]\ndir = \"flows\"\ndb = \"runs.db\"\n\n\
             [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"file:{}\"\n\n\
             [auth]\nanonymous = true\nanonymous_roles = [\"all\"]\n\n[roles.all]\ntools = [\"*\"]\n\
             [roles.reviewer]\ntools = [\"fedgate__approve\"]\n\n{}{}\
             [upstreams.notes.tools.file_ticket]\napproval = \"plan\"\napprovers = [\"reviewer\"]\nwrites_code = true\n",
            token.display(),
            stdio_upstream(
                "demo",
                &[],
                "era = \"legacy\"\nrestart = { base_ms = 60000, max_ms = 60000, max_restarts = 5 }"
            ),
            stdio_upstream("notes", &[], "tier = \"high\""),
        ),
    )
    .expect("config");
    Gateway::start_file(&cfg, dir)
}

async fn admin_get(gw: &Gateway, path: &str, token: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{}{path}", gw.admin.as_deref().expect("admin")))
        .bearer_auth(token)
        .send()
        .await
        .expect("admin request")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_in_a_real_browser() {
    let gw = gateway(
        "[views.notes_only]\ntools = [\"notes/*\"]\n\n\
         [stages.review]\ninitial = \"draft\"\n[stages.review.states.draft]\ntools = [\"notes/add\"]\n\
         [stages.review.states.done]\ndescription = \"reviewed\"\n\
         [[stages.review.transitions]]\nfrom = \"draft\"\nto = \"done\"\nreason = true\n",
    );
    let admin = gw.admin.clone().expect("admin listener");
    // The ready line names the page an operator opens, not the token-guarded API root.
    assert!(
        gw.ready.contains(&format!("console at {admin}/console")),
        "{}",
        gw.ready
    );
    let browser = Browser::start().await;
    browser.goto(&format!("{admin}/console")).await;

    // A wrong token: refused, nothing shown.
    browser.type_into("#token", "not-the-token").await;
    browser.click("#login-submit").await;
    browser
        .until(
            "the refusal",
            "document.getElementById('login-error').textContent.includes('refused')",
        )
        .await;
    let shown = browser
        .js("return [document.getElementById('app').hidden, document.querySelectorAll('#upstream-rows tr').length, sessionStorage.length]")
        .await;
    assert_eq!(
        shown,
        json!([true, 0, 0]),
        "no data and no stored token after a refusal"
    );

    // The right token: both upstreams ready.
    browser.type_into("#token", ADMIN_TOKEN).await;
    browser.click("#login-submit").await;
    browser
        .until(
            "both upstreams ready",
            "document.querySelectorAll('#upstream-rows tr[data-state=ready]').length === 2",
        )
        .await;
    // The views, with what each selects of the catalog.
    let view = browser
        .until(
            "the view row",
            "document.querySelector(\"#view-rows tr[data-view='notes_only']\")?.textContent",
        )
        .await;
    let view = view.as_str().unwrap_or_default().to_owned();
    assert!(
        view.contains("/mcp/notes_only") && view.contains("notes__*") && !view.contains(" 0 tools"),
        "{view}"
    );
    browser
        .until(
            "the live stream",
            "document.getElementById('live').dataset.state === 'on'",
        )
        .await;

    // A call through /mcp appears in the timeline; so does a refused one whose name is markup,
    // as text.
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "demo__echo", json!({"text": "hello console"}))
        .await
        .expect("echo");
    assert_eq!(first_text(&r), "echo: hello console");
    // A workspace's move shows with its history; its reason is markup, shown as text.
    let moved = call(
        &client,
        "fedgate__stage_advance",
        json!({"workspace": "ws-console", "to": "done", "reason": "<b>looks right</b>"}),
    )
    .await
    .expect("stage move");
    assert_ne!(moved.is_error, Some(true), "{moved:?}");
    let stage = browser
        .until(
            "the workspace's stage",
            "document.querySelector(\"#stage-rows tr[data-workspace='ws-console'][data-state='done']\")?.textContent",
        )
        .await;
    let stage = stage.as_str().unwrap_or_default().to_owned();
    assert!(
        stage.contains("draft → done") && stage.contains("<b>looks right</b>"),
        "{stage}"
    );
    let row = browser
        .until(
            "the echo call in the timeline",
            "[...document.querySelectorAll('#call-rows tr')].find(r => r.querySelector('.call-name').textContent === 'demo__echo' && r.dataset.outcome === 'ok')?.dataset.seq",
        )
        .await;
    let evil = "<script>window.__owned=1</script><img src=x onerror=window.__owned=2>";
    let _ = call(&client, evil, json!({})).await;
    browser
        .until(
            "the refused call, its name as text",
            &format!(
                "[...document.querySelectorAll('#call-rows .call-name')].some(c => c.textContent === {evil:?})"
            ),
        )
        .await;
    let injected = browser
        .js("return [typeof window.__owned, document.querySelectorAll('#call-rows script, #call-rows img').length]")
        .await;
    assert_eq!(
        injected,
        json!(["undefined", 0]),
        "markup in a tool name never runs"
    );

    // Clicking the echo call shows its audit record; arguments never reach the page.
    let seq = row.as_str().expect("seq").to_owned();
    browser
        .click(&format!("#call-rows tr[data-seq='{seq}']"))
        .await;
    let record = browser
        .until(
            "the call's record",
            &format!(
                "document.querySelector(\"#call-detail dl[data-seq='{seq}']\") && document.getElementById('call-detail').innerText"
            ),
        )
        .await;
    let record = record.as_str().expect("text").to_owned();
    assert!(
        record.contains("correlation_id")
            && record.contains("latency_ms")
            && record.contains("anonymous"),
        "{record}"
    );
    assert!(
        !record.contains("hello console"),
        "arguments stay out of the console: {record}"
    );

    // Filters: by upstream.
    browser
        .js("const s = document.getElementById('f-upstream'); s.value = 'notes'; s.dispatchEvent(new Event('change')); return 1")
        .await;
    let left = browser
        .js("return [...document.querySelectorAll('#call-rows .call-name')].map(c => c.textContent)")
        .await;
    assert_eq!(left, json!([]), "only notes' calls: none yet");
    browser
        .js("const s = document.getElementById('f-upstream'); s.value = ''; s.dispatchEvent(new Event('change')); return 1")
        .await;

    // A flow run: its graph, nodes coloured by state, edges from depends_on.
    let started: Value = reqwest::Client::new()
        .post(format!("{admin}/admin/flows/relay/runs"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"inputs": {"text": "hi"}}))
        .send()
        .await
        .expect("start run")
        .json()
        .await
        .expect("run JSON");
    let run = started["run_id"].as_str().expect("run id").to_owned();
    browser
        .until(
            "the run, finished, in the list",
            &format!(
                "document.querySelector(\"#run-rows tr[data-run='{run}'][data-status=succeeded]\")"
            ),
        )
        .await;
    browser
        .click(&format!("#run-rows tr[data-run='{run}']"))
        .await;
    let graph = browser
        .until(
            "the run's graph",
            "document.querySelectorAll('#dag g.node').length === 3 && [...document.querySelectorAll('#dag g.node')].map(g => g.dataset.node + '=' + g.dataset.state).sort().join(',')",
        )
        .await;
    assert_eq!(
        graph,
        json!("relay=SUCCEEDED,say=SUCCEEDED,shout=SKIPPED"),
        "nodes coloured by their state"
    );
    let edges = browser
        .js("return [...document.querySelectorAll('#dag path.edge')].map(e => e.dataset.from + '>' + e.dataset.to).sort().join(',')")
        .await;
    assert_eq!(edges, json!("say>relay,say>shout"));
    let timeline = browser
        .js("return document.querySelector(\"#node-timeline tr[data-node='shout']\").innerText")
        .await;
    assert!(
        timeline.as_str().unwrap_or("").contains("is false"),
        "the skipped node says why: {timeline}"
    );

    // An approval: held on /mcp, approved in the console, then run by its caller.
    let held = call(
        &client,
        "notes__file_ticket",
        json!({"title": "from the console test", "priority": "high"}),
    )
    .await
    .expect("held call");
    let plan_id = held
        .meta
        .as_ref()
        .and_then(|m| m.0.get("io.fedgate/orchestrated_plan"))
        .and_then(|p| p["next_actions"][0]["args"]["plan_id"].as_str())
        .unwrap_or_else(|| panic!("a held call names its plan: {held:?}"))
        .to_owned();
    browser
        .until(
            "the pending plan",
            &format!("document.querySelector(\"#plan-rows tr[data-plan='{plan_id}'][data-state=pending] button.approve\")"),
        )
        .await;
    let safety = browser
        .js(&format!(
            "return [...document.querySelectorAll(\"#plan-rows tr[data-plan='{plan_id}'] [data-safety]\")].map(e => e.dataset.safety)"
        ))
        .await;
    assert_eq!(safety, json!(["writes_code"]), "the plan's safety fields");
    browser
        .click(&format!(
            "#plan-rows tr[data-plan='{plan_id}'] button.approve"
        ))
        .await;
    browser
        .until(
            "the plan approved",
            &format!("document.querySelector(\"#plan-rows tr[data-plan='{plan_id}'][data-state=approved]\")"),
        )
        .await;
    let ran = call(
        &client,
        "fedgate__approve",
        json!({"plan_id": plan_id, "decision": "approve"}),
    )
    .await
    .expect("approve");
    assert_ne!(ran.is_error, Some(true), "the approved call runs: {ran:?}");

    // The latency panel has both upstreams' charts.
    browser
        .until(
            "latency charts",
            "document.querySelector(\".chart[data-upstream='demo']\") && document.querySelector(\".chart[data-upstream='notes']\")",
        )
        .await;

    // The picture for README (regenerate: see README "Operator console").
    let png = browser.screenshot().await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let out = std::env::var("FEDGATE_CONSOLE_SCREENSHOT")
        .unwrap_or_else(|_| format!("{}/console.png", env!("CARGO_TARGET_TMPDIR")));
    std::fs::write(&out, &png).expect("write screenshot");

    // Kill an upstream's process: the console shows it down.
    let pid: i32 = first_text(&call(&client, "demo__pid", json!({})).await.expect("pid"))
        .trim()
        .parse()
        .expect("pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the upstream");
    let state = browser
        .until(
            "demo down",
            "document.querySelector(\"#upstream-rows tr[data-upstream='demo']:not([data-state=ready])\")?.dataset.state",
        )
        .await;
    assert!(
        matches!(state.as_str(), Some("restarting" | "failed" | "starting")),
        "{state}"
    );
    let notes = browser
        .js("return document.querySelector(\"#upstream-rows tr[data-upstream='notes']\").dataset.state")
        .await;
    assert_eq!(notes, json!("ready"), "the other upstream stays ready");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_token_nothing_answers_and_the_page_is_locked_down() {
    let gw = gateway("");
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    call(&client, "demo__echo", json!({"text": "secret-ish"}))
        .await
        .expect("echo");

    // The page itself holds no data; it is served with a strict policy.
    let page = reqwest::get(format!("{}/console", gw.admin.as_deref().expect("admin")))
        .await
        .expect("page");
    assert_eq!(page.status().as_u16(), 200);
    let csp = page
        .headers()
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} in {csp}");
    }
    assert!(
        !csp.contains("unsafe"),
        "no unsafe-inline or unsafe-eval: {csp}"
    );
    assert_eq!(
        page.headers()
            .get("x-content-type-options")
            .and_then(|v| v.to_str().ok()),
        Some("nosniff")
    );
    let html = page.text().await.expect("html");
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no third-party assets"
    );
    let js = reqwest::get(format!(
        "{}/console/app.js",
        gw.admin.as_deref().expect("admin")
    ))
    .await
    .expect("app.js")
    .text()
    .await
    .expect("js");
    assert!(
        !js.contains("innerHTML") && !js.contains("insertAdjacentHTML"),
        "the page never parses gateway data as HTML"
    );

    // Every data endpoint, the live stream included, wants the token.
    for path in [
        "/admin/calls",
        "/admin/calls/1",
        "/admin/calls/stream?after=0",
        "/admin/latency",
        "/admin/upstreams",
        "/admin/plans",
        "/admin/flows/runs",
    ] {
        let r = admin_get(&gw, path, "wrong-token").await;
        assert_eq!(r.status().as_u16(), 401, "{path}");
        let body = r.text().await.expect("body");
        assert!(
            !body.contains("demo__echo") && !body.contains("data:"),
            "{path}: {body}"
        );
    }

    // With the token, the stream replays what the feed holds, then follows live calls.
    let mut stream = admin_get(&gw, "/admin/calls/stream?after=0", ADMIN_TOKEN).await;
    assert_eq!(stream.status().as_u16(), 200);
    assert_eq!(
        stream
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let mut seen = String::new();
    while !seen.contains("demo__echo") {
        let chunk = stream.chunk().await.expect("stream").expect("open stream");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        seen.contains("event: call") && seen.contains("id: 1\n"),
        "{seen}"
    );
    assert!(!seen.contains("secret-ish"), "no arguments in the feed");
    call(&client, "notes__echo", json!({"text": "live"}))
        .await
        .expect("echo");
    while !seen.contains("notes__echo") {
        let chunk = stream.chunk().await.expect("stream").expect("open stream");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }

    // Recent calls filter server-side too, and latency counts them.
    let calls: Value = admin_get(&gw, "/admin/calls?upstream=notes", ADMIN_TOKEN)
        .await
        .json()
        .await
        .expect("calls");
    let names: Vec<&str> = calls["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["notes__echo"]);
    assert!(
        calls["calls"][0].get("trace_id").is_none(),
        "no trace id without tracing"
    );
    let latency: Value = admin_get(&gw, "/admin/latency", ADMIN_TOKEN)
        .await
        .json()
        .await
        .expect("latency");
    let demo = latency["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["upstream"] == "demo" && t["tool"] == "demo__echo")
        .unwrap_or_else(|| panic!("demo__echo in {latency}"));
    assert_eq!(demo["total"]["calls"], 1);
    assert!(demo["total"]["p50_ms"].as_f64().is_some_and(|p| p > 0.0));
}

#[tokio::test(flavor = "multi_thread")]
async fn with_tracing_on_a_call_shows_its_trace_id() {
    // Nothing listens on port 9: spans are made (and their export fails quietly).
    let gw = gateway("[tracing]\notlp_endpoint = \"http://127.0.0.1:9\"\n");
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    call(&client, "demo__echo", json!({"text": "traced"}))
        .await
        .expect("echo");
    let calls: Value = admin_get(&gw, "/admin/calls", ADMIN_TOKEN)
        .await
        .json()
        .await
        .expect("calls");
    let c = &calls["calls"][0];
    let trace = c["trace_id"].as_str().unwrap_or_else(|| panic!("{c}"));
    assert_eq!(trace.len(), 32, "{trace}");
    assert!(trace.bytes().all(|b| b.is_ascii_hexdigit()) && trace != "0".repeat(32));
    assert_eq!(
        c["correlation_id"], c["trace_id"],
        "the trace id is the correlation id"
    );
}
