//! The testkit answers as the tests expect. Having an integration test also makes `cargo test`
//! build the `fedgate-testkit` executable itself, which fedgate's tests start.

use std::process::Command;

#[test]
fn it_names_the_servers_it_runs() {
    let out = Command::new(env!("CARGO_BIN_EXE_fedgate-testkit"))
        .arg("--help")
        .output()
        .expect("run fedgate-testkit");
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for server in ["conformance-fixture", "demo-upstream", "demo-guardrail"] {
        assert!(help.contains(server), "{server} missing from:\n{help}");
    }
}

#[test]
fn an_unknown_server_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_fedgate-testkit"))
        .arg("no-such-server")
        .output()
        .expect("run fedgate-testkit");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-server"));
}
