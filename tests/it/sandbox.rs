//! A sandboxed stdio upstream (bubblewrap) tries to escape: to read and write outside its
//! paths and to open a socket. The same server unsandboxed can, so the probe is real.

use crate::common;

use common::*;
use serde_json::{Value, json};

async fn reach(c: &Client, up: &str, args: Value) -> Value {
    let r = call(c, &format!("{up}__reach"), args).await.unwrap();
    r.structured_content.unwrap_or_default()
}

fn ok(v: &Value, what: &str) -> bool {
    v[what].as_str().is_some_and(|s| s.starts_with("ok"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandboxed_server_reads_only_its_paths_and_opens_no_socket() {
    let files = tempfile::tempdir().unwrap();
    let allowed = files.path().join("allowed");
    let out = files.path().join("out");
    std::fs::create_dir_all(&allowed).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(allowed.join("doc.txt"), "for the server").unwrap();
    let secret = files.path().join("secret.txt");
    std::fs::write(&secret, "not for the server").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();

    let sandbox = format!(
        "[upstreams.boxed.sandbox]\nread = [{:?}]\nwrite = [{:?}]\nmemory_mb = 4096\n\
         open_files = 256\n",
        allowed.to_str().unwrap(),
        out.to_str().unwrap()
    );
    let config = format!(
        "{}{sandbox}\n{}",
        stdio_upstream("boxed", &[], ""),
        stdio_upstream("open", &[], "")
    );
    let gw = Gateway::start(&config);
    let c = connect_legacy(&gw.url, TestClient::new()).await;
    let gateway_toml = gw.dir.path().join("gateway.toml");

    // Unsandboxed, the probe reaches everything: the attempts below can succeed.
    let open = reach(
        &c,
        "open",
        json!({"path": secret, "write": files.path().join("written-by-open"), "address": address}),
    )
    .await;
    for what in ["read", "write", "connect"] {
        assert!(ok(&open, what), "{what}: {open}");
    }

    let boxed = reach(
        &c,
        "boxed",
        json!({"path": secret, "write": files.path().join("escaped"), "address": address}),
    )
    .await;
    for what in ["read", "connect"] {
        assert!(!ok(&boxed, what), "{what} escaped the sandbox: {boxed}");
    }
    // A write outside its paths lands in its own /tmp at most (the test's files are under
    // /tmp here), never on the host.
    assert!(
        !files.path().join("escaped").exists(),
        "the write escaped: {boxed}"
    );
    // Nor fedgate's own config, nor a system secret.
    for path in [
        gateway_toml.to_str().unwrap(),
        "/etc/shadow",
        "/root/.bashrc",
    ] {
        let v = reach(&c, "boxed", json!({ "path": path })).await;
        assert!(!ok(&v, "read"), "{path}: {v}");
    }

    // What it was given works: its read path, its write path, its own /tmp.
    let given = reach(
        &c,
        "boxed",
        json!({"path": allowed.join("doc.txt"), "write": out.join("result.txt")}),
    )
    .await;
    assert!(ok(&given, "read") && ok(&given, "write"), "{given}");
    assert_eq!(
        std::fs::read_to_string(out.join("result.txt")).unwrap(),
        "escaped"
    );
    let tmp = reach(&c, "boxed", json!({"write": "/tmp/scratch"})).await;
    assert!(ok(&tmp, "write"), "{tmp}");
    let refused = reach(&c, "boxed", json!({"write": allowed.join("changed")})).await;
    assert!(
        !ok(&refused, "write"),
        "a read path is read-only: {refused}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandboxed_server_is_held_to_its_memory_limit() {
    let config = format!(
        "{}[upstreams.tight.sandbox]\nmemory_mb = 300\n",
        stdio_upstream("tight", &[], "")
    );
    let gw = Gateway::start(&config);
    let c = connect_legacy(&gw.url, TestClient::new()).await;
    let small = call(&c, "tight__huge", json!({"bytes": 1024}))
        .await
        .unwrap();
    assert_ne!(small.is_error, Some(true), "{small:?}");
    // 256 MiB of text and its JSON copy do not fit in 300 MiB of address space.
    let big = call(&c, "tight__huge", json!({"bytes": 256 << 20}))
        .await
        .unwrap();
    let said = first_text(&big);
    assert_eq!(big.is_error, Some(true), "{said}");
    // The process died of it (unlimited, the answer would be refused as too long instead).
    let plan: Value = serde_json::from_str(&said).unwrap();
    let code = plan["errors"][0]["code"].as_str().unwrap_or_default();
    assert!(
        ["upstream_closed", "upstream_unavailable"].contains(&code),
        "the limit, not another bound, stopped it: {said}"
    );
}

#[test]
fn a_sandbox_naming_a_path_that_does_not_exist_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("g.toml");
    let text = format!(
        "{}[upstreams.boxed.sandbox]\nread = [\"/surely/not/here\"]\nwrite = [\"relative/dir\"]\n\
         memory_mb = 0\n",
        stdio_upstream("boxed", &[], "cwd = \"/\"")
    );
    std::fs::write(&cfg, text).unwrap();
    let out = std::process::Command::new(FEDGATE)
        .args(["check", cfg.to_str().unwrap()])
        .env("FEDGATE_LOG", "warn")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    for expected in [
        "sandbox read path `/surely/not/here` does not exist",
        "sandbox write path `relative/dir` must be absolute",
        "sandbox `memory_mb` must be at least 1",
        "working directory `/` is not among its sandbox's",
    ] {
        assert!(said.contains(expected), "{expected}: {said}");
    }
}
