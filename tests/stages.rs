//! Stage-gated tool sets (`[stages.NAME]`): what is built so far — the config and its checks.

mod common;

use std::process::Command;

use common::*;

#[test]
fn config_errors_of_stages_point_at_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("st.toml");
    std::fs::write(
        &path,
        "[roles.reviewer]\ntools = [\"*\"]\n\n[stages.research]\ninitial = \"collecting\"\n\
         [stages.research.states.collecting]\ntools = [\"demo/echo\"]\n\
         [stages.research.states.decided]\ntools = [\"demo/add\"]\n\
         [[stages.research.transitions]]\nfrom = \"collecting\"\nto = \"decided\"\n\
         roles = [\"reviewer\", \"ghost\"]\nreason = true\n\
         [[stages.research.transitions]]\nfrom = \"decided\"\nto = \"archived\"\n\n\
         [stages.other]\ninitial = \"nowhere\"\n[stages.other.states.a]\n",
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
        "st.toml:13: stages `research`: transition to `decided`: unknown role `ghost` (roles: reviewer)",
        "st.toml:17: stages `research`: to `archived` is no state (states: collecting, decided)",
        "st.toml:20: stages `other`: initial `nowhere` is no state (states: a)",
    ] {
        assert!(text.contains(want), "no `{want}` in:\n{text}");
    }
}
