//! `fedgate check` diagnostics, `fedgate import`, `tools`, `call` and the sse upstream kind.

use crate::common;

use std::process::{Command, Output};

use common::*;

fn fedgate(args: &[&str]) -> Output {
    Command::new(FEDGATE)
        .args(args)
        .env("FEDGATE_LOG", "warn")
        .output()
        .expect("run fedgate")
}

fn check(text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, text).unwrap();
    let out = fedgate(&["check", path.to_str().unwrap()]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).replace(path.to_str().unwrap(), "FILE"),
    )
}

#[test]
fn unknown_field_is_reported_with_file_and_line() {
    let (ok, err) = check("[gateway]\nlisten = \"127.0.0.1:1\"\ncolour = \"red\"\n");
    assert!(!ok);
    assert!(err.contains("FILE:3:") && err.contains("colour"), "{err}");
}

#[test]
fn bad_separator_is_reported() {
    let (ok, err) = check("[gateway]\nseparator = \"/\"\n");
    assert!(!ok);
    assert!(
        err.contains("FILE:2:") && err.contains("bad separator `/`"),
        "{err}"
    );
}

#[test]
fn invalid_upstream_names_are_reported() {
    let (ok, err) = check(
        "[upstreams.\"git hub\"]\nkind = \"stdio\"\ncommand = \"x\"\n\n[upstreams.\"a__b\"]\nkind = \"stdio\"\ncommand = \"x\"\n\n[upstreams.\"a.b\"]\nkind = \"stdio\"\ncommand = \"x\"\n",
    );
    assert!(!ok);
    assert!(
        err.contains("FILE:1: invalid upstream name `git hub`"),
        "{err}"
    );
    assert!(
        err.contains("FILE:5: invalid upstream name `a__b`: it contains the separator `__`"),
        "{err}"
    );
    assert!(
        err.contains("FILE:9: upstream name `a.b` contains `.`: names = \"portable\""),
        "{err}"
    );
}

#[test]
fn collisions_name_both_sources() {
    let text = "[upstreams.one]\nkind = \"stdio\"\ncommand = \"x\"\nprefix = \"never\"\nrename = { a = \"same\" }\n\n\
                [upstreams.two]\nkind = \"stdio\"\ncommand = \"x\"\nprefix = \"never\"\nrename = { b = \"same\" }\n";
    let (ok, err) = check(text);
    assert!(!ok);
    assert!(
        err.contains(
            "FILE:11: upstream `two`: exposed name `same` collides with upstream `one` (line 5)"
        ),
        "{err}"
    );
    let within =
        "[upstreams.one]\nkind = \"stdio\"\ncommand = \"x\"\nrename = { a = \"z\", b = \"z\" }\n";
    let (ok, err) = check(within);
    assert!(!ok);
    assert!(
        err.contains("rename of `b` to `z` collides with the rename of `a`"),
        "{err}"
    );
    let namespace = "[upstreams.gh]\nkind = \"stdio\"\ncommand = \"x\"\n\n[upstreams.local]\nkind = \"stdio\"\ncommand = \"x\"\nprefix = \"never\"\nrename = { t = \"gh__t\" }\n";
    let (ok, err) = check(namespace);
    assert!(!ok);
    assert!(
        err.contains("bare name `gh__t` lies in the namespace of upstream `gh`"),
        "{err}"
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let (ok, err) = check(
        "[gateway]\nseparator = \"\"\n[upstreams.x]\nkind = \"ftp\"\n[upstreams.y]\nkind = \"http\"\nurl = \"nope\"\n",
    );
    assert!(!ok);
    assert!(err.contains("3 problem(s) found"), "{err}");
}

#[test]
fn too_long_names_break_the_tool_name_rules() {
    let alias = "x".repeat(126);
    let (ok, err) = check(&format!(
        "[gateway]\nnames = \"mcp\"\n[upstreams.ab]\nkind = \"stdio\"\ncommand = \"x\"\nrename = {{ t = \"{alias}\" }}\n"
    ));
    assert!(!ok);
    assert!(
        err.contains("is 129 characters long; MCP tool names are 1-128"),
        "{err}"
    );
}

#[test]
fn the_shipped_config_is_valid() {
    let out = fedgate(&[
        "check",
        concat!(env!("CARGO_MANIFEST_DIR"), "/gateway.toml"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn imported_mcp_servers_config_checks_and_serves() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let json = serde_json::json!({"mcpServers": {
        "local files": {"command": FEDGATE, "args": ["demo-upstream", "--faults", "--name", "files"],
                        "env": {"MCP_TOKEN": "tok-written-in-the-json", "LOG_LEVEL": "debug"}},
        "remote": {"type": "http", "url": format!("http://127.0.0.1:{port}/mcp")},
        "switched off": {"command": "nowhere", "disabled": true}
    }});
    let src = dir.path().join("claude_desktop_config.json");
    std::fs::write(&src, json.to_string()).unwrap();
    let out = fedgate(&["import", src.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let toml = String::from_utf8(out.stdout).unwrap();
    assert!(
        toml.contains("[upstreams.local_files]") && toml.contains("[upstreams.remote]"),
        "{toml}"
    );
    // Secrets become references to fedgate's environment; disabled servers stay out.
    assert!(!toml.contains("tok-written-in-the-json"), "{toml}");
    assert!(toml.contains(r#"MCP_TOKEN = "env:MCP_TOKEN""#), "{toml}");
    assert!(
        !toml.contains("[upstreams.switched") && toml.contains("is disabled"),
        "{toml}"
    );
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(&cfg, &toml).unwrap();
    // `check` names the variable to set, and passes once it is set.
    let out = fedgate(&["check", cfg.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(
            "upstream `local_files`: env `MCP_TOKEN`: environment variable `MCP_TOKEN` is not set"
        ),
        "{said}"
    );
    let out = Command::new(FEDGATE)
        .args(["check", cfg.to_str().unwrap()])
        .env("FEDGATE_LOG", "warn")
        .env("MCP_TOKEN", "tok-from-the-env")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The http entry points at nothing: serve still runs the stdio one.
    let gw = Gateway::start_file_env(&cfg, dir, &[("MCP_TOKEN", "tok-from-the-env")]);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "local_files__whoami", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "env tok-from-the-env");
    let r = call(
        &client,
        "local_files__echo",
        serde_json::json!({"text": "imported"}),
    )
    .await
    .unwrap();
    assert_eq!(first_text(&r), "echo: imported");
    client.cancel().await.unwrap();
}

#[test]
fn tools_fails_when_an_upstream_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}
[upstreams.gone]
kind = \"stdio\"\ncommand = \"/nonexistent/fedgate-test-server\"\n",
            stdio_upstream("demo", &[], "")
        ),
    )
    .unwrap();
    let out = fedgate(&["tools", "--json", "--config", cfg.to_str().unwrap()]);
    assert!(!out.status.success(), "a missing upstream is a failure");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "demo__echo"),
        "the ready upstream's tools are still listed: {v}"
    );
    let failed = &v["not_ready"][0];
    assert_eq!(failed["upstream"], "gone", "{v}");
    assert!(
        failed["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("fedgate-test-server")),
        "{v}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("upstream `gone` not ready"), "{stderr}");
    // A tool of the failed upstream names the upstream and its state, not "unknown tool";
    // a misspelt name gets suggestions in the message itself.
    let call = |tool: &str| {
        let out = fedgate(&["call", tool, "--config", cfg.to_str().unwrap()]);
        assert!(!out.status.success(), "{tool} cannot succeed");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let down = call("gone__anything");
    assert!(
        down.contains("upstream `gone` is unavailable") && down.contains("fedgate-test-server"),
        "{down}"
    );
    let typo = call("demo__ecoh");
    assert!(typo.contains("did you mean `demo__echo`"), "{typo}");
}

#[test]
fn tools_and_call_commands() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!("[gateway]\n{}", stdio_upstream("demo", &[], "")),
    )
    .unwrap();
    let out = fedgate(&["tools", "--config", cfg.to_str().unwrap()]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    let echo = table
        .lines()
        .find(|l| l.starts_with("demo__echo "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        echo.contains("demo") && echo.contains("read") && echo.contains("Echo the text back."),
        "{echo}"
    );
    let note = table
        .lines()
        .find(|l| l.starts_with("demo__write_note "))
        .unwrap();
    assert!(note.contains("write"), "{note}");
    let out = fedgate(&["tools", "--json", "--config", cfg.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let add = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "demo__add")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(add["access"], "read");
    // At a tier that trusts no annotations, what the tier does decides the column.
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\ntiers_dir = {:?}\n{}",
            concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers"),
            stdio_upstream(
                "demo",
                &[],
                "tier = \"low\"\nread_only = [\"add\"]\nwritable = [\"write_note\"]"
            )
        ),
    )
    .unwrap();
    let out = fedgate(&["tools", "--json", "--config", cfg.to_str().unwrap()]);
    let low: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let access = |name: &str| {
        low["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["access"].clone())
            .unwrap_or_else(|| panic!("{low}"))
    };
    assert_eq!(access("demo__add"), "read", "declared read_only");
    assert_eq!(
        access("demo__echo"),
        "write refused",
        "a read hint the tier does not trust"
    );
    assert_eq!(access("demo__write_note"), "write, needs approval");
    std::fs::write(
        &cfg,
        format!("[gateway]\n{}", stdio_upstream("demo", &[], "")),
    )
    .unwrap();
    assert!(
        add["input_schema"]["properties"]["a"].is_object(),
        "input schemas are listed: {add}"
    );
    assert_eq!(v["not_ready"], serde_json::json!([]));
    let out = fedgate(&[
        "call",
        "demo__add",
        "--args",
        "{\"a\": 20, \"b\": 22}",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["structuredContent"]["sum"], 42.0);
    let out = fedgate(&["call", "demo__nope", "--config", cfg.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown tool `demo__nope`"));
}

#[tokio::test(flavor = "multi_thread")]
async fn legacy_sse_upstream() {
    let server = HttpDemo::start("old", "--sse");
    let config = format!(
        "[upstreams.old]\nkind = \"sse\"\nurl = \"{}\"\n",
        server.url
    );
    let gw = Gateway::start(&config);
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    let r = call(&client, "old__echo", serde_json::json!({"text": "sse"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: sse");
    let r = call(&client, "old__progress", serde_json::json!({"steps": 2}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "done 2");
    let (_, ready) = gw.readyz().await;
    assert_eq!(ready["upstreams"]["old"]["kind"], "sse");
    assert_eq!(ready["upstreams"]["old"]["era"], "handshake");
    let _ = seen;
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_downstream_serves_the_same_view() {
    use rmcp::{ServiceExt, transport::TokioChildProcess};
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!("[gateway]\n{}", stdio_upstream("demo", &[], "")),
    )
    .unwrap();
    let mut cmd = tokio::process::Command::new(FEDGATE);
    cmd.args(["stdio", "--config", cfg.to_str().unwrap()])
        .env("FEDGATE_LOG", "warn");
    let client = TestClient::new()
        .serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "demo__echo"));
    let r = client
        .peer()
        .call_tool(
            rmcp::model::CallToolRequestParams::new("demo__echo")
                .with_arguments(args(serde_json::json!({"text": "stdio"}))),
        )
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: stdio");
    client.cancel().await.unwrap();
}

#[test]
fn the_policy_example_runs_as_documented() {
    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policy/gateway.toml");
    let out = fedgate(&["check", cfg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = |tool: &str, args: &str, key: &str| {
        let out = Command::new(FEDGATE)
            .args([
                "call", tool, "--args", args, "--bearer", key, "--config", cfg,
            ])
            .env("FEDGATE_LOG", "warn")
            .output()
            .expect("run fedgate");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let bob = "fgk_example_bob_NOT_A_SECRET";
    let alice = "fgk_example_alice_NOT_A_SECRET";
    let (ok, out) = run("internal__echo", r#"{"text":"hi"}"#, bob);
    assert!(ok && out.contains("echo: hi"), "{out}");
    let (ok, out) = run("internal__write_note", r#"{"key":"k","value":"v"}"#, bob);
    assert!(
        !ok && out.contains("unknown tool `internal__write_note`"),
        "{out}"
    );
    let (ok, out) = run("internal__write_note", r#"{"key":"k","value":"v"}"#, alice);
    assert!(ok && out.contains("stored k"), "{out}");
    let (ok, out) = run("external__add", r#"{"a":1,"b":2}"#, alice);
    assert!(!ok && out.contains("trust tier `low`"), "{out}");
    let (ok, out) = run("core.echo", r#"{"text":"hi"}"#, alice);
    assert!(!ok && out.contains("unknown tool `core.echo`"), "{out}");
    let (ok, out) = run("internal__echo", "{}", "fgk_wrong");
    assert!(
        !ok && out.contains("unknown API key or invalid token"),
        "{out}"
    );
}

/// README's first command on the shipped gateway.toml: both upstreams ready (the launched one
/// waited for, not raced), a call to each answers, and nothing is logged at WARN or ERROR.
#[tokio::test(flavor = "multi_thread")]
async fn the_shipped_config_starts_quietly() {
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/gateway.toml")).unwrap();
    // Its launched server gets a free port, so the test runs beside anything on 8931.
    let port = free_port().to_string();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    let flows = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart/flows");
    std::fs::write(
        &cfg,
        shipped
            .replace("8931", &port)
            .replace("\"examples/quickstart/flows\"", &format!("{flows:?}")),
    )
    .unwrap();
    let gw = Gateway::start_file(&cfg, dir);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "notes__list_notes", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "no notes yet");
    let r = call(
        &client,
        "desk__file_ticket",
        serde_json::json!({"title": "t", "priority": "low"}),
    )
    .await
    .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    client.cancel().await.unwrap();
    let log = gw.stderr();
    let loud: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(loud.is_empty(), "{loud:#?}");
}

/// Valid names that some clients' model APIs refuse are warnings of `fedgate check` (it still
/// succeeds), and `fedgate tools --json` marks them.
#[test]
fn names_some_clients_refuse_are_warnings() {
    let upstream = stdio_upstream(
        "demo",
        &[],
        &format!(
            "rename = {{ echo = \"say.it\", add = \"{}\" }}",
            "a".repeat(70)
        ),
    );
    let (ok, err) = check(&format!("[gateway]\nnames = \"mcp\"\n{upstream}"));
    assert!(ok, "{err}");
    assert!(err.contains("warning: separator `.` contains `.`"), "{err}");
    assert!(
        err.contains("`demo.say.it`: its alias contains `.`"),
        "{err}"
    );
    assert!(err.contains("its alias is 70 characters long"), "{err}");
    let (ok, err) = check(&format!(
        "[gateway]\nnames = \"mcp\"\nseparator = \"__\"\n{}",
        stdio_upstream("demo", &[], "")
    ));
    assert!(ok && !err.contains("warning"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!("[gateway]\nnames = \"mcp\"\nseparator = \"__\"\n{upstream}"),
    )
    .unwrap();
    let out = fedgate(&["tools", "--json", "--config", cfg.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let portable = |name: &str| {
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["portable"].clone())
    };
    assert_eq!(portable("demo__echo"), None, "renamed");
    assert_eq!(portable("demo__say.it"), Some(serde_json::json!(false)));
    assert_eq!(portable("demo__pid"), Some(serde_json::json!(true)));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tool names (e.g. `"),
        "{v}"
    );

    // The portable default: the same renames get portable forms, listed with their originals.
    std::fs::write(&cfg, &upstream).unwrap();
    let out = fedgate(&["tools", "--json", "--config", cfg.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tools = v["tools"].as_array().unwrap();
    assert!(tools.len() > 20, "{v}");
    for t in tools {
        let name = t["name"].as_str().unwrap();
        assert!(
            name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{name}"
        );
        assert_eq!(t["portable"], true, "{name}");
    }
    let forms = v["portable_forms"].as_array().unwrap();
    let form_of = |original: &str| {
        forms
            .iter()
            .find(|f| f["original"] == original)
            .and_then(|f| f["name"].as_str())
            .unwrap_or_else(|| panic!("no portable form of {original}: {v}"))
            .to_owned()
    };
    let said = form_of("demo__say.it");
    assert!(said.starts_with("demo__say_it-"), "{said}");
    let long = form_of(&format!("demo__{}", "a".repeat(70)));
    assert!(long.len() == 64, "{long}");
    // The forms are stable: a second run names the same tools the same way.
    let again = fedgate(&["tools", "--json", "--config", cfg.to_str().unwrap()]);
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["portable_forms"], v["portable_forms"]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("`demo__say.it` is exposed as `demo__say_it-"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Type errors read as sentences naming the field, on its line; a problem without a line (a
/// missing file) has no `:0`; a bad value inside a table points at its own line.
#[test]
fn config_problems_read_as_plain_sentences_on_the_right_line() {
    let (ok, err) = check("[gateway]\npage_size = \"100\"\n");
    assert!(!ok);
    assert!(
        err.contains("FILE:2: page_size must be a whole number, got the string \"100\""),
        "{err}"
    );
    let (_, err) =
        check("[upstreams.a]\nkind = \"stdio\"\ncommand = \"x\"\nstartup_timeout_ms = \"100\"\n");
    assert!(
        err.contains("FILE:4: startup_timeout_ms must be a whole number of milliseconds, got the string \"100\""),
        "{err}"
    );
    assert!(!err.contains("u64"), "no Rust type names: {err}");
    let (_, err) = check(
        "[upstreams.a]\nkind = \"stdio\"\ncommand = \"x\"\n\n[upstreams.b]\nkind = \"stdio\"\ncommand = \"x\"\ncall_timeout_ms = 0\n",
    );
    assert!(
        err.contains("FILE:8: upstream `b`: call_timeout_ms must be greater than 0"),
        "{err}"
    );
    let out = fedgate(&["check", "/nonexistent/dir/gateway.toml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/dir/gateway.toml: cannot read config") && !err.contains(":0:"),
        "{err}"
    );
    // `serve` without a config in reach says how to name one or make one.
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(FEDGATE)
        .arg("serve")
        .current_dir(empty.path())
        .output()
        .expect("serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("gateway.toml: cannot read config")
            && err.contains("--config FILE")
            && err.contains("fedgate import"),
        "{err}"
    );
}

/// `fedgate check` reports every problem of a file in one run, in file order: unknown keys,
/// types, a bad address, an unreadable TLS file, an unknown tier (listing the known ones), a
/// missing command (a warning), a name that is not portable, a collision and an unknown role.
#[test]
fn ten_mistakes_come_back_in_one_run() {
    let text = r#"[gateway]
seperator = "__"
page_size = "100"
listen = "nowhere"
tls = { cert = "missing-cert.pem", key = "missing-key.pem" }

[upstreams.files]
kind = "stdio"
comand = "npx"
startup_timeout = 5000

[upstreams.search]
kind = "stdio"
command = "surely-not-an-installed-mcp-server"
tier = "trusted"

[upstreams."my.server"]
kind = "stdio"
command = "@self"

[upstreams.one]
kind = "stdio"
command = "@self"
prefix = "never"
rename = { a = "same" }

[upstreams.two]
kind = "stdio"
command = "@self"
prefix = "never"
rename = { b = "same" }

[auth]
anonymous = true
anonymous_roles = ["agnet"]

[roles.agent]
tools = ["files/*"]
"#;
    let (ok, err) = check(text);
    assert!(!ok, "{err}");
    let want = [
        (2, "unknown field `seperator`"),
        (2, "did you mean `separator`?"),
        (3, "page_size must be a whole number"),
        (4, "listen: `nowhere` is not an address"),
        (5, "missing-cert.pem"),
        (8, "kind stdio needs `command`"),
        (9, "unknown field `comand`"),
        (10, "unknown field `startup_timeout`"),
        (
            14,
            "warning: upstream `search`: command `surely-not-an-installed-mcp-server` is not on PATH",
        ),
        (
            15,
            "unknown trust tier `trusted`: known tiers are high, low, medium",
        ),
        (17, "upstream name `my.server` contains `.`"),
        (31, "exposed name `same` collides with upstream `one`"),
        (35, "unknown role `agnet`"),
    ];
    for (line, what) in want {
        assert!(
            err.lines()
                .any(|l| l.starts_with(&format!("FILE:{line}: ")) && l.contains(what)),
            "want FILE:{line}: …{what} in:\n{err}"
        );
    }
    // In file order, and counted without the warning.
    let lines: Vec<usize> = err
        .lines()
        .filter_map(|l| l.strip_prefix("FILE:")?.split(':').next()?.parse().ok())
        .collect();
    assert!(lines.windows(2).all(|w| w[0] <= w[1]), "{err}");
    assert!(err.contains("11 problem(s) found"), "{err}");
}

/// `fedgate import` of a VS Code file with variables: `${input:…}` in a header becomes a
/// credential fedgate injects from its environment (the server then answers only with it),
/// `${workspaceFolder}` is resolved, a secret in arguments or an unknown variable leaves its
/// server out with a note — no placeholder reaches a server as written. The file names the
/// portable default.
#[tokio::test(flavor = "multi_thread")]
async fn import_turns_client_variables_into_references_or_refuses_them() {
    let dir = tempfile::tempdir().unwrap();
    let accepted = dir.path().join("accepted-token");
    std::fs::write(&accepted, "tok-from-the-input").unwrap();
    let api = UrlProcess::testkit(&[
        "demo-upstream",
        "--faults",
        "--name",
        "api",
        "--http",
        "127.0.0.1:0",
        "--require-bearer-file",
        accepted.to_str().unwrap(),
    ]);
    let workspace = dir.path().join("proj");
    std::fs::create_dir_all(workspace.join(".vscode")).unwrap();
    let json = serde_json::json!({
        "inputs": [{"type": "promptString", "id": "api-token", "description": "API token", "password": true}],
        "servers": {
            "api": {"type": "http", "url": api.url, "headers": {"Authorization": "Bearer ${input:api-token}"}},
            "files": {"type": "stdio", "command": FEDGATE,
                      "args": ["demo-upstream", "--faults", "--name", "files", "--scheme", "${workspaceFolderBasename}"],
                      "cwd": "${workspaceFolder}"},
            "more": {"command": FEDGATE, "args": ["demo-upstream", "--faults", "--name", "more"]},
            "leaky": {"command": FEDGATE, "args": ["--token=${input:api-token}"]},
            "odd": {"command": FEDGATE, "args": ["${notAVariable}"]}
        }
    });
    let src = workspace.join(".vscode").join("mcp.json");
    std::fs::write(&src, json.to_string()).unwrap();
    let out = fedgate(&["import", src.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let toml = String::from_utf8(out.stdout).unwrap();
    assert!(
        toml.lines()
            .filter(|l| !l.starts_with('#'))
            .all(|l| !l.contains("${")),
        "no placeholder is kept: {toml}"
    );
    assert!(
        toml.contains("names = \"portable\"") && toml.contains("separator = \"__\""),
        "{toml}"
    );
    assert!(
        toml.contains("source = \"env:API_TOKEN\"") && toml.contains("credential = \"api\""),
        "{toml}"
    );
    assert!(toml.contains("# set API_TOKEN in fedgate's environment: the Authorization header of server `api` (API token)"), "{toml}");
    assert!(
        toml.contains(&format!("cwd = {:?}", workspace.display().to_string())),
        "{toml}"
    );
    assert!(
        toml.contains("\"proj\""),
        "${{workspaceFolderBasename}} resolved: {toml}"
    );
    assert!(
        toml.contains("# `leaky` was not imported: `${input:api-token}` is asked of the user"),
        "{toml}"
    );
    assert!(
        toml.contains("# `odd` was not imported: unknown variable `${notAVariable}`"),
        "{toml}"
    );
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(&cfg, &toml).unwrap();
    let gw = Gateway::start_file_env(&cfg, dir, &[("API_TOKEN", "tok-from-the-input")]);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    // Three imported servers, every name portable.
    let tools = client.peer().list_all_tools().await.unwrap();
    for up in ["api__", "files__", "more__"] {
        assert!(
            tools.iter().any(|t| t.name.starts_with(up)),
            "{up}: {tools:?}"
        );
    }
    assert_portable(tools.iter().map(|t| t.name.as_ref()));
    let r = call(&client, "api__whoami", serde_json::json!({}))
        .await
        .unwrap();
    assert!(first_text(&r).contains("tok-from-the-input"), "{r:?}");
    let r = call(&client, "files__echo", serde_json::json!({"text": "hi"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: hi");
    client.cancel().await.unwrap();
}

#[test]
fn an_api_key_name_with_control_characters_or_10_kib_long_is_refused() {
    for name in ["ali\u{7}ce", "line\nbreak", &"n".repeat(10 * 1024), ""] {
        let (ok, err) = check(&format!(
            "[[auth.api_keys]]\nname = {}\nsha256 = \"{}\"\nroles = []\n",
            serde_json::to_string(name).unwrap(),
            "0".repeat(64)
        ));
        assert!(!ok, "{name:.20?}: {err}");
        assert!(
            err.contains("a name is 1 to 256 bytes without control characters"),
            "{name:.20?}: {err}"
        );
        // The refusal does not echo 10 KiB back.
        assert!(err.len() < 4096, "{}", err.len());
    }
}
