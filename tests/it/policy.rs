//! Identity and access (F5) through a real fedgate: API keys, JWT (HS256, RS256 from a JWKS
//! file), roles filtering lists and refusing calls without revealing what exists, 401s.

use crate::common;

use std::process::Command;

use base64::Engine;
use common::*;
use jsonwebtoken::{EncodingKey, Header, encode};
use sha2::{Digest, Sha256};

const READER_KEY: &str = "fgk_reader_0123456789";
const ADMIN_KEY: &str = "fgk_admin_9876543210";
const JWT_SECRET: &str = "jwt-test-secret-not-for-production";

fn sha(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// An RSA key pair made with openssl: (private PEM, JWKS JSON with the public key).
fn rsa_keypair(dir: &std::path::Path, kid: &str) -> (Vec<u8>, serde_json::Value) {
    let pem = dir.join(format!("{kid}.pem"));
    let ok = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&pem)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "openssl genpkey: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let modulus = Command::new("openssl")
        .args(["rsa", "-noout", "-modulus", "-in"])
        .arg(&pem)
        .output()
        .unwrap();
    let hexmod = String::from_utf8(modulus.stdout).unwrap();
    let n = hex::decode(hexmod.trim().trim_start_matches("Modulus=")).unwrap();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let jwk = serde_json::json!({"kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
        "n": b64.encode(n), "e": b64.encode([1u8, 0, 1])});
    (std::fs::read(&pem).unwrap(), jwk)
}

fn config(jwks_file: &str) -> String {
    format!(
        r#"[auth]
[[auth.api_keys]]
name = "reader-bot"
sha256 = "{reader}"
roles = ["reader"]

[[auth.api_keys]]
name = "admin-bot"
sha256 = "{admin}"
roles = ["admin"]

[auth.jwt]
hs256_secret = "env:FEDGATE_TEST_JWT_SECRET"
jwks_file = "{jwks_file}"
issuer = "https://idp.test"
audience = "fedgate"

[roles.reader]
tools = ["demo__echo", "demo__add"]
resources = ["demo://readme"]

[roles.admin]
tools = ["*"]
prompts = ["*"]
resources = ["*"]

{demo}"#,
        reader = sha(READER_KEY),
        admin = sha(ADMIN_KEY),
        demo = stdio_upstream("demo", &[], "")
    )
}

struct Setup {
    gw: Gateway,
    rsa_pem: Vec<u8>,
    other_pem: Vec<u8>,
    _dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (rsa_pem, jwk) = rsa_keypair(dir.path(), "k1");
    let (other_pem, _) = rsa_keypair(dir.path(), "k2");
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, serde_json::json!({"keys": [jwk]}).to_string()).unwrap();
    let gw = Gateway::start_env(
        &config(jwks.to_str().unwrap()),
        &[("FEDGATE_TEST_JWT_SECRET", JWT_SECRET)],
    );
    Setup {
        gw,
        rsa_pem,
        other_pem,
        _dir: dir,
    }
}

fn claims(roles: &[&str], exp_offset: i64, aud: &str) -> serde_json::Value {
    serde_json::json!({"sub": "alice", "iss": "https://idp.test", "aud": aud, "roles": roles,
        "exp": (unix_now() as i64 + exp_offset), "nbf": unix_now() - 5})
}

/// POSTs an initialize with the given Authorization header; returns status and WWW-Authenticate.
async fn raw_status(url: &str, auth: Option<&str>) -> (u16, String) {
    let mut rb = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"no.such.tool"}}"#);
    if let Some(a) = auth {
        rb = rb.header("authorization", a);
    }
    let r = rb.send().await.unwrap();
    let www = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (r.status().as_u16(), www)
}

#[tokio::test(flavor = "multi_thread")]
async fn unauthenticated_and_invalid_credentials_get_401() {
    let s = setup();
    let url = &s.gw.url;
    // No credentials and an unknown tool: authentication answers first.
    let (status, www) = raw_status(url, None).await;
    assert_eq!(status, 401);
    assert!(www.starts_with("Bearer realm=\"fedgate\""), "{www}");
    let (status, www) = raw_status(url, Some("Bearer fgk_unknown_key")).await;
    assert_eq!(status, 401);
    assert!(www.contains("error=\"invalid_token\""), "{www}");

    let expired = hs256(claims(&["reader"], -60, "fedgate"), JWT_SECRET);
    let wrong_aud = hs256(claims(&["reader"], 600, "someone-else"), JWT_SECRET);
    let bad_sig = hs256(claims(&["reader"], 600, "fedgate"), "not-the-secret");
    let rs_other = encode(
        &Header {
            kid: Some("k1".into()),
            ..Header::new(jsonwebtoken::Algorithm::RS256)
        },
        &claims(&["reader"], 600, "fedgate"),
        &EncodingKey::from_rsa_pem(&s.other_pem).unwrap(),
    )
    .unwrap();
    // A token that names no person is no one: 401, not one shared `jwt` identity.
    let with_sub = |sub: serde_json::Value| {
        let mut c = claims(&["reader"], 600, "fedgate");
        match sub {
            serde_json::Value::Null => c.as_object_mut().unwrap().remove("sub"),
            v => c.as_object_mut().unwrap().insert("sub".into(), v),
        };
        hs256(c, JWT_SECRET)
    };
    for (token, why) in [
        (expired, "expired"),
        (wrong_aud, "wrong audience"),
        (bad_sig, "bad signature"),
        (rs_other, "bad signature"),
        (with_sub(serde_json::Value::Null), "claim `sub` is missing"),
        (with_sub(serde_json::json!("")), "claim `sub` is empty"),
        (
            with_sub(serde_json::json!("a".repeat(10 * 1024))),
            "claim `sub` is longer than 256 bytes",
        ),
        (
            with_sub(serde_json::json!("al\u{7}ice")),
            "claim `sub` holds control characters",
        ),
        (
            with_sub(serde_json::json!(42)),
            "claim `sub` is not a string",
        ),
    ] {
        let (status, www) = raw_status(url, Some(&format!("Bearer {token}"))).await;
        assert_eq!(status, 401, "{why}");
        assert!(www.contains(why), "{why}: {www}");
    }
    // Credentials never reach the logs.
    let log = s.gw.stderr();
    for secret in [READER_KEY, ADMIN_KEY, JWT_SECRET, "fgk_unknown_key"] {
        assert!(!log.contains(secret), "secret {secret} in the log");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn roles_filter_lists_and_refusals_do_not_reveal_tools() {
    let s = setup();
    let reader = connect_with_token(&s.gw.url, READER_KEY, TestClient::new())
        .await
        .unwrap();
    let tools: Vec<String> = reader
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(tools, vec!["demo__add", "demo__echo"]);
    assert!(reader.peer().list_all_prompts().await.unwrap().is_empty());
    let resources = reader.peer().list_all_resources().await.unwrap();
    assert_eq!(
        resources.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>(),
        vec!["demo://readme"]
    );
    let r = call(&reader, "demo__echo", serde_json::json!({"text": "reader"}))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "echo: reader");

    // An existing tool the role does not grant and a tool that does not exist look the same.
    let hidden = call(&reader, "demo__crash", serde_json::json!({}))
        .await
        .refused();
    let missing = call(&reader, "demo__crush", serde_json::json!({}))
        .await
        .refused();
    assert!(hidden.contains("unknown tool `demo__crash`"), "{hidden}");
    assert_eq!(
        without_correlation_ids(&hidden.replace("crash", "X")),
        without_correlation_ids(&missing.replace("crush", "X"))
    );
    assert!(
        hidden.contains(r#""closest":["demo__add","demo__echo"]"#),
        "suggests only granted tools: {hidden}"
    );

    let admin = connect_with_token(&s.gw.url, ADMIN_KEY, TestClient::new())
        .await
        .unwrap();
    assert!(admin.peer().list_all_tools().await.unwrap().len() >= 10);
    reader.cancel().await.unwrap();
    admin.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn jwt_hs256_and_rs256_identities() {
    let s = setup();
    let hs = hs256(claims(&["reader"], 600, "fedgate"), JWT_SECRET);
    let client = connect_with_token(&s.gw.url, &hs, TestClient::new())
        .await
        .unwrap();
    let tools = client.peer().list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 2, "reader role from the token's roles claim");
    client.cancel().await.unwrap();

    let rs = encode(
        &Header {
            kid: Some("k1".into()),
            ..Header::new(jsonwebtoken::Algorithm::RS256)
        },
        &claims(&["admin"], 600, "fedgate"),
        &EncodingKey::from_rsa_pem(&s.rsa_pem).unwrap(),
    )
    .unwrap();
    let client = connect_with_token(&s.gw.url, &rs, TestClient::new())
        .await
        .unwrap();
    let r = call(
        &client,
        "demo__write_note",
        serde_json::json!({"key": "a", "value": "b"}),
    )
    .await
    .unwrap();
    assert_eq!(first_text(&r), "stored a");
    client.cancel().await.unwrap();
}

#[test]
fn auth_config_errors_have_lines() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[auth]\n[[auth.api_keys]]\nname = \"x\"\nsha256 = \"nothex\"\nroles = [\"ghost\"]\n[auth.jwt]\nhs256_secret = \"plaintext-secret\"\n",
    )
    .unwrap();
    let out = Command::new(FEDGATE)
        .args(["check", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(":4: API key `x`: sha256 must be 64 hex digits"),
        "{err}"
    );
    assert!(err.contains(":5: unknown role `ghost`"), "{err}");
    assert!(
        err.contains(":7: auth.jwt.hs256_secret: secrets are references"),
        "{err}"
    );
    assert!(
        !err.contains("plaintext-secret"),
        "the value is never echoed: {err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn oauth_protected_resource_metadata_is_served_and_announced() {
    let config = format!(
        "[auth]\n[auth.oauth]\nresource = \"https://gw.example.com/mcp\"\nauthorization_servers = [\"https://idp.example.com\"]\nscopes = [\"mcp:tools\"]\n\n{}",
        stdio_upstream("demo", &[], "")
    );
    let gw = Gateway::start(&config);
    let (status, www) = raw_status(&gw.url, None).await;
    assert_eq!(status, 401);
    assert!(
        www.contains(
            r#"resource_metadata="https://gw.example.com/.well-known/oauth-protected-resource/mcp""#
        ),
        "{www}"
    );
    let meta: serde_json::Value = reqwest::get(format!(
        "{}/.well-known/oauth-protected-resource/mcp",
        gw.base
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(meta["resource"], "https://gw.example.com/mcp");
    assert_eq!(meta["authorization_servers"][0], "https://idp.example.com");
    assert_eq!(meta["scopes_supported"][0], "mcp:tools");
    assert_eq!(meta["bearer_methods_supported"][0], "header");
}
