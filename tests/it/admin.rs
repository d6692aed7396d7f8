//! The admin API on its own listener: token required, upstream states, breaker reset, accepting
//! a held-back tool definition, and the effective config without secrets.

use crate::common;

use common::*;

const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");
const ADMIN_TOKEN: &str = "admin-token-test-only";
const JWT_SECRET: &str = "jwt-secret-test-only";
const CRED: &str = "upstream-credential-test-only";

async fn admin(
    gw: &Gateway,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, String) {
    let base = gw.admin.clone().expect("admin listener in the ready line");
    let mut rb = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"));
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let r = rb.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_api() {
    let config = format!(
        "[gateway]\ntiers_dir = {TIERS:?}\n\n[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"env:FEDGATE_ADMIN_TOKEN\"\n\n\
         [auth]\nanonymous = true\nanonymous_roles = [\"all\"]\n[auth.jwt]\nhs256_secret = \"env:JWT_SECRET\"\n\n\
         [roles.all]\ntools = [\"*\"]\n\n[credentials.c]\nclass = \"internal\"\nsource = \"env:CRED\"\n\n\
         [upstreams.remote]\nkind = \"http\"\nurl = \"http://ops:url-password-test-only@127.0.0.1:9/mcp?token=query-token-test-only&region=eu\"\nheaders = {{ \"x-api-key\" = \"header-literal-test-only\", \"x-ref\" = \"env:SOME_REF\" }}\n\n{}",
        stdio_upstream(
            "p",
            &[],
            "tier = \"medium\"\nera = \"legacy\"\nwritable = [\"evolve\"]\ncredential = \"c\"\n\
             breaker = { consecutive_failures = 1, cooldown_ms = 600000, count_is_error = true }"
        )
    );
    let gw = Gateway::start_env(
        &config,
        &[
            ("FEDGATE_ADMIN_TOKEN", ADMIN_TOKEN),
            ("JWT_SECRET", JWT_SECRET),
            ("CRED", CRED),
        ],
    );
    // No token, no admin.
    let base = gw.admin.clone().unwrap();
    let r = reqwest::get(format!("{base}/admin/upstreams"))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let (status, body) = admin(&gw, reqwest::Method::GET, "/admin/upstreams", None).await;
    assert_eq!(status, 200);
    let ups: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ups["p"]["phase"], "ready", "{body}");

    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;

    // Breaker: one isError (counted here) opens the tool's; the admin reset closes it again.
    call(&client, "p__fail", serde_json::json!({}))
        .await
        .unwrap();
    let err = call(&client, "p__fail", serde_json::json!({}))
        .await
        .refused();
    assert!(err.contains("breaker_open"), "{err}");
    let (status, _) = admin(
        &gw,
        reqwest::Method::POST,
        "/admin/upstreams/p/breaker/reset",
        None,
    )
    .await;
    assert_eq!(status, 200);
    let again = call(&client, "p__fail", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(
        again.is_error,
        Some(true),
        "the tool is called again: {again:?}"
    );

    // Pinning: a changed definition is held back until accepted here.
    let before = *seen.tool_changes.lock();
    call(&client, "p__evolve", serde_json::json!({}))
        .await
        .unwrap();
    wait_for(&seen.tools_changed, "list_changed after evolve", || {
        *seen.tool_changes.lock() > before
    })
    .await;
    assert!(
        call(&client, "p__echo", serde_json::json!({"text": "x"}))
            .await
            .is_err(),
        "held back"
    );
    let (_, pins) = admin(&gw, reqwest::Method::GET, "/admin/pins", None).await;
    let pins: serde_json::Value = serde_json::from_str(&pins).unwrap();
    let held = pins
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["item"] == "echo")
        .expect("echo held back");
    let fingerprint = held["fingerprint"].as_str().unwrap().to_owned();
    let (status, body) = admin(
        &gw,
        reqwest::Method::POST,
        "/admin/pins/accept",
        Some(serde_json::json!({"upstream": "p", "tool": "echo", "fingerprint": "wrong"})),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let before = *seen.tool_changes.lock();
    let (status, body) = admin(
        &gw,
        reqwest::Method::POST,
        "/admin/pins/accept",
        Some(serde_json::json!({"upstream": "p", "tool": "echo", "fingerprint": fingerprint})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    wait_for(&seen.tools_changed, "list_changed after accepting", || {
        *seen.tool_changes.lock() > before
    })
    .await;
    assert_eq!(
        first_text(
            &call(&client, "p__echo", serde_json::json!({"text": "v2"}))
                .await
                .unwrap()
        ),
        "echo: v2"
    );

    // The effective config: names and references, never secret values.
    let (status, cfg) = admin(&gw, reqwest::Method::GET, "/admin/config", None).await;
    assert_eq!(status, 200);
    assert!(
        cfg.contains("\"name\":\"p\"") && cfg.contains("\"class\":\"internal\""),
        "{cfg}"
    );
    assert!(
        cfg.contains("http://redacted@127.0.0.1:9/mcp?token=redacted&region=eu"),
        "{cfg}"
    );
    // Every field of an upstream shows (nobody keeps a list of them); what may hold a
    // secret shows only as a reference.
    let dump: serde_json::Value = serde_json::from_str(&cfg).unwrap();
    let remote = dump["upstreams"]
        .as_array()
        .and_then(|u| u.iter().find(|u| u["name"] == "remote"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        remote["transport"]["headers"]["x-ref"], "env:SOME_REF",
        "{remote}"
    );
    assert_eq!(
        remote["transport"]["headers"]["x-api-key"], "<redacted>",
        "{remote}"
    );
    assert_eq!(
        (remote["peer"].as_bool(), remote["tls"].is_null()),
        (Some(false), true),
        "{remote}"
    );
    assert_eq!(dump["gateway"]["tls"], false, "{dump}");
    for secret in [
        ADMIN_TOKEN,
        JWT_SECRET,
        CRED,
        "url-password-test-only",
        "query-token-test-only",
        "header-literal-test-only",
    ] {
        assert!(!cfg.contains(secret), "`{secret}` in the config dump");
        assert!(!gw.stderr().contains(secret), "`{secret}` in the log");
    }
    client.cancel().await.unwrap();
}
