//! A JWT person shows a connect page who they are by signing in at the organisation's
//! identity provider (`[auth.jwt.sign_in]`: OpenID Connect code flow with PKCE), through a
//! real fedgate, a real OpenID provider (npm's `oidc-provider`, tests/node/oauth-as.mjs, whose
//! issuer also names callers' tokens), real upstreams (one a pasted token connects, one that
//! takes OAuth tokens of the same provider) and reqwest as each person's browser. Two people:
//! bob's link, forwarded to alice, connects nothing whichever way she tries.

use crate::common;
use crate::per_user_oauth::{
    AuthServer, CLIENT_SECRET, Jar, Visit, follow, link_of, no_redirects, open_elsewhere,
};

use common::*;
use serde_json::json;

const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");
const KEY: &str = "identity-sign-in-credential-key-test-only-01";
const JWT_SECRET: &str = "identity-sign-in-jwt-secret-test-only";

struct Setup {
    gw: Gateway,
    auth: AuthServer,
    _upstreams: Vec<UrlProcess>,
    _dir: tempfile::TempDir,
}

/// `tok` is connected with a pasted token (`bob=tok-bob`), `gh` by signing in at the same
/// provider; callers' tokens name that provider as their issuer.
fn start() -> Setup {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let auth = AuthServer::start(&[
        format!("{base}/connect/~signed-in"),
        format!("{base}/connect/gh/callback"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice=tok-alice\nbob=tok-bob\n").unwrap();
    let tok = UrlProcess::start(&[
        "demo-upstream",
        "--name",
        "tok",
        "--user-tokens",
        tokens.to_str().unwrap(),
        "--http",
        "127.0.0.1:0",
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
    let config = format!(
        "[gateway]\ntiers_dir = {TIERS:?}\ncredential_key = \"env:FG_CREDENTIAL_KEY\"\n\n\
         [auth]\nanonymous = false\n\
         [auth.jwt]\nhs256_secret = \"env:FG_JWT_SECRET\"\nissuer = \"{issuer}\"\n\
         [auth.jwt.sign_in]\nclient_id = \"fedgate\"\nclient_secret = \"env:FG_OAUTH_SECRET\"\n\n\
         [roles.dev]\ntools = [\"*\"]\n\n\
         [credentials.tok_people]\nclass = \"user\"\nper_user = {{ kind = \"token\" }}\n\n\
         [credentials.gh_people]\nclass = \"user\"\n\
         per_user = {{ kind = \"oauth\", client_id = \"fedgate\", client_secret = \"env:FG_OAUTH_SECRET\", scopes = [\"openid\"] }}\n\n\
         [upstreams.tok]\nkind = \"http\"\nurl = \"{tok}\"\ncredential = \"tok_people\"\n\
         [upstreams.gh]\nkind = \"http\"\nurl = \"{gh}\"\ncredential = \"gh_people\"\n",
        issuer = auth.issuer,
        tok = tok.url,
        gh = gh.url,
    );
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(&cfg, config).unwrap();
    let gw = Gateway::start_file_env_at(
        &cfg,
        tempfile::tempdir().unwrap(),
        &[
            ("FG_CREDENTIAL_KEY", KEY),
            ("FG_OAUTH_SECRET", CLIENT_SECRET),
            ("FG_JWT_SECRET", JWT_SECRET),
        ],
        &format!("127.0.0.1:{port}"),
    );
    Setup {
        gw,
        auth,
        _upstreams: vec![tok, gh],
        _dir: dir,
    }
}

impl Setup {
    /// Bob's client, calling with a token of the provider's issuer.
    async fn bob(&self) -> Client {
        connect_with_token(
            &self.gw.url,
            &jwt_for(&self.auth.issuer, "bob"),
            TestClient::new(),
        )
        .await
        .unwrap()
    }
}

/// A caller's token from the provider's issuer, naming `sub`.
fn jwt_for(issuer: &str, sub: &str) -> String {
    hs256(
        json!({"sub": sub, "iss": issuer, "roles": ["dev"], "exp": unix_now() + 600}),
        JWT_SECRET,
    )
}

/// The value of hidden field `name` on a page.
fn hidden(html: &str, name: &str) -> String {
    let at = html
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no field {name}: {html}"));
    html[at..]
        .split('"')
        .nth(3)
        .unwrap_or_else(|| panic!("no value of {name}"))
        .to_owned()
}

/// `person`'s browser confirms the page of `link` and signs in at the identity provider as
/// `person` (the test provider signs in whoever the browser names): every page it goes
/// through, with its cookies kept in `jar`.
async fn sign_in(link: &str, person: &str, jar: &mut Jar) -> Visit {
    let (client, action) = (no_redirects(), link.split('?').next().unwrap());
    let r = confirm(&client, link).await;
    let at = reqwest::Url::parse(action).unwrap();
    follow(&client, jar, r, at, person, vec![action.to_owned()]).await
}

/// The browser confirms the page of `link`: it is sent to sign in.
async fn confirm(client: &reqwest::Client, link: &str) -> reqwest::Response {
    let state = link.split("state=").nth(1).unwrap();
    let r = client
        .post(link.split('?').next().unwrap())
        .form(&[("state", state)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303, "sent to sign in");
    r
}

async fn still_asked(bob: &Client, tool: &str) {
    link_of(&call(bob, tool, json!({})).await.unwrap_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jwt_person_signs_in_at_the_identity_provider_before_a_pasted_token_is_taken() {
    let s = start();
    let bob = s.bob().await;
    let link = link_of(&call(&bob, "tok__whoami", json!({})).await.unwrap_err());

    // The page names bob, asks for no key and no token yet: bob signs in first.
    let html = reqwest::get(&link).await.unwrap().text().await.unwrap();
    assert!(
        html.contains("for <strong>bob (signed-in token)</strong>"),
        "{html}"
    );
    assert!(html.contains(&s.auth.issuer), "names the provider: {html}");
    assert!(
        !html.contains("name=\"proof\"") && !html.contains("name=\"token\""),
        "{html}"
    );

    // Alice, forwarded bob's link, signs in as herself: refused, nothing stored.
    let visit = sign_in(&link, "alice", &mut Jar::default()).await;
    assert_eq!(visit.status, 400, "{}", visit.body);
    assert!(visit.body.contains("made for bob"), "{}", visit.body);
    let back = visit.urls.last().unwrap();
    assert!(back.contains("/connect/~signed-in?code="), "{back}");
    assert!(!visit.body.contains("name=\"token\""), "{}", visit.body);
    still_asked(&bob, "tok__whoami").await;
    // The provider's answer is single use: replaying it (with alice's own cookie) stores
    // nothing either.
    let replay = no_redirects().get(back).send().await.unwrap();
    assert_eq!(replay.status().as_u16(), 400);

    // Bob signs in as bob: the token form, carrying a mark of that sign-in.
    let mut jar = Jar::default();
    let visit = sign_in(&link, "bob", &mut jar).await;
    assert_eq!(visit.status, 200, "{}", visit.body);
    assert!(
        visit.body.contains("You signed in as <strong>bob"),
        "{}",
        visit.body
    );
    let authorize = reqwest::Url::parse(&visit.urls[1]).unwrap();
    let q: std::collections::BTreeMap<String, String> =
        authorize.query_pairs().into_owned().collect();
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["scope"], "openid");
    assert!(q["nonce"].len() >= 32, "{q:?}");
    assert_eq!(
        q["redirect_uri"],
        format!("{}/connect/~signed-in", s.gw.base)
    );
    let (state, mark) = (
        hidden(&visit.body, "state"),
        hidden(&visit.body, "signed_in"),
    );
    let action = link.split('?').next().unwrap();
    let post = |cookie: Option<String>| {
        let mut r = reqwest::Client::new().post(action).form(&[
            ("state", state.as_str()),
            ("signed_in", mark.as_str()),
            ("token", "tok-bob"),
        ]);
        if let Some(c) = cookie {
            r = r.header("cookie", c);
        }
        r.send()
    };

    // The mark copied to another browser (without bob's cookie) connects nothing.
    let r = post(None).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("made for bob"));
    still_asked(&bob, "tok__whoami").await;

    // In bob's browser it connects, and bob's calls act as bob.
    let r = post(Some(jar.header())).await.unwrap();
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("tok is connected"), "{body}");
    let r = call(&bob, "tok__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as bob");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jwt_person_signs_in_at_the_identity_provider_before_an_upstream_sign_in() {
    let s = start();
    let bob = s.bob().await;
    let link = link_of(&call(&bob, "gh__whoami", json!({})).await.unwrap_err());

    // Alice signs in as herself on bob's link: never sent on to gh's sign-in.
    let visit = sign_in(&link, "alice", &mut Jar::default()).await;
    assert_eq!(visit.status, 400, "{}", visit.body);
    assert!(visit.body.contains("made for bob"), "{}", visit.body);
    assert!(
        !visit
            .urls
            .iter()
            .any(|u| u.contains("/connect/gh/callback"))
    );

    // Bob starts, then forwards the provider's address: it comes back to alice's browser
    // without bob's cookie, and stores nothing.
    let r = confirm(&no_redirects(), &link).await;
    let authorize = r.headers()["location"].to_str().unwrap().to_owned();
    let visit = open_elsewhere(&authorize, "alice").await;
    assert_eq!(visit.status, 400, "{}", visit.body);
    assert!(visit.body.contains("another browser"), "{}", visit.body);
    still_asked(&bob, "gh__whoami").await;
    assert_eq!(
        s.auth.stats().await["token_requests"]["authorization_code"],
        1,
        "only alice's sign-in was exchanged, to learn it was not bob"
    );

    // Bob in his own browser: the identity provider, then gh's sign-in, then connected.
    let visit = sign_in(&link, "bob", &mut Jar::default()).await;
    assert_eq!(visit.status, 200, "{}", visit.body);
    assert!(visit.body.contains("gh is connected"), "{}", visit.body);
    let steps: Vec<&String> = visit
        .urls
        .iter()
        .filter(|u| u.contains("/connect/"))
        .collect();
    assert!(steps[1].contains("/connect/~signed-in?code="), "{steps:?}");
    assert!(steps[2].contains("/connect/gh/callback?code="), "{steps:?}");
    let r = call(&bob, "gh__whoami", json!({})).await.unwrap();
    assert_eq!(first_text(&r), "acting as bob");
}
