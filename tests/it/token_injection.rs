//! Token injection (F10) through a real fedgate: an OAuth token endpoint and upstreams that show
//! what credential reached them. The client's own token never reaches an upstream; secrets never
//! reach the logs or the audit file.

use crate::common;

use std::{
    convert::Infallible,
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
};

use base64::Engine;
use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

const CLIENT_KEY: &str = "fgk_downstream_client_key";
const CC_SECRET: &str = "cc-client-secret-value";
const SUBJECT: &str = "subject-token-of-the-service";

/// A token endpoint: issues `tok-1`, `tok-2`, … (client credentials) and `xtok-…` (token
/// exchange), and records each grant.
struct TokenEndpoint {
    url: String,
    issued: Arc<AtomicU32>,
    grants: Arc<Mutex<Vec<String>>>,
}

async fn token_endpoint() -> TokenEndpoint {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    let issued = Arc::new(AtomicU32::new(0));
    let grants = Arc::new(Mutex::new(Vec::new()));
    let (i, g) = (issued.clone(), grants.clone());
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (i, g) = (i.clone(), g.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: http::Request<hyper::body::Incoming>| {
                        let (i, g) = (i.clone(), g.clone());
                        async move {
                            let auth = req
                                .headers()
                                .get("authorization")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_owned();
                            let want = format!(
                                "Basic {}",
                                base64::engine::general_purpose::STANDARD
                                    .encode(format!("fedgate:{CC_SECRET}"))
                            );
                            let body = String::from_utf8(
                                req.into_body().collect().await.unwrap().to_bytes().to_vec(),
                            )
                            .unwrap();
                            if auth != want {
                                let mut r = http::Response::new(Full::new(Bytes::from(
                                    "{\"error\":\"invalid_client\"}",
                                )));
                                *r.status_mut() = http::StatusCode::UNAUTHORIZED;
                                return Ok::<_, Infallible>(r);
                            }
                            // Client-credentials tokens are `tok-N` (N counts them);
                            // exchanged ones are `xtok-…`.
                            let token = if body.contains("token-exchange") {
                                format!("xtok-{}", g.lock().len())
                            } else {
                                format!("tok-{}", i.fetch_add(1, Ordering::SeqCst) + 1)
                            };
                            g.lock().push(body);
                            let json = format!(
                                "{{\"access_token\":\"{token}\",\"token_type\":\"Bearer\",\"expires_in\":3600}}"
                            );
                            Ok(http::Response::new(Full::new(Bytes::from(json))))
                        }
                    },
                );
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
            });
        }
    });
    TokenEndpoint {
        url,
        issued,
        grants,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn oauth_tokens_are_injected_cached_and_refreshed_on_401() {
    let endpoint = token_endpoint().await;
    let dir = tempfile::tempdir().unwrap();
    let accepted = dir.path().join("accepted-token");
    std::fs::write(&accepted, "tok-1").unwrap();
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
    let audit = dir.path().join("audit.jsonl");
    let config = format!(
        r#"[audit]
path = {audit:?}
full_arguments = true

[auth]
[[auth.api_keys]]
name = "client"
sha256 = "{key_hash}"
roles = ["all"]

[roles.all]
tools = ["*"]

[credentials.cc]
class = "internal"
oauth = {{ token_url = "{token_url}", client_id = "fedgate", client_secret = "env:CC_SECRET", scope = "mcp" }}

[credentials.te]
class = "internal"
oauth = {{ grant = "token_exchange", token_url = "{token_url}", client_id = "fedgate", client_secret = "env:CC_SECRET", subject_token = "env:SUBJECT_TOKEN", audience = "tools" }}

[upstreams.api]
kind = "http"
url = "{api_url}"
credential = "cc"

{local}"#,
        audit = audit.display().to_string(),
        key_hash = hex::encode(Sha256::digest(CLIENT_KEY.as_bytes())),
        token_url = endpoint.url,
        api_url = api.url,
        local = stdio_upstream(
            "local",
            &[],
            "credential = \"te\"\ncredential_env = \"MCP_TOKEN\""
        ),
    );
    let gw = Gateway::start_env(
        &config,
        &[("CC_SECRET", CC_SECRET), ("SUBJECT_TOKEN", SUBJECT)],
    );
    let client = connect_with_token(&gw.url, CLIENT_KEY, TestClient::new())
        .await
        .unwrap();

    let who = first_text(
        &call(&client, "api__whoami", serde_json::json!({}))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{:?}\n{}", endpoint.grants.lock(), gw.stderr())),
    );
    assert_eq!(
        who, "Bearer tok-1",
        "the injected token, not the client's key"
    );
    let issued = endpoint.issued.load(Ordering::SeqCst);
    call(&client, "api__whoami", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(
        endpoint.issued.load(Ordering::SeqCst),
        issued,
        "the cached token is reused"
    );

    // The upstream starts accepting another token: its 401 makes fedgate fetch a new one.
    std::fs::write(&accepted, format!("tok-{}", issued + 1)).unwrap();
    let who = first_text(
        &call(&client, "api__whoami", serde_json::json!({}))
            .await
            .unwrap(),
    );
    assert_eq!(
        who,
        format!("Bearer tok-{}", issued + 1),
        "refreshed once on 401"
    );

    // A burst of calls that meet a revoked token refreshes it once, not once per call.
    let before = endpoint.issued.load(Ordering::SeqCst);
    std::fs::write(&accepted, format!("tok-{}", before + 1)).unwrap();
    let burst = (0..8).map(|_| call(&client, "api__whoami", serde_json::json!({})));
    for r in futures::future::join_all(burst).await {
        assert_eq!(
            first_text(&r.unwrap()),
            format!("Bearer tok-{}", before + 1)
        );
    }
    assert_eq!(
        endpoint.issued.load(Ordering::SeqCst),
        before + 1,
        "one token fetched for the whole burst"
    );

    // Token exchange for a stdio upstream: the token arrives in its environment.
    let who = first_text(
        &call(&client, "local__whoami", serde_json::json!({}))
            .await
            .unwrap(),
    );
    assert!(who.starts_with("env xtok-"), "{who}");
    let grants = endpoint.grants.lock().clone();
    assert!(
        grants
            .iter()
            .any(|g| g.contains("grant_type=client_credentials") && g.contains("scope=mcp")),
        "{grants:?}"
    );
    assert!(
        grants.iter().any(
            |g| g.contains("token-exchange") && g.contains(&format!("subject_token={SUBJECT}"))
        ),
        "{grants:?}"
    );
    client.cancel().await.unwrap();

    let log = gw.stderr();
    let audit_text = std::fs::read_to_string(&audit).unwrap_or_default();
    for secret in [CLIENT_KEY, CC_SECRET, SUBJECT, "tok-1", "tok-2", "tok-3"] {
        assert!(!log.contains(secret), "`{secret}` in the gateway log");
        assert!(!audit_text.contains(secret), "`{secret}` in the audit log");
    }
}

#[test]
fn a_tier_never_gets_a_credential_class_it_may_not_receive() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\ntiers_dir = {:?}\n\n[credentials.gh]\nclass = \"sensitive\"\nsource = \"env:GH_TOKEN\"\n\n\
             [upstreams.ext]\nkind = \"stdio\"\ncommand = \"x\"\ntier = \"low\"\ncredential = \"gh\"\n",
            concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers")
        ),
    )
    .unwrap();
    let out = std::process::Command::new(FEDGATE)
        .args(["check", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("gateway.toml:12: upstream `ext`: trust tier `low` may not receive credential `gh` of class `sensitive`"),
        "{err}"
    );
}

/// A stdio upstream's `env` value may be a reference (`env:NAME`, `file:PATH`), resolved from
/// fedgate's environment at each start of the process; the config holds no secret.
#[tokio::test(flavor = "multi_thread")]
async fn stdio_env_values_may_be_secret_references() {
    let secret_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret_file.path(), "from-a-file\n").unwrap();
    let gw = Gateway::start_env(
        &format!(
            "{}{}",
            stdio_upstream(
                "a",
                &[],
                "env = { MCP_TOKEN = \"env:FEDGATE_TEST_UPSTREAM_SECRET\" }"
            ),
            stdio_upstream(
                "b",
                &[],
                &format!(
                    "env = {{ MCP_TOKEN = \"file:{}\" }}",
                    secret_file.path().display()
                )
            ),
        ),
        &[("FEDGATE_TEST_UPSTREAM_SECRET", "from-the-env")],
    );
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let a = call(&client, "a__whoami", serde_json::json!({}))
        .await
        .unwrap();
    let b = call(&client, "b__whoami", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(
        (first_text(&a), first_text(&b)),
        ("env from-the-env".to_owned(), "env from-a-file".to_owned())
    );
    client.cancel().await.unwrap();
}

/// The response limits of an upstream's tier bind its transport with an injected credential
/// too: an answer far over them is cut off at the transport, not read whole first.
#[tokio::test(flavor = "multi_thread")]
async fn response_limits_hold_with_an_injected_credential() {
    let dir = tempfile::tempdir().unwrap();
    let accepted = dir.path().join("accepted-token");
    std::fs::write(&accepted, "static-token").unwrap();
    std::fs::write(
        dir.path().join("bounded.toml"),
        "rank = 3\nwrites = \"always\"\ntrust_annotations = true\nmax_response_bytes = 65536\n\
         credential_classes = [\"internal\"]\n\
         [timeouts]\nread_ms = 30000\nwrite_ms = 30000\nlong_ms = 30000\n",
    )
    .unwrap();
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
    let config = format!(
        "[gateway]\ntiers_dir = {:?}\n[credentials.static]\nclass = \"internal\"\nsource = \"env:API_TOKEN\"\n\n\
         [upstreams.api]\nkind = \"http\"\nurl = \"{}\"\ncredential = \"static\"\ntier = \"bounded\"\n",
        dir.path(),
        api.url
    );
    let gw = Gateway::start_env(&config, &[("API_TOKEN", "static-token")]);
    let client = connect_legacy(&gw.url, TestClient::new()).await;
    let r = call(&client, "api__huge", serde_json::json!({"bytes": 1 << 20})).await;
    // Cut at the transport (2 × 64 KiB): the stream ends there. Read whole, it would have been
    // refused later by the size check after the read (`larger than 65536 bytes`).
    let refused = r.refused();
    assert!(
        refused.contains("closed the connection") && !refused.contains("65536"),
        "{refused}"
    );
    let ok = call(&client, "api__whoami", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(first_text(&ok), "Bearer static-token");
}
