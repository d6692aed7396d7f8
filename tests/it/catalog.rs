//! `fedgate catalog` and `fedgate add`: servers from the catalog in the binary, one from npm and
//! one from PyPI (installed by scripts/test.sh), added to a config and called through a real
//! gateway; refusals that say what to do.

use crate::common;

use std::process::Command;

use common::*;

/// PATH with the installed third-party servers first: the PyPI venv's and npm's executables.
fn path_with_servers() -> String {
    let venv = repo("tests/clients/python/.venv/bin");
    let npm = repo("tests/node/node_modules/.bin");
    assert!(
        venv.join("mcp-server-time").exists() && npm.join("mcp-server-everything").exists(),
        "run `bash scripts/test.sh`, which installs mcp-server-time (PyPI) and server-everything (npm)"
    );
    format!(
        "{}:{}:{}",
        venv.display(),
        npm.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn fedgate(dir: &std::path::Path, path: &str, args: &[&str]) -> std::process::Output {
    Command::new(FEDGATE)
        .args(args)
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .expect("fedgate")
}

#[tokio::test(flavor = "multi_thread")]
async fn servers_added_from_the_catalog_answer_through_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let path = path_with_servers();
    let listed = fedgate(dir.path(), &path, &["catalog"]);
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(table.lines().count() > 15, "{table}");
    let found = fedgate(dir.path(), &path, &["catalog", "search", "time zone"]);
    assert!(
        String::from_utf8_lossy(&found.stdout).contains("time "),
        "search finds by description"
    );

    for args in [
        &["add", "time"][..],
        &["add", "everything", "--as", "ref"][..],
    ] {
        let out = fedgate(dir.path(), &path, args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("starts the installed"),
            "an installed copy is preferred to fetching: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let cfg = dir.path().join("gateway.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        text.contains("[upstreams.time]") && text.contains("tier = \"medium\""),
        "{text}"
    );
    assert!(
        text.contains("read_only = [\"get_current_time\", \"convert_time\"]"),
        "{text}"
    );
    assert!(
        dir.path().join("gateway.toml.bak").exists(),
        "the second add kept a backup"
    );
    let out = fedgate(dir.path(), &path, &["add", "time"]);
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("already has an upstream `time`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let gw = Gateway::start_file_env(&cfg, dir, &[("PATH", path.as_str())]);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let tools = client.peer().list_all_tools().await.unwrap();
    for t in &tools {
        assert!(
            t.name.len() <= 64
                && t.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{} is not portable",
            t.name
        );
    }
    let r = call(
        &client,
        "time__get_current_time",
        serde_json::json!({"timezone": "UTC"}),
    )
    .await
    .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert!(first_text(&r).contains("\"timezone\": \"UTC\""), "{r:?}");
    let r = call(
        &client,
        "ref__echo",
        serde_json::json!({"message": "catalog"}),
    )
    .await
    .unwrap();
    assert_eq!(first_text(&r), "Echo: catalog");
    client.cancel().await.unwrap();
}

#[test]
fn add_says_what_is_wrong_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let err = |args: &[&str]| {
        let out = fedgate(dir.path(), &path, args);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(err(&["add", "tme"]).contains("did you mean `time`?"));
    assert!(err(&["add", "filesystem"]).contains("needs the folders it may use"));
    assert!(
        err(&["add", "time", "--as", "my.time"]).contains("upstream name `my.time` contains `.`")
    );
    assert!(!dir.path().join("gateway.toml").exists(), "nothing written");
    // A credential is a reference to fedgate's environment, named in a note.
    let out = fedgate(dir.path(), &path, &["add", "github", "--print"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("GITHUB_PERSONAL_ACCESS_TOKEN = \"env:GITHUB_PERSONAL_ACCESS_TOKEN\""),
        "{table}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("set GITHUB_PERSONAL_ACCESS_TOKEN"));
    assert!(
        !dir.path().join("gateway.toml").exists(),
        "--print writes nothing"
    );
}
