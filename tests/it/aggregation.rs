//! Aggregation through a real fedgate: a stdio and an http upstream behind one endpoint.

use crate::common;

use common::*;
use rmcp::model::*;

fn config() -> (String, UrlProcess) {
    let (notes, server) = http_upstream(
        "notes",
        "rename = { write_note = \"save\" }\ndeny = [\"crash\", \"pid\"]\ndescriptions = { echo = \"Echo, via notes.\" }",
    );
    (
        format!("[gateway]\n{}{notes}", stdio_upstream("demo", &[], "")),
        server,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_from_both_upstreams_are_namespaced_and_routed() {
    let (cfg, _notes) = config();
    let gw = Gateway::start(&cfg);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(names.contains(&"demo__echo"), "{names:?}");
    assert!(names.contains(&"notes__echo"), "{names:?}");
    assert!(names.contains(&"notes__save"), "rename applies: {names:?}");
    assert!(
        !names.contains(&"notes__write_note"),
        "renamed away: {names:?}"
    );
    assert!(
        !names.contains(&"notes__crash") && !names.contains(&"notes__pid"),
        "deny applies: {names:?}"
    );
    assert!(names.contains(&"demo__crash"));
    let described = tools.iter().find(|t| t.name == "notes__echo").unwrap();
    assert_eq!(described.description.as_deref(), Some("Echo, via notes."));
    // Input schemas keep their properties in the server's order (forms follow it).
    let progress = tools.iter().find(|t| t.name == "demo__progress").unwrap();
    let order: Vec<&String> = progress.input_schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(order, ["steps", "delay_ms"], "{progress:?}");
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "tools/list is in a deterministic order");

    // Each call reaches the upstream that owns the name: the note saved through notes is
    // readable only from notes' resources.
    let r = call(&client, "demo__echo", serde_json::json!({"text": "hi"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: hi");
    let r = call(
        &client,
        "notes__save",
        serde_json::json!({"key": "k1", "value": "v1"}),
    )
    .await
    .unwrap();
    assert_eq!(first_text(&r), "stored k1");
    let read = client
        .peer()
        .read_resource(ReadResourceRequestParams::new("notes://notes/k1"))
        .await
        .unwrap();
    match &read.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => assert_eq!(text, "v1"),
        other => panic!("unexpected contents {other:?}"),
    }
    let missing = client
        .peer()
        .read_resource(ReadResourceRequestParams::new("demo://notes/k1"))
        .await;
    assert!(missing.is_err(), "demo never stored k1");

    let r = call(&client, "demo__add", serde_json::json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert_eq!(r.structured_content, Some(serde_json::json!({"sum": 5.0})));

    let err = call(&client, "demo__ecoh", serde_json::json!({}))
        .await
        .refused();
    assert!(
        err.contains("unknown tool `demo__ecoh`") && err.contains("tools/list"),
        "{err}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn prompts_resources_templates_and_completion() {
    let (cfg, _notes) = config();
    let gw = Gateway::start(&cfg);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let prompts = client.peer().list_all_prompts().await.unwrap();
    let pnames: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(pnames, vec!["demo__greeting", "notes__greeting"]);
    let got = client
        .peer()
        .get_prompt(
            GetPromptRequestParams::new("notes__greeting")
                .with_arguments(args(serde_json::json!({"name": "bob"}))),
        )
        .await
        .unwrap();
    let text = serde_json::to_string(&got.messages).unwrap();
    assert!(text.contains("Please greet bob warmly."), "{text}");

    let resources = client.peer().list_all_resources().await.unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris, vec!["demo://readme", "notes://readme"]);
    let templates = client.peer().list_all_resource_templates().await.unwrap();
    let tpl: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    assert_eq!(tpl, vec!["demo://notes/{key}", "notes://notes/{key}"]);
    let read = client
        .peer()
        .read_resource(ReadResourceRequestParams::new("demo://readme"))
        .await
        .unwrap();
    assert!(
        serde_json::to_string(&read)
            .unwrap()
            .contains("demo is the fedgate demo upstream")
    );

    let done = client
        .peer()
        .complete(CompleteRequestParams::new(
            Reference::for_prompt("demo__greeting"),
            ArgumentInfo::new("name", "ca"),
        ))
        .await
        .unwrap();
    assert_eq!(done.completion.values, vec!["carol".to_owned()]);

    let unknown = client
        .peer()
        .read_resource(ReadResourceRequestParams::new("nowhere://x"))
        .await;
    assert!(unknown.refused().contains("no upstream serves resource"));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn modern_client_sees_the_same_view() {
    let (cfg, _notes) = config();
    let gw = Gateway::start(&cfg);
    let client = connect_modern(&gw.url, TestClient::new()).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "notes__save"));
    let r = call(
        &client,
        "notes__echo",
        serde_json::json!({"text": "modern"}),
    )
    .await
    .unwrap();
    assert_eq!(first_text(&r), "echo: modern");
    client.cancel().await.unwrap();
}

/// README's first command: the shipped gateway.toml is a small product (a notebook over stdio, a
/// help desk over launched Streamable HTTP, one flow): only its meaningful tools, every name
/// portable, a read that runs, a write that waits for approval and then runs.
#[tokio::test(flavor = "multi_thread")]
async fn shipped_config_is_a_small_product_with_portable_names() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start_file(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/gateway.toml")),
        dir,
    );
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "desk__ask",
            "desk__build_report",
            "desk__file_ticket",
            "fedgate__approve",
            "flows__ticket_and_note",
            "notes__list_notes",
            "notes__read_note",
            "notes__write_note",
        ],
        "no test probes (crash, freeze, huge, pid, stray) in the shipped config"
    );
    for n in &names {
        assert!(
            n.len() <= 64
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{n} is not portable"
        );
    }
    let r = call(&client, "notes__list_notes", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "no notes yet");
    // The write is held: an `ok` plan whose next action approves it, to be confirmed.
    let held = call(
        &client,
        "notes__write_note",
        serde_json::json!({"key": "standup", "value": "10:00"}),
    )
    .await
    .unwrap();
    let plan = valid_plan(
        held.meta
            .as_ref()
            .and_then(|m| m.0.get("io.fedgate/orchestrated_plan"))
            .cloned()
            .expect("a plan"),
    );
    assert_eq!(plan["status"], "ok", "{plan}");
    let action = &plan["next_actions"][0];
    assert_eq!(action["tool"], "fedgate__approve", "{plan}");
    assert_eq!(action["confirm"], true, "{plan}");
    let nothing = call(
        &client,
        "notes__read_note",
        serde_json::json!({"key": "standup"}),
    )
    .await
    .unwrap();
    assert_eq!(nothing.is_error, Some(true), "not written before approval");
    let done = call(&client, "fedgate__approve", action["args"].clone())
        .await
        .unwrap();
    assert_eq!(done.is_error, Some(false), "{done:?}");
    let r = call(
        &client,
        "notes__read_note",
        serde_json::json!({"key": "standup"}),
    )
    .await
    .unwrap();
    assert_eq!(first_text(&r), "10:00");
    let ticket = call(
        &client,
        "desk__file_ticket",
        serde_json::json!({"title": "Printer on fire", "priority": "high"}),
    )
    .await
    .unwrap();
    assert_eq!(ticket.is_error, Some(false), "{ticket:?}");
    let (_, ready) = gw.readyz().await;
    assert_eq!(ready["upstreams"]["desk"]["kind"], "http");
    assert_eq!(ready["upstreams"]["notes"]["kind"], "stdio");
    client.cancel().await.unwrap();
}

/// Small pages: rmcp's client follows fedgate's cursors to the same full list; a forged
/// cursor is refused with -32602.
#[tokio::test(flavor = "multi_thread")]
async fn merged_lists_paginate_with_fedgates_own_cursors() {
    let gw = Gateway::start(&format!(
        "[gateway]\npage_size = 3\n{}{}",
        stdio_upstream("a", &[], ""),
        stdio_upstream("b", &[], "")
    ));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let first = client.peer().list_tools(None).await.unwrap();
    assert_eq!(first.tools.len(), 3);
    let cursor = first.next_cursor.clone().expect("more pages");
    let all = client.peer().list_all_tools().await.unwrap();
    let from_a = all.iter().filter(|t| t.name.starts_with("a__")).count();
    let from_b = all.iter().filter(|t| t.name.starts_with("b__")).count();
    assert!(
        from_a > 3 && from_a == from_b && from_a + from_b == all.len(),
        "{all:?}"
    );
    let mut names: Vec<_> = all.iter().map(|t| t.name.to_string()).collect();
    names.dedup();
    assert_eq!(names.len(), all.len(), "no tool twice across pages");
    let second = client
        .peer()
        .list_tools(Some(
            PaginatedRequestParams::default().with_cursor(Some(cursor.clone())),
        ))
        .await
        .unwrap();
    assert_eq!(second.tools[0].name, all[3].name);
    // Forged, or a real cursor with one character changed: -32602.
    let mut edited = cursor.clone().into_bytes();
    let i = edited.len() - 3;
    edited[i] = if edited[i] == b'A' { b'B' } else { b'A' };
    for bad in ["forged".to_owned(), String::from_utf8(edited).unwrap()] {
        let err = client
            .peer()
            .list_tools(Some(
                PaginatedRequestParams::default().with_cursor(Some(bad)),
            ))
            .await
            .unwrap_err();
        match err {
            rmcp::ServiceError::McpError(e) => assert_eq!(e.code.0, -32602, "{e:?}"),
            other => panic!("{other}"),
        }
    }

    // The list changes between two pages (a tool appears): the old cursor goes on after the
    // last tool it saw, so nothing still listed is skipped or repeated.
    let seen = client.service().seen.clone();
    let before = *seen.tool_changes.lock();
    call(&client, "b__toggle_extra", serde_json::json!({}))
        .await
        .unwrap();
    wait_for(&seen.tools_changed, "list_changed", || {
        *seen.tool_changes.lock() > before
    })
    .await;
    let now_all = client.peer().list_all_tools().await.unwrap();
    assert_eq!(now_all.len(), all.len() + 1, "b__extra appeared");
    let after_change = client
        .peer()
        .list_tools(Some(
            PaginatedRequestParams::default().with_cursor(first.next_cursor.clone()),
        ))
        .await
        .unwrap();
    let last_seen = first.tools[2].name.to_string();
    let expected: Vec<String> = now_all
        .iter()
        .map(|t| t.name.to_string())
        .filter(|n| *n > last_seen)
        .take(3)
        .collect();
    let got: Vec<String> = after_change
        .tools
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(got, expected);
    client.cancel().await.unwrap();
}

/// Two upstreams serving the same resource URI: the first (by name) keeps it, the other is
/// reported under `conflicts`, and reads go to the keeper.
#[tokio::test(flavor = "multi_thread")]
async fn duplicate_resource_uris_are_reported_not_shadowed_silently() {
    let gw = Gateway::start(&format!(
        "[gateway]\n{}{}",
        stdio_upstream("first", &["--scheme", "same"], ""),
        stdio_upstream("second", &["--scheme", "same"], "")
    ));
    let (_, ready) = gw.readyz().await;
    let conflicts = ready["conflicts"].as_array().unwrap();
    assert!(
        conflicts
            .iter()
            .any(|c| c["upstream"] == "second" && c["item"] == "same://readme"),
        "{ready}"
    );
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let resources = client.peer().list_all_resources().await.unwrap();
    assert_eq!(
        resources
            .iter()
            .filter(|r| r.uri == "same://readme")
            .count(),
        1
    );
    // The keeper answers: write a note through `first`, read it back by URI.
    call(
        &client,
        "first__write_note",
        serde_json::json!({"key": "k", "value": "from first"}),
    )
    .await
    .unwrap();
    let read = client
        .peer()
        .read_resource(ReadResourceRequestParams::new("same://notes/k"))
        .await
        .unwrap();
    assert!(serde_json::to_string(&read).unwrap().contains("from first"));
    client.cancel().await.unwrap();
}

/// A URI that no upstream lists and no template matches goes to `[gateway] resource_default`,
/// else to the only ready upstream with resources; with two and no default it is refused.
#[allow(deprecated)] // resources/subscribe is handshake-era only
#[tokio::test(flavor = "multi_thread")]
async fn unlisted_resource_uris_go_to_the_default_upstream() {
    let fixture = UrlProcess::fixture();
    let fx = format!(
        "[upstreams.fx]\nkind = \"http\"\nurl = \"{}\"\nprefix = \"never\"\n",
        fixture.url
    );
    let demo = stdio_upstream("demo", &[], "");
    let read = |client: &Client, uri: &'static str| {
        let peer = client.peer().clone();
        async move {
            peer.read_resource(ReadResourceRequestParams::new(uri))
                .await
        }
    };

    // Two upstreams with resources, no default: fedgate's own refusal.
    let gw = Gateway::start(&format!("{demo}{fx}"));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let refused = read(&client, "elsewhere://x").await.refused();
    assert!(refused.contains("no upstream serves resource"), "{refused}");
    client.cancel().await.unwrap();
    drop(gw);

    // The configured default answers (the fixture's own not-found wording), for reads and
    // subscriptions alike; listed URIs still go where they are listed.
    let gw = Gateway::start(&format!("[gateway]\nresource_default = \"fx\"\n{demo}{fx}"));
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let refused = read(&client, "elsewhere://x").await.refused();
    assert!(
        refused.contains("resource not found: elsewhere://x"),
        "{refused}"
    );
    client
        .peer()
        .subscribe(SubscribeRequestParams::new("elsewhere://x"))
        .await
        .expect("the default upstream takes the subscription");
    let listed = read(&client, "demo://readme").await.unwrap();
    assert!(
        serde_json::to_string(&listed)
            .unwrap()
            .contains("demo upstream")
    );
    client.cancel().await.unwrap();
    drop(gw);

    // One upstream with resources: it serves as itself (the demo's own wording).
    let gw = Gateway::start(&demo);
    let client = connect_modern(&gw.url, TestClient::new()).await;
    let refused = read(&client, "elsewhere://x").await.refused();
    assert!(refused.contains("no resource elsewhere://x"), "{refused}");
    client.cancel().await.unwrap();
}
