//! Per-user upstream credentials (`per_user`) through a real fedgate, a real upstream that acts
//! as the person whose token comes with a call (`demo-upstream --user-tokens`), real rmcp
//! clients and the connect page over HTTP (reqwest standing in for the person's browser).

use crate::common;

use std::sync::Arc;

use common::*;
use rmcp::{
    ClientHandler, ErrorData as McpError, RoleClient,
    model::{
        ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, Implementation,
        ProtocolVersion,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");
const ALICE: &str = "fgk_alice_per_user_test_only";
const BOB: &str = "fgk_bob_per_user_test_only";
const CAROL: &str = "fgk_carol_per_user_test_only";
const ADMIN_TOKEN: &str = "admin-per-user-test-only";
const KEY: &str = "per-user-credential-key-test-only-0123456789";

struct Setup {
    gw: Gateway,
    _upstream: UrlProcess,
    tokens: std::path::PathBuf,
    /// Holds the config and the credential store (a restart finds them again).
    dir: tempfile::TempDir,
}

const ENV: [(&str, &str); 2] = [
    ("FG_CREDENTIAL_KEY", KEY),
    ("FEDGATE_ADMIN_TOKEN", ADMIN_TOKEN),
];

fn serve(dir: &std::path::Path) -> Gateway {
    serve_with(dir, &[])
}

fn serve_with(dir: &std::path::Path, env: &[(&str, &str)]) -> Gateway {
    let env: Vec<(&str, &str)> = ENV.iter().chain(env).copied().collect();
    Gateway::start_file_env(
        &dir.join("gateway.toml"),
        tempfile::tempdir().unwrap(),
        &env,
    )
}

fn config(upstream_url: &str) -> String {
    format!(
        "[gateway]\ntiers_dir = {TIERS:?}\ncredential_key = \"env:FG_CREDENTIAL_KEY\"\ninput_wait_ms = 20000\n\n\
         [flows]\ndir = \"flows\"\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"env:FEDGATE_ADMIN_TOKEN\"\n\n\
         [auth]\nanonymous = false\n\
         [[auth.api_keys]]\nname = \"alice\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\
         [[auth.api_keys]]\nname = \"bob\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\
         [[auth.api_keys]]\nname = \"carol\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\n\
         [roles.dev]\ntools = [\"*\"]\n\n\
         [credentials.gh_people]\nclass = \"user\"\nper_user = {{ kind = \"token\", hint = \"Your personal gh token\" }}\n\n\
         [upstreams.gh]\nkind = \"http\"\nurl = \"{upstream_url}\"\ncredential = \"gh_people\"\n",
        raw::sha(ALICE),
        raw::sha(BOB),
        raw::sha(CAROL),
    )
}

/// The upstream that acts as whoever a token of `tokens` (`person=token` lines) names.
fn gh_upstream(tokens: &std::path::Path) -> UrlProcess {
    UrlProcess::start(&[
        "demo-upstream",
        "--name",
        "gh",
        "--user-tokens",
        tokens.to_str().unwrap(),
        "--http",
        "127.0.0.1:0",
    ])
}

fn start() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice=gh-alice\nbob=gh-bob\ncarol=gh-carol\n").unwrap();
    let upstream = gh_upstream(&tokens);
    std::fs::write(dir.path().join("gateway.toml"), config(&upstream.url)).unwrap();
    std::fs::create_dir(dir.path().join("flows")).unwrap();
    std::fs::write(
        dir.path().join("flows/me.toml"),
        "id = \"me\"\ndescription = \"Who gh acts as for the run's caller\"\n\n\
         [[nodes]]\nid = \"who\"\ntool = \"gh__whoami\"\n\n\
         [outputs]\nwho = \"{{who.output}}\"\n",
    )
    .unwrap();
    let gw = serve(dir.path());
    Setup {
        gw,
        _upstream: upstream,
        tokens,
        dir,
    }
}

/// The connect link of a URL-required refusal, with its plan.
fn link_of(e: &rmcp::ServiceError) -> (String, Value) {
    let rmcp::ServiceError::McpError(e) = e else {
        panic!("not a JSON-RPC error: {e}");
    };
    assert_eq!(e.code.0, -32042, "{e:?}");
    let data = e.data.clone().unwrap();
    assert_eq!(data["reason"], "credential_required");
    let url = data["elicitations"][0]["url"].as_str().unwrap().to_owned();
    let plan = data["io.fedgate/orchestrated_plan"].clone();
    (url, plan)
}

/// What a person does in the browser: opens the link, shows who they are with their own
/// fedgate key (`proof`), pastes the token, submits.
async fn connect_in_browser(url: &str, proof: &str, token: &str) -> (u16, String) {
    let page = reqwest::get(url).await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let html = page.text().await.unwrap();
    assert!(html.contains("<form method=\"post\""), "{html}");
    let state = url.split("state=").nth(1).unwrap();
    let action = url.split('?').next().unwrap();
    let r = reqwest::Client::new()
        .post(action)
        .form(&[("state", state), ("proof", proof), ("token", token)])
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn admin(gw: &Gateway, method: reqwest::Method, path: &str) -> Value {
    let r = reqwest::Client::new()
        .request(method, format!("{}{path}", gw.admin.clone().unwrap()))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_person_connects_their_own_account_once_and_calls_run_as_them() {
    let s = start();
    let alice = connect_with_token(&s.gw.url, ALICE, TestClient::new())
        .await
        .unwrap();
    let bob = connect_with_token(&s.gw.url, BOB, TestClient::new())
        .await
        .unwrap();

    // No credential yet: a URL-required error with a link, and a blocked plan saying so.
    let e = call(&alice, "gh__whoami", json!({})).await.unwrap_err();
    let (alice_link, plan) = link_of(&e);
    let html = reqwest::get(&alice_link)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains("Your personal gh token"), "the hint: {html}");
    assert_eq!(plan["status"], "blocked");
    assert!(
        plan["errors"][0]["hint"]
            .as_str()
            .unwrap()
            .contains(&alice_link)
    );

    // Bad input on the page stores nothing.
    let (status, body) = connect_in_browser(&alice_link, ALICE, "has spaces in it").await;
    assert_eq!(status, 400, "{body}");
    let forged = alice_link.replace("state=", "state=00");
    let r = reqwest::get(&forged).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let other = alice_link.replace("/connect/gh?", "/connect/nope?");
    assert_eq!(reqwest::get(&other).await.unwrap().status().as_u16(), 404);

    let (status, body) = connect_in_browser(&alice_link, ALICE, "gh-alice").await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("gh-alice"));
    // Single use: the same link does not connect again (not even for someone else's token).
    let (status, body) = connect_in_browser(&alice_link, ALICE, "gh-bob").await;
    assert_eq!(status, 400);
    assert!(body.contains("used already"), "{body}");

    let r = call(&alice, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as alice");
    // Bob has his own link, and his calls act as him.
    let e = call(&bob, "gh__whoami", json!({})).await.unwrap_err();
    let (bob_link, _) = link_of(&e);
    assert_ne!(bob_link, alice_link);
    assert_eq!(connect_in_browser(&bob_link, BOB, "gh-bob").await.0, 200);
    let r = call(&bob, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as bob");
    let r = call(&alice, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as alice");

    // The admin API lists who connected what, never a token.
    let listed = admin(&s.gw, reqwest::Method::GET, "/admin/credentials").await;
    let owners: Vec<&str> = listed["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners, ["api_key:alice", "api_key:bob"]);
    assert!(!listed.to_string().contains("gh-alice"));

    // Revoked by an operator: alice is asked again; bob is untouched.
    let gone = admin(
        &s.gw,
        reqwest::Method::DELETE,
        "/admin/credentials/api_key:alice",
    )
    .await;
    assert_eq!(gone["revoked"], 1);
    link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(
        first_text(&call(&bob, "gh__whoami", json!({})).await.unwrap()),
        "acting as bob"
    );

    // The provider revokes bob's token (401 upstream): fedgate drops it and asks him again.
    std::fs::write(&s.tokens, "alice=gh-alice\ncarol=gh-carol\n").unwrap();
    let e = call(&bob, "gh__whoami", json!({})).await.unwrap_err();
    link_of(&e);
    let listed = admin(&s.gw, reqwest::Method::GET, "/admin/credentials").await;
    assert_eq!(
        listed["connections"].as_array().unwrap().len(),
        0,
        "{listed}"
    );

    // Nothing of a token reached the log.
    let log = s.gw.stderr();
    for t in ["gh-alice", "gh-bob"] {
        assert!(!log.contains(t), "a token in the log");
    }
    let m = s.gw.metrics_as(ALICE).await;
    assert!(
        m.contains("fedgate_user_credentials_total{event=\"connected\",upstream=\"gh\"} 2"),
        "{m}"
    );
    assert!(m.contains("fedgate_user_credentials_total{event=\"rejected\",upstream=\"gh\"} 1"));
}

/// A client that declares URL elicitation and, when asked, opens the link (as its human would)
/// and pastes `token`.
#[derive(Clone)]
struct UrlClient {
    /// The person's own fedgate key, which the page asks for.
    key: String,
    token: String,
    asked: Arc<parking_lot::Mutex<Vec<String>>>,
    /// What the operator does while the person is on the page: this config, then a reload
    /// (its file and the admin API's address).
    meanwhile: Option<(std::path::PathBuf, String, String)>,
}

impl ClientHandler for UrlClient {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.elicitation = Some(serde_json::from_value(json!({"url": {}})).unwrap());
        ClientConfig::new(caps, Implementation::new("url-client", "0"))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let ElicitRequestParams::UrlElicitationParams { url, .. } = params else {
            return Ok(serde_json::from_value(json!({"action": "decline"})).unwrap());
        };
        self.asked.lock().push(url.clone());
        if let Some((file, config, admin)) = &self.meanwhile {
            std::fs::write(file, config).unwrap();
            let r = reqwest::Client::new()
                .post(format!("{admin}/admin/reload"))
                .bearer_auth(ADMIN_TOKEN)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200);
        }
        let (status, _) = connect_in_browser(&url, &self.key, &self.token).await;
        assert_eq!(status, 200);
        Ok(serde_json::from_value(json!({"action": "accept"})).unwrap())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_with_url_elicitation_is_asked_on_the_call_and_the_call_runs_once_connected() {
    let mut s = start();
    let handler = UrlClient {
        key: CAROL.into(),
        token: "gh-carol".into(),
        asked: Arc::default(),
        meanwhile: None,
    };
    let asked = handler.asked.clone();
    let carol = url_client(&s.gw.url, CAROL, handler).await;
    let r = carol
        .peer()
        .call_tool(rmcp::model::CallToolRequestParams::new("gh__whoami"))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "acting as carol");
    assert_eq!(asked.lock().len(), 1);
    // Connected: the next call asks nothing.
    let r = carol
        .peer()
        .call_tool(rmcp::model::CallToolRequestParams::new("gh__whoami"))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "acting as carol");
    assert_eq!(asked.lock().len(), 1);
    drop(carol);

    // A restart keeps it (sealed in SQLite next to the config), and it is sealed there.
    let db = std::fs::read(s.dir.path().join("fedgate-credentials.db")).unwrap();
    assert!(
        !db.windows(8).any(|w| w == b"gh-carol"),
        "a token in the clear"
    );
    drop(std::mem::replace(&mut s.gw, serve(s.dir.path())));
    let again = connect_with_token(&s.gw.url, CAROL, TestClient::new())
        .await
        .unwrap();
    let r = call(&again, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as carol");

    // `fedgate__disconnect` forgets only the caller's own: bob's touches nothing of carol's.
    let bob = connect_with_token(&s.gw.url, BOB, TestClient::new())
        .await
        .unwrap();
    let r = call(&bob, "fedgate__disconnect", json!({})).await.unwrap();
    assert_eq!(r.structured_content.unwrap()["disconnected"], 0);
    let r = call(&again, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as carol");
    let r = call(&again, "fedgate__disconnect", json!({"upstream": "gh"}))
        .await
        .unwrap();
    assert_eq!(r.structured_content.unwrap()["disconnected"], 1);
    link_of(&call(&again, "gh__whoami", json!({})).await.unwrap_err());
}

/// A call that waited while its person connected runs from the top once they have: a reload
/// that took the tool from their roles meanwhile refuses it (the account stays connected), and
/// the upstream never sees it.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_waited_for_its_person_runs_only_if_their_roles_still_allow_it() {
    let s = start();
    let file = s.dir.path().join("gateway.toml");
    let narrowed = std::fs::read_to_string(&file).unwrap().replace(
        "[roles.dev]\ntools = [\"*\"]",
        "[roles.dev]\ntools = [\"fedgate/*\"]",
    );
    let handler = UrlClient {
        key: CAROL.into(),
        token: "gh-carol".into(),
        asked: Arc::default(),
        meanwhile: Some((file, narrowed, s.gw.admin.clone().unwrap())),
    };
    let carol = url_client(&s.gw.url, CAROL, handler).await;
    let r = carol
        .peer()
        .call_tool(rmcp::model::CallToolRequestParams::new("gh__whoami"))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let text = serde_json::to_string(&r).unwrap();
    assert!(!text.contains("acting as"), "the call ran: {text}");
    assert!(text.contains("credential_connected_not_allowed"), "{text}");
    let listed = admin(&s.gw, reqwest::Method::GET, "/admin/credentials").await;
    assert_eq!(
        listed["connections"][0]["owner"], "api_key:carol",
        "{listed}"
    );
    let m = reqwest::get(format!("{}/metrics", s.gw.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let calls = |outcome: &str| {
        m.lines().any(|l| {
            l.starts_with("fedgate_calls_total{")
                && l.contains("upstream=\"gh\"")
                && l.contains(&format!("outcome=\"{outcome}\""))
        })
    };
    assert!(!calls("ok"), "a gh call ran: {m}");
}

/// A handshake-era client that declares URL elicitation, served by `handler`.
async fn url_client(
    url: &str,
    key: &str,
    handler: UrlClient,
) -> rmcp::service::RunningService<RoleClient, UrlClient> {
    use rmcp::{
        ServiceExt,
        transport::{
            StreamableHttpClientTransport,
            streamable_http_client::StreamableHttpClientTransportConfig,
        },
    };
    let cfg =
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(key.to_owned());
    handler
        .serve(StreamableHttpClientTransport::from_config(cfg))
        .await
        .unwrap()
}

/// A stateless-era (2026-07-28) client gets the input-required form: the URL request and a
/// sealed state; its retry runs the call once the person has connected.
#[tokio::test(flavor = "multi_thread")]
async fn a_stateless_era_client_gets_the_url_request_as_input_required() {
    use rmcp::{
        ClientServiceExt,
        model::{CallToolRequestParams, CallToolResponse, InputResponses},
        service::ClientLifecycleMode,
        transport::{
            StreamableHttpClientTransport,
            streamable_http_client::StreamableHttpClientTransportConfig,
        },
    };
    let s = start();
    let modern = |key: &str, handler: UrlClient| {
        let cfg = StreamableHttpClientTransportConfig::with_uri(s.gw.url.clone())
            .auth_header(key.to_owned());
        handler.serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(cfg),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
    };
    let handler = UrlClient {
        key: CAROL.into(),
        token: "gh-carol".into(),
        asked: Arc::default(),
        meanwhile: None,
    };
    let asked = handler.asked.clone();
    let carol = modern(CAROL, handler).await.unwrap();

    // By hand first: the question, then a decline runs nothing.
    let first = carol
        .peer()
        .call_tool_once(CallToolRequestParams::new("gh__whoami"))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(ir) = first else {
        panic!("expected input_required, got {first:?}");
    };
    let asks = serde_json::to_value(ir.input_requests.as_ref().unwrap()).unwrap();
    let q = &asks["fedgate-connect"];
    assert_eq!(q["method"], "elicitation/create", "{asks}");
    assert_eq!(q["params"]["mode"], "url");
    let url = q["params"]["url"].as_str().unwrap().to_owned();
    assert!(url.contains("/connect/gh?state="), "{url}");
    let state = ir.request_state.clone().unwrap();
    let answer = |action: &str| -> InputResponses {
        serde_json::from_value(json!({"fedgate-connect": {"action": action}})).unwrap()
    };
    let err = carol
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("gh__whoami")
                .with_input_responses(answer("decline"))
                .with_request_state(state.clone()),
        )
        .await;
    let text = format!("{err:?}");
    assert!(text.contains("credential_declined"), "{text}");

    // Bob cannot answer carol's question: he is asked his own.
    let bob = modern(
        BOB,
        UrlClient {
            key: BOB.into(),
            token: "gh-bob".into(),
            asked: Arc::default(),
            meanwhile: None,
        },
    )
    .await
    .unwrap();
    let stolen = bob
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("gh__whoami")
                .with_input_responses(answer("accept"))
                .with_request_state(state),
        )
        .await
        .unwrap();
    assert!(
        matches!(stolen, CallToolResponse::InputRequired(_)),
        "{stolen:?}"
    );

    // rmcp's client drives the rounds: its human connects on the page, the retry runs as carol.
    let r = carol
        .call_tool(CallToolRequestParams::new("gh__whoami"))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "acting as carol");
    assert_eq!(asked.lock().len(), 1);
    let r = carol
        .call_tool(CallToolRequestParams::new("gh__whoami"))
        .await
        .unwrap();
    assert_eq!(first_text(&r), "acting as carol");
    assert_eq!(asked.lock().len(), 1, "connected once");
}

/// Two replicas on one Redis: a link made by one connects on the other, once; both act as the
/// person; a revoke on one holds on both; Redis holds only sealed values.
#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_share_credentials_through_redis() {
    let redis = common::stores::RedisServer::start();
    let s = start();
    let cfg = s.dir.path().join("gateway.toml");
    let shared = format!(
        "{}\n[cluster]\nredis = {:?}\n",
        std::fs::read_to_string(&cfg).unwrap(),
        redis.url()
    );
    std::fs::write(&cfg, shared).unwrap();
    let (a, b) = (serve(s.dir.path()), serve(s.dir.path()));
    let on_a = connect_with_token(&a.url, ALICE, TestClient::new())
        .await
        .unwrap();
    let on_b = connect_with_token(&b.url, ALICE, TestClient::new())
        .await
        .unwrap();

    let (link, _) = link_of(&call(&on_a, "gh__whoami", json!({})).await.unwrap_err());
    let host = |u: &str| u.split("/mcp").next().unwrap().to_owned();
    let link_on_b = link.replace(&host(&a.url), &host(&b.url));
    assert_ne!(link_on_b, link);
    assert_eq!(
        connect_in_browser(&link_on_b, ALICE, "gh-alice").await.0,
        200
    );
    // Used on b: refused on a too.
    let (status, body) = connect_in_browser(&link, ALICE, "gh-alice").await;
    assert_eq!(status, 400);
    assert!(body.contains("used already"), "{body}");
    for c in [&on_a, &on_b] {
        let r = call(c, "gh__whoami", json!({})).await.unwrap();
        assert_eq!(first_text(&r), "acting as alice");
    }
    let stored = redis.query(&["HGETALL", "fedgate:user-credentials"]).await;
    let stored: Vec<String> = redis::from_redis_value(stored).unwrap();
    assert_eq!(stored.len(), 2, "alice's one credential: {stored:?}");
    assert!(
        stored.iter().all(|v| !v.contains("gh-alice")),
        "a token in the clear"
    );
    // Used on both replicas: a's list shows the use, from the shared store.
    let listed: Value = reqwest::Client::new()
        .get(format!("{}/admin/credentials", a.admin.clone().unwrap()))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let used = listed["connections"][0]["last_used_ms"].as_u64();
    assert!(used.is_some_and(|t| t > 0), "{listed}");

    // Revoked through b's admin API: a asks again.
    let r = reqwest::Client::new()
        .delete(format!(
            "{}/admin/credentials/api_key:alice/gh",
            b.admin.clone().unwrap()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    link_of(&call(&on_a, "gh__whoami", json!({})).await.unwrap_err());
}

/// examples/per-user as shipped (its launched demo upstream, its published test keys).
#[tokio::test(flavor = "multi_thread")]
async fn the_per_user_example_runs_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo("examples/per-user/gateway.toml"))
        .unwrap()
        .replace(
            "\"examples/per-user/tokens\"",
            &format!("{:?}", repo("examples/per-user/tokens").to_str().unwrap()),
        );
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(&cfg, text).unwrap();
    let gw = Gateway::start_file_env(&cfg, dir, &[("FEDGATE_CREDENTIAL_KEY", KEY)]);
    let alice = connect_with_token(&gw.url, "fgk_example_alice_NOT_A_SECRET", TestClient::new())
        .await
        .unwrap();
    let (link, _) = link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(
        connect_in_browser(&link, "fgk_example_alice_NOT_A_SECRET", "gh-example-alice")
            .await
            .0,
        200
    );
    let r = call(&alice, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as alice");
}

/// The official Python SDK in both eras: each person is asked once through URL elicitation
/// (handshake era: on the call's stream, then `notifications/elicitation/complete`; stateless
/// era: an input-required result the SDK drives), connects on the page, and acts as themselves.
#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_connects_each_person_in_both_eras() {
    let s = start();
    for (mode, key, person) in [("legacy", ALICE, "alice"), ("modern", BOB, "bob")] {
        let token = format!("gh-{person}");
        let r = script_report(
            "tests/clients/python/.venv/bin/python",
            "tests/clients/python/per_user.py",
            &[
                "--url", &s.gw.url, "--key", key, "--token", &token, "--mode", mode,
            ],
        );
        assert!(r.get("error").is_none(), "{mode}: {r}");
        let want = if mode == "legacy" {
            "2025-11-25"
        } else {
            "2026-07-28"
        };
        assert_eq!(r["protocol"], want, "{r}");
        let acting = format!("acting as {person}");
        assert_eq!(r["first"]["text"], acting.as_str(), "{r}");
        assert_eq!(r["second"]["text"], acting.as_str(), "{r}");
        assert_eq!(r["asked"].as_array().unwrap().len(), 1, "asked once: {r}");
        assert_eq!(r["pages"], json!([200, 200]), "{r}");
        if mode == "legacy" {
            assert_eq!(
                r["completed"],
                json!([r["asked"][0]["elicitation_id"]]),
                "{r}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_lists_connected_accounts_and_an_operator_revokes_one() {
    let s = start();
    for (key, token) in [(ALICE, "gh-alice"), (BOB, "gh-bob")] {
        let c = connect_with_token(&s.gw.url, key, TestClient::new())
            .await
            .unwrap();
        let (link, _) = link_of(&call(&c, "gh__whoami", json!({})).await.unwrap_err());
        assert_eq!(connect_in_browser(&link, key, token).await.0, 200);
        call(&c, "gh__whoami", json!({})).await.unwrap();
    }
    let browser = common::browser::Browser::start().await;
    browser
        .goto(&format!("{}/console", s.gw.admin.clone().unwrap()))
        .await;
    browser.type_into("#token", ADMIN_TOKEN).await;
    browser.click("#login-submit").await;
    let rows = browser
        .until(
            "both connections listed",
            "document.querySelectorAll('#connection-rows tr').length === 2 && document.getElementById('connection-rows').textContent",
        )
        .await;
    let rows = rows.as_str().unwrap_or_default().to_owned();
    assert!(
        rows.contains("alice") && rows.contains("bob") && rows.contains("gh"),
        "{rows}"
    );
    assert!(
        !rows.contains("gh-alice") && !rows.contains("gh-bob"),
        "no token: {rows}"
    );
    // When each was last used: the calls that asked for the connection ran with it.
    let used = browser
        .js("return document.querySelector(\"#connection-rows tr[data-owner='api_key:bob'] td.used\").textContent")
        .await;
    assert_ne!(used.as_str(), Some("–"), "{used}");
    browser
        .click("#connection-rows tr[data-owner='api_key:alice'] button.revoke")
        .await;
    browser
        .until(
            "alice's row gone",
            "document.querySelectorAll('#connection-rows tr').length === 1 && !document.querySelector(\"#connection-rows tr[data-owner='api_key:alice']\")",
        )
        .await;
    let listed = admin(&s.gw, reqwest::Method::GET, "/admin/credentials").await;
    let owners: Vec<&str> = listed["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners, ["api_key:bob"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flow_node_parks_until_its_caller_connects_and_then_runs_as_them() {
    let s = start();
    let alice = connect_with_token(&s.gw.url, ALICE, TestClient::new())
        .await
        .unwrap();
    // The run parks at once: its plan says what to tell the person, with the link.
    let r = call(&alice, "flows__me", json!({})).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    let meta = r.meta.clone().unwrap();
    let run = meta.0["io.fedgate/flow_run"].as_str().unwrap().to_owned();
    let plan = &meta.0["io.fedgate/orchestrated_plan"];
    assert_eq!(plan["status"], "blocked", "{plan}");
    assert_eq!(plan["errors"][0]["code"], "credential_required", "{plan}");
    let message = plan["errors"][0]["message"].as_str().unwrap();
    let link = message
        .split_whitespace()
        .find(|w| w.contains("/connect/gh?state="))
        .unwrap_or_else(|| panic!("no link in {message}"))
        .to_owned();
    let parked = admin(
        &s.gw,
        reqwest::Method::GET,
        &format!("/admin/flows/runs/{run}"),
    )
    .await;
    assert_eq!(
        parked["state"]["nodes"]["who"]["status"], "BLOCKED",
        "{parked}"
    );

    // The person connects; the node runs by itself, as them, and the run succeeds.
    assert_eq!(connect_in_browser(&link, ALICE, "gh-alice").await.0, 200);
    let done = admin(
        &s.gw,
        reqwest::Method::GET,
        &format!("/admin/flows/runs/{run}?wait_ms=20000"),
    )
    .await;
    assert_eq!(done["state"]["finished"], "succeeded", "{done}");
    assert!(
        done["state"]["outputs"]
            .to_string()
            .contains("acting as alice"),
        "{done}"
    );
}

const JWT_SECRET: &str = "per-user-jwt-secret-test-only";
const EVE: &str = "fgk_eve_per_user_test_only";

fn jwt_for(sub: &str) -> String {
    hs256(
        json!({"sub": sub, "roles": ["dev"], "exp": unix_now() + 600}),
        JWT_SECRET,
    )
}

/// A raw handshake-era `initialize` as `token`; its sealed session id.
async fn session_of(url: &str, token: &str) -> String {
    let r = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#)
        .send()
        .await
        .unwrap();
    r.headers()["mcp-session-id"].to_str().unwrap().to_owned()
}

/// A `tools/list` in session `sid` as `token`: the HTTP status.
async fn list_in(url: &str, token: &str, sid: &str) -> u16 {
    reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", sid)
        .header("mcp-protocol-version", "2025-11-25")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_key_and_a_jwt_that_share_a_name_are_two_people() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice=gh-alice\nmallory=gh-mallory\neve=gh-eve\n").unwrap();
    let upstream = gh_upstream(&tokens);
    let cfg = config(&upstream.url).replace(
        "\n\n[roles.dev]",
        &format!(
            "\n[[auth.api_keys]]\nname = \"eve smith@example.com\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\
             [auth.jwt]\nhs256_secret = \"env:FG_JWT_SECRET\"\n\n[roles.dev]",
            raw::sha(EVE)
        ),
    );
    std::fs::write(dir.path().join("gateway.toml"), cfg).unwrap();
    std::fs::create_dir(dir.path().join("flows")).unwrap();
    let gw = Gateway::start_file_env(
        &dir.path().join("gateway.toml"),
        tempfile::tempdir().unwrap(),
        &[ENV[0], ENV[1], ("FG_JWT_SECRET", JWT_SECRET)],
    );
    let jwt_alice = jwt_for("alice");

    // API-key alice connects her account.
    let key_alice = connect_with_token(&gw.url, ALICE, TestClient::new())
        .await
        .unwrap();
    let (link, _) = link_of(&call(&key_alice, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(connect_in_browser(&link, ALICE, "gh-alice").await.0, 200);
    assert_eq!(
        first_text(&call(&key_alice, "gh__whoami", json!({})).await.unwrap()),
        "acting as alice"
    );

    // A JWT whose subject is `alice` is someone else: it has no account of API-key alice's.
    let token_alice = connect_with_token(&gw.url, &jwt_alice, TestClient::new())
        .await
        .unwrap();
    let (other_link, _) = link_of(
        &call(&token_alice, "gh__whoami", json!({}))
            .await
            .unwrap_err(),
    );
    assert_ne!(other_link, link);
    // Its disconnect forgets only its own (none): API-key alice still acts as herself.
    let r = call(
        &token_alice,
        "fedgate__disconnect",
        json!({"upstream": "gh"}),
    )
    .await
    .unwrap();
    assert_eq!(r.structured_content.unwrap()["disconnected"], 0);
    assert_eq!(
        first_text(&call(&key_alice, "gh__whoami", json!({})).await.unwrap()),
        "acting as alice"
    );
    // The JWT connects an account of its own, and each acts as their own.
    assert_eq!(
        connect_in_browser(&other_link, &jwt_alice, "gh-mallory")
            .await
            .0,
        200
    );
    assert_eq!(
        first_text(&call(&token_alice, "gh__whoami", json!({})).await.unwrap()),
        "acting as mallory"
    );
    assert_eq!(
        first_text(&call(&key_alice, "gh__whoami", json!({})).await.unwrap()),
        "acting as alice"
    );

    // API-key alice's session id is no session to JWT alice.
    let sid = session_of(&gw.url, ALICE).await;
    assert_eq!(list_in(&gw.url, ALICE, &sid).await, 200);
    assert_eq!(list_in(&gw.url, &jwt_alice, &sid).await, 404);

    // The admin API names people by kind and name, and a name with `@` and a space is
    // revoked by its percent-encoded path (what the console sends).
    let eve = connect_with_token(&gw.url, EVE, TestClient::new())
        .await
        .unwrap();
    let (eve_link, _) = link_of(&call(&eve, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(connect_in_browser(&eve_link, EVE, "gh-eve").await.0, 200);
    let listed = admin(&gw, reqwest::Method::GET, "/admin/credentials").await;
    let mut owners: Vec<&str> = listed["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["owner"].as_str().unwrap())
        .collect();
    owners.sort();
    assert_eq!(
        owners,
        [
            "api_key:alice",
            "api_key:eve smith@example.com",
            "jwt:alice"
        ]
    );
    let gone = admin(
        &gw,
        reqwest::Method::DELETE,
        "/admin/credentials/api_key%3Aeve%20smith%40example.com/gh",
    )
    .await;
    assert_eq!(gone["revoked"], 1, "{gone}");
    assert_eq!(gone["owner"], "api_key:eve smith@example.com");
    link_of(&call(&eve, "gh__whoami", json!({})).await.unwrap_err());
    drop(upstream);
}

/// Posts the connect form of `url` with the given fields.
async fn post_form(url: &str, fields: &[(&str, &str)]) -> (u16, String) {
    let mut form: Vec<(&str, &str)> = url
        .split("state=")
        .nth(1)
        .map(|state| ("state", state))
        .into_iter()
        .collect();
    form.extend_from_slice(fields);
    let r = reqwest::Client::new()
        .post(url.split('?').next().unwrap())
        .form(&form)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forwarded_connect_link_connects_nothing_for_whoever_opens_it() {
    let s = start();
    let bob = connect_with_token(&s.gw.url, BOB, TestClient::new())
        .await
        .unwrap();
    let (bob_link, _) = link_of(&call(&bob, "gh__whoami", json!({})).await.unwrap_err());

    // A page without a state, or with an empty one, connects nothing and says why.
    let base = bob_link.split('?').next().unwrap().to_owned();
    for url in [base.clone(), format!("{base}?state=")] {
        let r = reqwest::get(&url).await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{url}");
        let body = r.text().await.unwrap();
        assert!(body.to_lowercase().contains("link"), "{url}: {body}");
    }
    let (status, _) = post_form(&base, &[("proof", BOB), ("token", "gh-bob")]).await;
    assert_eq!(status, 400);
    // (Each of these three is counted as a refused attempt below.)

    // Alice opens Bob's link: the page says whose it is and what it connects.
    let page = reqwest::get(&bob_link).await.unwrap().text().await.unwrap();
    assert!(
        page.contains("connects <strong>gh</strong> for <strong>bob (API key)</strong>"),
        "{page}"
    );
    // Without a proof, with her own key, or with a key that is no one's: nothing is stored.
    for fields in [
        vec![("token", "gh-alice")],
        vec![("proof", ALICE), ("token", "gh-alice")],
        vec![("proof", "fgk_nobody"), ("token", "gh-alice")],
        vec![("proof", ""), ("token", "gh-alice")],
    ] {
        let (status, body) = post_form(&bob_link, &fields).await;
        assert_eq!(status, 400, "{fields:?}: {body}");
        assert!(body.contains("made for bob (API key)"), "{body}");
        assert!(body.contains("nothing was stored"), "{body}");
    }
    let listed = admin(&s.gw, reqwest::Method::GET, "/admin/credentials").await;
    assert_eq!(listed["connections"], json!([]), "{listed}");
    link_of(&call(&bob, "gh__whoami", json!({})).await.unwrap_err());

    // The paste kind the other way round: Bob opens Carol's link with his own key and token.
    let carol = connect_with_token(&s.gw.url, CAROL, TestClient::new())
        .await
        .unwrap();
    let (carol_link, _) = link_of(&call(&carol, "gh__whoami", json!({})).await.unwrap_err());
    let (status, body) = connect_in_browser(&carol_link, BOB, "gh-bob").await;
    assert_eq!(status, 400, "{body}");
    link_of(&call(&carol, "gh__whoami", json!({})).await.unwrap_err());

    // The link still works for the person it was made for (a refusal does not use it up).
    assert_eq!(connect_in_browser(&bob_link, BOB, "gh-bob").await.0, 200);
    assert_eq!(
        first_text(&call(&bob, "gh__whoami", json!({})).await.unwrap()),
        "acting as bob"
    );
    let m = s.gw.metrics_as(BOB).await;
    assert!(
        m.contains("fedgate_user_credentials_total{event=\"refused\",upstream=\"gh\"} 8"),
        "{m}"
    );
    assert!(!s.gw.stderr().contains("gh-alice"), "a token in the log");

    // Guessing keys on a page spends its link: after five wrong ones, not even Carol's own
    // key connects with it (she gets a new link by calling again).
    for _ in 0..4 {
        let (status, _) = connect_in_browser(&carol_link, "fgk_guess", "gh-guess").await;
        assert_eq!(status, 400);
    }
    let page = reqwest::get(&carol_link).await.unwrap();
    assert_eq!(page.status().as_u16(), 400);
    let body = page.text().await.unwrap();
    assert!(body.contains("wrong keys too often"), "{body}");
    let (status, body) = post_form(&carol_link, &[("proof", CAROL), ("token", "gh-carol")]).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("wrong keys too often"), "{body}");
    let (fresh, _) = link_of(&call(&carol, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(connect_in_browser(&fresh, CAROL, "gh-carol").await.0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn each_person_sees_and_disconnects_their_own_accounts_on_the_account_page() {
    let s = start();
    for (key, token) in [(ALICE, "gh-alice"), (BOB, "gh-bob")] {
        let client = connect_with_token(&s.gw.url, key, TestClient::new())
            .await
            .unwrap();
        let (link, _) = link_of(&call(&client, "gh__whoami", json!({})).await.unwrap_err());
        assert_eq!(connect_in_browser(&link, key, token).await.0, 200);
    }

    // A real browser: the page asks who you are; a key that is not the gateway's shows nothing.
    let browser = common::browser::Browser::start().await;
    browser.goto(&format!("{}/account", s.gw.base)).await;
    browser.type_into("input[name=proof]", "fgk_nobody").await;
    browser.click("button[type=submit]").await;
    browser
        .until(
            "the refusal",
            "document.body.innerText.includes(\"not one of this gateway's\")",
        )
        .await;

    // Alice's key: her account alone, with a button that forgets it.
    browser.type_into("input[name=proof]", ALICE).await;
    browser.click("button[type=submit]").await;
    let shown = browser
        .until(
            "alice's accounts",
            "document.body.innerText.includes('Signed in as alice') && document.body.innerText",
        )
        .await;
    let shown = shown.as_str().unwrap();
    assert!(shown.contains("gh") && !shown.contains("bob"), "{shown}");
    assert!(!shown.contains("gh-alice"), "never a token: {shown}");
    browser
        .click("form[action='/account/disconnect'] button")
        .await;
    browser
        .until(
            "the account forgotten",
            "document.body.innerText.includes('Your gh account is forgotten') \
             && document.body.innerText.includes('You have no connected accounts')",
        )
        .await;
    let listed = admin(&s.gw, reqwest::Method::GET, "/admin/credentials").await;
    let owners: Vec<&str> = listed["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners, ["api_key:bob"]);

    // A button's grant is the page's alone: a forged one forgets nothing.
    let r = reqwest::Client::new()
        .post(format!("{}/account/disconnect", s.gw.base))
        .form(&[("grant", "AAAA"), ("upstream", "gh")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("expired"));
    let listed = admin(&s.gw, reqwest::Method::GET, "/admin/credentials").await;
    assert_eq!(listed["connections"].as_array().unwrap().len(), 1);
}

/// One runtime worker, and the credential store locked by another process: the connect page's
/// write waits for the lock (on the blocking pool), while other people's calls and `/healthz`
/// are answered meanwhile; the write completes once the lock is gone. A store that blocked the
/// worker would hold up everything until its write gave up.
#[tokio::test(flavor = "multi_thread")]
async fn a_locked_credential_store_holds_up_only_the_request_that_writes_to_it() {
    let s = start();
    drop(s.gw);
    let gw = serve_with(s.dir.path(), &[("FEDGATE_WORKER_THREADS", "1")]);
    let (alice, bob) = (
        connect_with_token(&gw.url, ALICE, TestClient::new())
            .await
            .unwrap(),
        connect_with_token(&gw.url, BOB, TestClient::new())
            .await
            .unwrap(),
    );
    let (bob_link, _) = link_of(&call(&bob, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(connect_in_browser(&bob_link, BOB, "gh-bob").await.0, 200);
    let (link, _) = link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());

    let db = rusqlite::Connection::open(s.dir.path().join("fedgate-credentials.db")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let pending = tokio::spawn(async move { connect_in_browser(&link, ALICE, "gh-alice").await });
    for _ in 0..5 {
        let r = call(&bob, "gh__whoami", json!({})).await.unwrap();
        assert_eq!(first_text(&r), "acting as bob");
        let health = reqwest::get(format!("{}/healthz", gw.url.trim_end_matches("/mcp")))
            .await
            .unwrap();
        assert_eq!(health.status().as_u16(), 200);
    }
    if pending.is_finished() {
        let (status, body) = pending.await.unwrap();
        panic!("the write did not wait for the lock: {status} {body}");
    }
    db.execute_batch("COMMIT").unwrap();
    assert_eq!(pending.await.unwrap().0, 200);
    let r = call(&alice, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as alice");
}
