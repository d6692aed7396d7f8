//! The console's tool runner in a real headless Chromium: pick a configured identity, see the
//! tools it may call, fill the form made from a tool's input schema, run it through the whole
//! pipeline, and read the result, its plan and its call record.

use crate::common;

use common::{browser::Browser, *};
use serde_json::json;
use sha2::{Digest, Sha256};

const ADMIN_TOKEN: &str = "runner-admin-token-test-only";
const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");

fn gateway() -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("admin.token");
    std::fs::write(&token, ADMIN_TOKEN).expect("token file");
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\ntiers_dir = {TIERS:?}\n\n[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"file:{}\"\n\n\
             [auth]\nanonymous = true\nanonymous_roles = [\"all\"]\n\
             [[auth.api_keys]]\nname = \"rita\"\nsha256 = \"{}\"\nroles = [\"reviewer\"]\n\n\
             [roles.all]\ntools = [\"*\"]\n[roles.reviewer]\ntools = [\"fedgate/approve\"]\n\n{}{}\
             [upstreams.notes.tools.file_ticket]\napproval = \"plan\"\napprovers = [\"reviewer\"]\n",
            token.display(),
            hex::encode(Sha256::digest(b"rita-key")),
            stdio_upstream("demo", &[], ""),
            stdio_upstream("notes", &[], "tier = \"high\""),
        ),
    )
    .expect("config");
    Gateway::start_file(&cfg, dir)
}

/// Chooses `value` in the select `id` as a user would (the page listens for `change`).
async fn choose(browser: &Browser, id: &str, value: &str) {
    browser
        .js(&format!(
            "const s = document.getElementById({id:?}); s.value = {value:?}; s.dispatchEvent(new Event('change')); return 1"
        ))
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tool_runner_calls_through_the_pipeline_as_a_chosen_identity() {
    let gw = gateway();
    let admin = gw.admin.clone().expect("admin listener");
    let browser = Browser::start().await;
    browser.goto(&format!("{admin}/console")).await;
    browser.type_into("#token", ADMIN_TOKEN).await;
    browser.click("#login-submit").await;
    let identities = browser
        .until(
            "the configured identities",
            "(() => { const o = [...document.querySelectorAll('#r-identity option')].map(o => o.value); return o.length >= 3 ? o : null })()",
        )
        .await;
    assert_eq!(identities, json!(["operator", "anonymous", "rita"]));

    // Rita (a reviewer) sees only the approve tool: the list is her tools/list.
    choose(&browser, "r-identity", "rita").await;
    browser
        .until(
            "rita's tools",
            "(() => { const o = [...document.querySelectorAll('#r-tool option')].map(o => o.value); return o.length === 1 && o[0] === 'fedgate__approve' ? o : null })()",
        )
        .await;

    // Anonymous (role `all`) runs demo__echo from a form made of its schema.
    choose(&browser, "r-identity", "anonymous").await;
    browser
        .until(
            "anonymous's tools",
            "[...document.querySelectorAll('#r-tool option')].some(o => o.value === 'demo__echo') || null",
        )
        .await;
    choose(&browser, "r-tool", "demo__echo").await;
    browser
        .until(
            "the form",
            "document.getElementById('r-arg-text') !== null || null",
        )
        .await;
    browser.type_into("#r-arg-text", "from the console").await;
    browser.click("#r-run").await;
    let result = browser
        .until(
            "the result",
            "(() => { const t = document.getElementById('r-result').textContent; return t.includes('echo: from the console') ? t : null })()",
        )
        .await;
    assert!(result.to_string().contains("echo: from the console"));
    let record = browser
        .until(
            "the call record",
            "(() => { const t = document.getElementById('r-record').textContent; return t.includes('correlation_id') ? JSON.parse(t) : null })()",
        )
        .await;
    assert_eq!(record["identity"], "anonymous", "{record}");
    assert_eq!(record["name"], "demo__echo", "{record}");
    assert_eq!(record["outcome"], "ok", "{record}");

    // A write that needs a reviewer: held, and the runner shows the plan that says so.
    choose(&browser, "r-tool", "notes__file_ticket").await;
    browser
        .until(
            "the ticket form",
            "document.getElementById('r-arg-priority') !== null || null",
        )
        .await;
    browser.type_into("#r-arg-title", "Printer on fire").await;
    choose(&browser, "r-arg-priority", "\"high\"").await;
    browser.click("#r-run").await;
    let plan = browser
        .until(
            "the approval plan",
            "(() => { const t = document.getElementById('r-plan').textContent; return t.includes('fedgate__approve') ? JSON.parse(t) : null })()",
        )
        .await;
    assert_eq!(plan["status"], "ok", "{plan}");
    assert_eq!(
        plan["next_actions"][0]["tool"], "fedgate__approve",
        "{plan}"
    );
    assert_eq!(plan["next_actions"][0]["confirm"], true, "{plan}");

    // The same API refuses what the page never offers: an identity the config does not name.
    let r = reqwest::Client::new()
        .post(format!("{admin}/admin/tools/call"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"as": "mallory", "tool": "demo__echo", "arguments": {}}))
        .send()
        .await
        .expect("admin");
    assert_eq!(r.status(), 404);
    let r = reqwest::Client::new()
        .post(format!("{admin}/admin/tools/call"))
        .json(&json!({"as": "operator", "tool": "demo__echo"}))
        .send()
        .await
        .expect("admin");
    assert_eq!(r.status(), 401, "no token, no call");
}
