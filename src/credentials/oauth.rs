//! `per_user = { kind = "oauth" }`: the authorization-code grant with PKCE (S256) against the
//! upstream's authorization server, for each person. Endpoints come from config, or are
//! discovered once per upstream: RFC 9728 protected-resource metadata on the upstream's origin
//! (or named by its `WWW-Authenticate` challenge), then RFC 8414 authorization-server metadata
//! (OpenID discovery as the fallback). Refresh tokens are used when an access token expires or
//! is refused, and a rotated one replaces the old.
//!
//! Every request to an authorization server has a timeout, follows no redirect and reads a
//! bounded body; no error text carries a token or the client secret.

use std::sync::Arc;

use base64::Engine as _;
use dashmap::DashMap;
use reqwest::Url;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::{policy::token::PerUserOAuth, secret::Secret};

/// Largest metadata or token response read.
const MAX_BODY: usize = crate::policy::token::MAX_TOKEN_RESPONSE;
/// An access token whose lifetime is not known is refreshed this long before it expires; one
/// whose lifetime is known, when `refresh_margin_percent` of it is left.
pub const EXPIRY_MARGIN_MS: u64 = 30_000;
/// Longest access or refresh token kept.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why an OAuth step failed; shown on the connect page and in logs, never holding a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthError {
    #[error("the authorization server of `{0}` could not be found: {1}")]
    Discovery(String, String),
    #[error("the authorization server could not be reached: {0}")]
    Unreachable(String),
    #[error("the authorization server answered {status} ({code})")]
    Refused { status: u16, code: String },
    #[error("the authorization server's answer was not understood: {0}")]
    Garbage(String),
    #[error("the client credentials of `{0}` are not available: {1}")]
    Client(String, String),
}

/// Token-endpoint error codes that say the grant itself is gone (RFC 6749 5.2): the person must
/// sign in again. Every other failure (unreachable, a timeout, a 5xx, a 429, another code)
/// leaves the credential as it is.
const GRANT_GONE: [&str; 2] = ["invalid_grant", "unauthorized_client"];

impl OAuthError {
    /// Whether the authorization server said the grant is no longer valid (not merely that it
    /// could not answer now).
    pub fn grant_gone(&self) -> bool {
        matches!(self, OAuthError::Refused { status: 400 | 401, code } if GRANT_GONE.contains(&code.as_str()))
    }
}

/// Why one discovery step found nothing usable (folded into [`OAuthError::Discovery`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct NotFound(String);

impl From<String> for NotFound {
    fn from(s: String) -> Self {
        NotFound(s)
    }
}

impl From<&str> for NotFound {
    fn from(s: &str) -> Self {
        NotFound(s.to_owned())
    }
}

/// Where a person signs in and where codes and refresh tokens are exchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    pub authorization: Url,
    pub token: Url,
    /// The RFC 8707 `resource` sent with every request (config, else the upstream's
    /// protected-resource metadata).
    pub resource: Option<String>,
    /// The RFC 7009 revocation endpoint (config, else the server's metadata), if any.
    pub revocation: Option<Url>,
    /// The RFC 7591 registration endpoint (the server's metadata), if any.
    pub registration: Option<Url>,
}

/// How fedgate authenticates to an authorization server: its client id, and its secret for a
/// confidential client (configured, or given by dynamic registration).
#[derive(Debug, Clone)]
pub struct ClientAuth {
    pub id: Secret,
    pub secret: Option<Secret>,
}

impl ClientAuth {
    /// The configured client, its references resolved; `None` when none is configured (the
    /// client registers itself).
    pub fn configured(upstream: &str, settings: &PerUserOAuth) -> Result<Option<Self>, OAuthError> {
        let Some(id) = &settings.client_id else {
            return Ok(None);
        };
        Ok(Some(Self {
            id: resolve("client id", id, upstream)?,
            secret: settings
                .client_secret
                .as_deref()
                .map(|r| resolve("client secret", r, upstream))
                .transpose()?,
        }))
    }
}

/// What a token endpoint gave: the access token, the refresh token (if any) and when the
/// access token expires (ms since the epoch).
#[derive(Debug)]
pub struct Granted {
    pub access: Secret,
    pub refresh: Option<Secret>,
    pub expires_at_ms: Option<u64>,
    /// An OpenID Connect ID token, when `openid` was asked for.
    pub id_token: Option<Secret>,
    /// How long the access token lives from now (ms), when the server said.
    pub lifetime_ms: Option<u64>,
    /// The scopes granted, when the server said (RFC 6749 5.1 `scope`).
    pub scopes: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    id_token: Option<String>,
    #[serde(default)]
    scope: Option<String>,
}

#[derive(Deserialize)]
struct TokenError {
    error: String,
}

#[derive(Deserialize)]
struct ResourceMetadata {
    #[serde(default)]
    resource: Option<String>,
    #[serde(default)]
    authorization_servers: Vec<String>,
}

#[derive(Deserialize)]
struct ServerMetadata {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    #[serde(default)]
    code_challenge_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    jwks_uri: Option<String>,
    #[serde(default)]
    revocation_endpoint: Option<String>,
    #[serde(default)]
    registration_endpoint: Option<String>,
}

/// An OpenID provider, as discovered at its issuer.
#[derive(Debug, Clone)]
pub struct Provider {
    pub endpoints: Endpoints,
    /// Where the keys that sign its ID tokens are published.
    pub jwks: Url,
}

/// The OAuth client of every per-user upstream, with the endpoints it discovered.
#[derive(Debug)]
pub struct OAuthClient {
    pub(super) http: reqwest::Client,
    /// (upstream, upstream URL) → endpoints; only successes are kept.
    discovered: DashMap<(String, String), Arc<Endpoints>>,
}

impl Default for OAuthClient {
    fn default() -> Self {
        Self::new()
    }
}

/// The PKCE challenge (S256) of a verifier.
pub fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

pub(super) fn resolve(what: &str, reference: &str, upstream: &str) -> Result<Secret, OAuthError> {
    if crate::secret::is_reference(reference) {
        crate::secret::resolve(reference)
            .map_err(|e| OAuthError::Client(upstream.to_owned(), format!("{what}: {e}")))
    } else {
        Ok(Secret::new(reference.to_owned()))
    }
}

pub(super) fn is_token(t: &str) -> bool {
    !t.is_empty() && t.len() <= MAX_TOKEN_BYTES && t.bytes().all(|b| b.is_ascii_graphic())
}

impl OAuthClient {
    pub fn new() -> Self {
        Self {
            http: crate::policy::token::authorization_server_client(),
            discovered: DashMap::new(),
        }
    }

    /// GET `url` as bounded JSON.
    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &Url) -> Result<T, NotFound> {
        let resp = self
            .http
            .get(url.clone())
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        if !resp.status().is_success() {
            return Err(NotFound(format!("{url} answered {}", resp.status())));
        }
        let body = bounded(resp).await?;
        serde_json::from_slice(&body).map_err(|e| NotFound(format!("{url}: {e}")))
    }

    /// The endpoints for `upstream` (at `upstream_url`): configured, cached, or discovered.
    pub async fn endpoints(
        &self,
        upstream: &str,
        upstream_url: &str,
        settings: &PerUserOAuth,
    ) -> Result<Arc<Endpoints>, OAuthError> {
        if let Some((a, t)) = &settings.endpoints {
            let parse = |u: &str| {
                Url::parse(u).map_err(|e| OAuthError::Discovery(upstream.to_owned(), e.to_string()))
            };
            return Ok(Arc::new(Endpoints {
                authorization: parse(a)?,
                token: parse(t)?,
                resource: settings.resource.clone(),
                revocation: settings.revocation.as_deref().map(parse).transpose()?,
                registration: None,
            }));
        }
        let key = (upstream.to_owned(), upstream_url.to_owned());
        if let Some(e) = self.discovered.get(&key) {
            return Ok(e.clone());
        }
        let found = Arc::new(
            self.discover(upstream_url, settings)
                .await
                .map_err(|why| OAuthError::Discovery(upstream.to_owned(), why.0))?,
        );
        self.discovered.insert(key, found.clone());
        Ok(found)
    }

    async fn discover(
        &self,
        upstream_url: &str,
        settings: &PerUserOAuth,
    ) -> Result<Endpoints, NotFound> {
        let upstream = Url::parse(upstream_url).map_err(|e| e.to_string())?;
        let prm = self.resource_metadata(&upstream).await?;
        let issuer = prm
            .authorization_servers
            .first()
            .ok_or("the upstream's protected-resource metadata names no authorization server")?;
        let meta = self.issuer_metadata(issuer).await?;
        let parse = |what: &str, u: &str| Url::parse(u).map_err(|e| format!("{what} `{u}`: {e}"));
        let revocation = match settings.revocation.as_deref() {
            Some(r) => Some(parse("revocation_url", r)?),
            None => meta
                .revocation_endpoint
                .as_deref()
                .map(|r| parse("revocation_endpoint", r))
                .transpose()?,
        };
        let registration = meta
            .registration_endpoint
            .as_deref()
            .map(|r| parse("registration_endpoint", r))
            .transpose()?;
        Ok(Endpoints {
            authorization: parse("authorization_endpoint", &meta.authorization_endpoint)?,
            token: parse("token_endpoint", &meta.token_endpoint)?,
            resource: settings.resource.clone().or(prm.resource),
            revocation,
            registration,
        })
    }

    /// The metadata of authorization server `issuer`: it must name itself as that issuer and
    /// advertise PKCE with S256 (OAuth 2.1 and MCP: a downgrade is refused).
    async fn issuer_metadata(&self, issuer: &str) -> Result<ServerMetadata, NotFound> {
        let issuer_url = Url::parse(issuer).map_err(|e| format!("issuer `{issuer}`: {e}"))?;
        let meta = self.server_metadata(&issuer_url).await?;
        if meta.issuer.trim_end_matches('/') != issuer.trim_end_matches('/') {
            return Err(NotFound(format!(
                "the metadata of `{issuer}` names another issuer (`{}`)",
                meta.issuer
            )));
        }
        if !meta
            .code_challenge_methods_supported
            .as_ref()
            .is_some_and(|m| m.iter().any(|m| m == "S256"))
        {
            return Err(NotFound(format!(
                "`{issuer}` does not advertise PKCE with S256"
            )));
        }
        Ok(meta)
    }

    /// The OpenID provider at `issuer`: its metadata must name the same issuer, PKCE with
    /// S256 and its keys. Looked up on each sign-in (they are rare; keys rotate).
    pub async fn provider(&self, issuer: &str) -> Result<Provider, OAuthError> {
        self.find_provider(issuer)
            .await
            .map_err(|why| OAuthError::Discovery("the identity provider".into(), why.0))
    }

    async fn find_provider(&self, issuer: &str) -> Result<Provider, NotFound> {
        let meta = self.issuer_metadata(issuer).await?;
        let parse = |what: &str, u: &str| Url::parse(u).map_err(|e| format!("{what} `{u}`: {e}"));
        let jwks = meta
            .jwks_uri
            .as_deref()
            .ok_or("its metadata names no jwks_uri")?;
        Ok(Provider {
            endpoints: Endpoints {
                authorization: parse("authorization_endpoint", &meta.authorization_endpoint)?,
                token: parse("token_endpoint", &meta.token_endpoint)?,
                resource: None,
                revocation: None,
                registration: None,
            },
            jwks: parse("jwks_uri", jwks)?,
        })
    }

    /// The keys an identity provider signs ID tokens with.
    pub async fn keys(&self, url: &Url) -> Result<jsonwebtoken::jwk::JwkSet, OAuthError> {
        self.get_json(url)
            .await
            .map_err(|why| OAuthError::Garbage(format!("its keys: {}", why.0)))
    }

    /// RFC 9728: `/.well-known/oauth-protected-resource` with the upstream's path inserted,
    /// then at the root, then the metadata URL of the upstream's own 401 challenge.
    async fn resource_metadata(&self, upstream: &Url) -> Result<ResourceMetadata, NotFound> {
        let mut tried = Vec::new();
        for url in well_known(upstream, "oauth-protected-resource") {
            match self.get_json::<ResourceMetadata>(&url).await {
                Ok(m) => return Ok(m),
                Err(e) => tried.push(e.0),
            }
        }
        let challenge = self
            .http
            .post(upstream.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .body(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#)
            .send()
            .await
            .ok()
            .filter(|r| r.status() == reqwest::StatusCode::UNAUTHORIZED)
            .and_then(|r| {
                r.headers()
                    .get_all(http::header::WWW_AUTHENTICATE)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find_map(resource_metadata_param)
            });
        if let Some(url) = challenge.and_then(|u| Url::parse(&u).ok()) {
            return self.get_json(&url).await;
        }
        Err(NotFound(format!(
            "no protected-resource metadata ({})",
            tried.join("; ")
        )))
    }

    /// RFC 8414 metadata (path inserted, as the RFC says), then OpenID discovery (inserted,
    /// then appended, as issuers with paths publish it).
    async fn server_metadata(&self, issuer: &Url) -> Result<ServerMetadata, NotFound> {
        let mut urls = well_known(issuer, "oauth-authorization-server");
        urls.truncate(1);
        urls.extend(
            well_known(issuer, "openid-configuration")
                .into_iter()
                .take(1),
        );
        if let Ok(appended) = Url::parse(&format!(
            "{}/.well-known/openid-configuration",
            issuer.as_str().trim_end_matches('/')
        )) && !urls.contains(&appended)
        {
            urls.push(appended);
        }
        let mut tried = Vec::new();
        for url in urls {
            match self.get_json::<ServerMetadata>(&url).await {
                Ok(m) => return Ok(m),
                Err(e) => tried.push(e.0),
            }
        }
        Err(NotFound(format!(
            "no authorization-server metadata ({})",
            tried.join("; ")
        )))
    }

    /// Where to send the person: the authorization endpoint with PKCE, our `state` and the
    /// `scopes` asked for.
    pub fn authorize_url(
        &self,
        endpoints: &Endpoints,
        client: &ClientAuth,
        redirect_uri: &str,
        state: &str,
        verifier: &str,
        scopes: &[String],
    ) -> Url {
        let client_id = &client.id;
        let mut url = endpoints.authorization.clone();
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("response_type", "code")
                .append_pair("client_id", client_id.expose())
                .append_pair("redirect_uri", redirect_uri)
                .append_pair("state", state)
                .append_pair("code_challenge", &challenge(verifier))
                .append_pair("code_challenge_method", "S256");
            if !scopes.is_empty() {
                q.append_pair("scope", &scopes.join(" "));
            }
            if let Some(r) = &endpoints.resource {
                q.append_pair("resource", r);
            }
        }
        url
    }

    /// Exchanges an authorization code.
    pub async fn exchange(
        &self,
        endpoints: &Endpoints,
        client: &ClientAuth,
        code: &str,
        redirect_uri: &str,
        verifier: &str,
    ) -> Result<Granted, OAuthError> {
        let mut form = vec![
            ("grant_type", "authorization_code".to_owned()),
            ("code", code.to_owned()),
            ("redirect_uri", redirect_uri.to_owned()),
            ("code_verifier", verifier.to_owned()),
        ];
        if let Some(r) = &endpoints.resource {
            form.push(("resource", r.clone()));
        }
        self.token_request(endpoints, client, form).await
    }

    /// Uses a refresh token; the answer may carry a rotated one.
    pub async fn refresh(
        &self,
        endpoints: &Endpoints,
        client: &ClientAuth,
        refresh: &Secret,
    ) -> Result<Granted, OAuthError> {
        let mut form = vec![
            ("grant_type", "refresh_token".to_owned()),
            ("refresh_token", refresh.expose().to_owned()),
        ];
        if let Some(r) = &endpoints.resource {
            form.push(("resource", r.clone()));
        }
        self.token_request(endpoints, client, form).await
    }

    /// Asks the server to revoke `token` (RFC 7009): `true` when it confirmed (200), `false`
    /// when it has no revocation endpoint.
    pub async fn revoke(
        &self,
        endpoints: &Endpoints,
        client: &ClientAuth,
        token: &Secret,
        hint: &'static str,
    ) -> Result<bool, OAuthError> {
        let Some(url) = &endpoints.revocation else {
            return Ok(false);
        };
        let form = vec![
            ("token", token.expose().to_owned()),
            ("token_type_hint", hint.to_owned()),
        ];
        self.form_post(url, client, form).await.map(|_| true)
    }

    /// POSTs `form` to one of the server's endpoints with the client's authentication; the
    /// bounded body of a success, the error code of a refusal.
    async fn form_post(
        &self,
        url: &Url,
        client: &ClientAuth,
        mut form: Vec<(&'static str, String)>,
    ) -> Result<Vec<u8>, OAuthError> {
        let client_id = &client.id;
        let mut req = self.http.post(url.clone());
        match &client.secret {
            // client_secret_basic, with the id and secret form-encoded first (RFC 6749 2.3.1).
            Some(secret) => {
                let enc =
                    |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
                req = req.basic_auth(enc(client_id.expose()), Some(enc(secret.expose())));
            }
            None => form.push(("client_id", client_id.expose().to_owned())),
        }
        let sent = req
            .header(http::header::ACCEPT, "application/json")
            .form(&form)
            .send()
            .await;
        answered(sent).await
    }

    async fn token_request(
        &self,
        endpoints: &Endpoints,
        client: &ClientAuth,
        form: Vec<(&'static str, String)>,
    ) -> Result<Granted, OAuthError> {
        let body = self.form_post(&endpoints.token, client, form).await?;
        let t: TokenResponse = serde_json::from_slice(&body).map_err(|_| {
            OAuthError::Garbage("no token response (JSON with access_token)".into())
        })?;
        if t.token_type
            .as_deref()
            .is_some_and(|k| !k.eq_ignore_ascii_case("bearer"))
        {
            return Err(OAuthError::Garbage(
                "the token is not a bearer token".into(),
            ));
        }
        if !is_token(&t.access_token) || t.refresh_token.as_deref().is_some_and(|r| !is_token(r)) {
            return Err(OAuthError::Garbage(
                "the token is empty, too long or malformed".into(),
            ));
        }
        let lifetime_ms = t.expires_in.map(|s| s.saturating_mul(1000));
        Ok(Granted {
            access: Secret::new(t.access_token),
            refresh: t.refresh_token.map(Secret::new),
            expires_at_ms: lifetime_ms.map(|l| crate::clock::now_ms().saturating_add(l)),
            id_token: t.id_token.filter(|i| is_token(i)).map(Secret::new),
            lifetime_ms,
            scopes: t.scope.as_deref().map(granted_scopes),
        })
    }
}

/// Which account an ID token names, for people and operators to recognise it: its `email`,
/// `preferred_username`, `name` or `sub`, at most 128 printable characters. Read without its
/// signature checked: it came straight from the token endpoint (OpenID Connect Core 3.1.3.7),
/// and it is only shown, never trusted for a decision.
pub fn account_of(id_token: &Secret) -> Option<String> {
    let payload = id_token.expose().split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    ["email", "preferred_username", "name", "sub"]
        .iter()
        .filter_map(|k| claims.get(*k)?.as_str())
        .find(|v| !v.is_empty())
        .map(|v| {
            v.chars()
                .filter(|c| !c.is_control())
                .take(128)
                .collect::<String>()
        })
}

/// The scopes of a token response's `scope`, each a bounded printable word (at most 32).
fn granted_scopes(scope: &str) -> Vec<String> {
    scope
        .split(' ')
        .filter(|s| !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic()))
        .take(32)
        .map(str::to_owned)
        .collect()
}

/// The bounded body of a successful answer from an authorization server; the error code of a
/// refusal; unreachable when it did not answer.
pub(super) async fn answered(
    sent: reqwest::Result<reqwest::Response>,
) -> Result<Vec<u8>, OAuthError> {
    let resp = sent.map_err(|e| OAuthError::Unreachable(e.without_url().to_string()))?;
    let status = resp.status();
    let body = bounded(resp)
        .await
        .map_err(|e| OAuthError::Unreachable(e.0))?;
    if !status.is_success() {
        let code = serde_json::from_slice::<TokenError>(&body)
            .ok()
            .map(|e| e.error)
            .filter(|e| e.len() <= 64 && e.bytes().all(|b| b.is_ascii_graphic()))
            .unwrap_or_else(|| "an error".to_owned());
        return Err(OAuthError::Refused {
            status: status.as_u16(),
            code,
        });
    }
    Ok(body)
}

/// Reads at most `MAX_BODY` bytes of a response.
async fn bounded(resp: reqwest::Response) -> Result<Vec<u8>, NotFound> {
    crate::json_size::read_bounded(resp, MAX_BODY)
        .await
        .map_err(|e| match e {
            crate::json_size::Unread::Broken(e) => NotFound(e.without_url().to_string()),
            crate::json_size::Unread::TooLong => {
                NotFound(format!("an answer of more than {MAX_BODY} bytes"))
            }
        })
}

/// `https://host/.well-known/<name><path>` (RFC 8414/9728 path insertion), then the root one
/// when the URL has a path.
fn well_known(base: &Url, name: &str) -> Vec<Url> {
    let path = base.path().trim_end_matches('/');
    let mut out = Vec::new();
    let mut at = |p: &str| {
        let mut u = base.clone();
        u.set_path(p);
        u.set_query(None);
        u.set_fragment(None);
        if !out.contains(&u) {
            out.push(u);
        }
    };
    at(&format!("/.well-known/{name}{path}"));
    at(&format!("/.well-known/{name}"));
    out
}

/// The `resource_metadata` parameter of a Bearer challenge.
fn resource_metadata_param(challenge: &str) -> Option<String> {
    let at = challenge.find("resource_metadata=")? + "resource_metadata=".len();
    let rest = &challenge[at..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split([',', ' ']).next()?,
    };
    Some(value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pkce_challenge_is_rfc_7636s_example() {
        // RFC 7636 appendix B.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn well_known_urls_insert_the_path_first() {
        let u = Url::parse("https://as.example/tenant/x/?q=1").unwrap();
        let got: Vec<String> = well_known(&u, "oauth-authorization-server")
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant/x",
                "https://as.example/.well-known/oauth-authorization-server"
            ]
        );
        let root = Url::parse("https://as.example").unwrap();
        assert_eq!(well_known(&root, "openid-configuration").len(), 1);
    }

    /// A one-shot HTTP server on loopback answering every request with `body` (status 200).
    async fn answering(body: Vec<u8>) -> Url {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}/reg", listener.local_addr().unwrap())).unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = vec![0u8; 8192];
                let _ = s.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&body).await;
            }
        });
        url
    }

    #[tokio::test]
    async fn a_registration_endpoint_answering_garbage_or_too_much_is_a_clear_error() {
        let client = OAuthClient::new();
        let endpoints = |registration: Url| Endpoints {
            authorization: Url::parse("http://as/a").unwrap(),
            token: Url::parse("http://as/t").unwrap(),
            resource: None,
            revocation: None,
            registration: Some(registration),
        };
        for (body, says) in [
            (b"not json".to_vec(), "no registration response"),
            (br#"{"client_id": ""}"#.to_vec(), "malformed"),
            (vec![b' '; 2 << 20], "more than"),
        ] {
            let e = client
                .register("gh", &endpoints(answering(body).await), "http://gw/cb")
                .await
                .err()
                .expect("refused");
            assert!(e.to_string().contains(says), "{e}");
        }
        let none = Endpoints {
            registration: None,
            ..endpoints(Url::parse("http://x").unwrap())
        };
        let e = client
            .register("gh", &none, "http://gw/cb")
            .await
            .err()
            .unwrap();
        assert!(e.to_string().contains("set client_id"), "{e}");
    }

    #[test]
    fn an_id_token_names_its_account_and_garbage_names_none() {
        let enc = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let token = |claims| Secret::new(format!("h.{}.s", enc(claims)));
        let t = token(serde_json::json!({"sub": "u1", "email": "a@example.com"}));
        assert_eq!(account_of(&t).as_deref(), Some("a@example.com"));
        let t = token(serde_json::json!({"sub": "u1", "name": "A\u{7}"}));
        assert_eq!(account_of(&t).as_deref(), Some("A"));
        assert_eq!(account_of(&Secret::new("not.base64!.x".into())), None);
        assert_eq!(account_of(&token(serde_json::json!({"aud": "x"}))), None);
    }

    #[test]
    fn a_challenge_names_its_metadata() {
        assert_eq!(
            resource_metadata_param(
                r#"Bearer error="invalid_token", resource_metadata="http://u/.well-known/oauth-protected-resource""#
            )
            .as_deref(),
            Some("http://u/.well-known/oauth-protected-resource")
        );
        assert_eq!(
            resource_metadata_param("Bearer resource_metadata=http://u/m, realm=x").as_deref(),
            Some("http://u/m")
        );
        assert_eq!(resource_metadata_param(r#"Bearer realm="x""#), None);
    }
}
