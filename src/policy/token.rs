//! Token injection (F10): upstream credentials come from references — `env:`, `file:`, `exec:`,
//! OAuth2 client credentials, RFC 8693 token exchange — are cached until shortly before they
//! expire, refreshed once when the upstream answers 401, and added to each upstream request.
//! The downstream client's own `Authorization` is never forwarded: fedgate builds every
//! upstream request itself.

use std::time::Duration;

use http::HeaderName;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::secret::{self, Secret};

/// A token is refreshed this long before it expires.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// How long the output of an `exec:` source is reused.
const EXEC_CACHE: Duration = Duration::from_secs(300);
/// Longest an OAuth token endpoint may take.
const TOKEN_ENDPOINT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read from an authorization server.
pub const MAX_TOKEN_RESPONSE: usize = 64 * 1024;

/// The HTTP client for authorization servers (token endpoints, discovery): a deadline on
/// every request, no redirect followed (a token request redirected elsewhere would carry the
/// client's credentials there). Bodies are read with `json_size::read_bounded`.
pub fn authorization_server_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(TOKEN_ENDPOINT_TIMEOUT)
        .connect_timeout(TOKEN_ENDPOINT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

/// Why a credential has no token now; names the credential, never a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("credential `{0}`: {1}")]
    Secret(String, secret::SecretError),
    #[error("credential `{0}`: client secret: {1}")]
    ClientSecret(String, secret::SecretError),
    #[error("credential `{0}`: subject token: {1}")]
    SubjectToken(String, secret::SecretError),
    #[error("credential `{0}` is per user: it has no token of its own")]
    PerUser(String),
    #[error("credential `{0}`: empty exec command")]
    EmptyExec(String),
    #[error("credential `{name}`: cannot run `{program}`: {detail}")]
    ExecFailed {
        name: String,
        program: String,
        detail: String,
    },
    #[error("credential `{name}`: token endpoint {detail}")]
    Endpoint { name: String, detail: String },
}

/// Where a credential comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `env:NAME` or `file:PATH`, read at every use (rotation needs no restart).
    Reference(String),
    /// `exec:COMMAND ARGS…`: the command's stdout, reused for a while.
    Exec(Vec<String>),
    /// OAuth2 client credentials grant.
    ClientCredentials(OAuth),
    /// RFC 8693 token exchange of a subject token (a secret reference) for an upstream token.
    TokenExchange { oauth: OAuth, subject_token: String },
    /// Each person's own token (`per_user`), collected on fedgate's connect page; it travels
    /// on that person's requests only (`crate::credentials`), never on shared ones.
    PerUser {
        hint: Option<String>,
        /// `kind = "oauth"`: the person signs in at the upstream's authorization server.
        oauth: Option<std::sync::Arc<PerUserOAuth>>,
    },
}

/// A per-user credential obtained with the authorization-code grant and PKCE. Secrets stay
/// references until used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerUserOAuth {
    /// A literal, or an `env:`/`file:` reference; `None`: fedgate registers itself at the
    /// authorization server (RFC 7591).
    pub client_id: Option<String>,
    /// `env:`/`file:` reference; `None` for a public client.
    pub client_secret: Option<String>,
    /// Both set, or both discovered from the upstream.
    pub endpoints: Option<(String, String)>,
    pub scopes: Vec<String>,
    pub resource: Option<String>,
    /// The RFC 7009 revocation endpoint, when configured (else discovered).
    pub revocation: Option<String>,
    /// An access token is refreshed when this share (percent) of its lifetime is left.
    pub refresh_margin_percent: u8,
}

/// Token endpoint settings; the secret stays a reference until used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuth {
    pub token_url: String,
    pub client_id: String,
    pub client_secret: String,
    pub scope: Option<String>,
    pub audience: Option<String>,
}

/// One configured credential with its cache.
#[derive(Debug)]
pub struct Credential {
    pub name: String,
    pub class: String,
    source: Source,
    cache: Mutex<Option<(Secret, Option<Instant>)>>,
    /// One fetch at a time: concurrent calls that find the token stale wait for it.
    fetching: tokio::sync::Mutex<()>,
    http: reqwest::Client,
}

impl Credential {
    pub fn new(name: String, class: String, source: Source) -> Self {
        Self {
            name,
            class,
            source,
            cache: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
            http: authorization_server_client(),
        }
    }

    /// Each caller brings their own token (`per_user`); `Some(hint)` says what to paste.
    pub fn per_user(&self) -> Option<Option<&str>> {
        match &self.source {
            Source::PerUser { hint, .. } => Some(hint.as_deref()),
            _ => None,
        }
    }

    /// The OAuth settings of a per-user credential of `kind = "oauth"`.
    pub fn per_user_oauth(&self) -> Option<&std::sync::Arc<PerUserOAuth>> {
        match &self.source {
            Source::PerUser { oauth, .. } => oauth.as_ref(),
            _ => None,
        }
    }

    /// Whether `other` is configured the same (same name, class and source references).
    pub fn same_config(&self, other: &Credential) -> bool {
        self.name == other.name && self.class == other.class && self.source == other.source
    }

    fn cached(&self) -> Option<Secret> {
        match self.cache.lock().as_ref() {
            Some((t, until)) if until.is_none_or(|u| Instant::now() < u) => Some(t.clone()),
            _ => None,
        }
    }

    /// The current token, from the cache while it is fresh; a stale one is fetched once
    /// however many calls need it at that moment.
    pub async fn token(&self) -> Result<Secret, TokenError> {
        if let Some(t) = self.cached() {
            return Ok(t);
        }
        let _one = self.fetching.lock().await;
        if let Some(t) = self.cached() {
            return Ok(t);
        }
        let (token, lifetime) = self.fetch().await?;
        let until = lifetime.map(|l| Instant::now() + l.saturating_sub(EXPIRY_MARGIN));
        if !matches!(self.source, Source::Reference(_)) {
            *self.cache.lock() = Some((token.clone(), until));
        }
        Ok(token)
    }

    /// Forgets the cached token if it is still `used`, the one the upstream answered 401 to
    /// (a burst of 401s refreshes once, not once per call).
    pub fn invalidate(&self, used: &Secret) {
        let mut cache = self.cache.lock();
        if cache
            .as_ref()
            .is_some_and(|(t, _)| t.expose() == used.expose())
        {
            *cache = None;
        }
    }

    async fn fetch(&self) -> Result<(Secret, Option<Duration>), TokenError> {
        let name = &self.name;
        match &self.source {
            Source::Reference(r) => secret::resolve(r)
                .map(|s| (s, None))
                .map_err(|e| TokenError::Secret(name.clone(), e)),
            Source::PerUser { .. } => Err(TokenError::PerUser(name.clone())),
            Source::Exec(argv) => {
                let (program, args) = argv
                    .split_first()
                    .ok_or_else(|| TokenError::EmptyExec(name.clone()))?;
                let failed = |detail: String| TokenError::ExecFailed {
                    name: name.clone(),
                    program: program.clone(),
                    detail,
                };
                let out = tokio::process::Command::new(program)
                    .args(args)
                    .output()
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                if !out.status.success() {
                    return Err(failed(format!("it exited with {}", out.status)));
                }
                let token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                Ok((Secret::new(token), Some(EXEC_CACHE)))
            }
            Source::ClientCredentials(o) => {
                let mut form = vec![("grant_type", "client_credentials".to_owned())];
                if let Some(s) = &o.scope {
                    form.push(("scope", s.clone()));
                }
                self.token_request(o, form).await
            }
            Source::TokenExchange {
                oauth,
                subject_token,
            } => {
                let subject = secret::resolve(subject_token)
                    .map_err(|e| TokenError::SubjectToken(name.clone(), e))?;
                let mut form = vec![
                    (
                        "grant_type",
                        "urn:ietf:params:oauth:grant-type:token-exchange".to_owned(),
                    ),
                    ("subject_token", subject.expose().to_owned()),
                    (
                        "subject_token_type",
                        "urn:ietf:params:oauth:token-type:access_token".to_owned(),
                    ),
                    (
                        "requested_token_type",
                        "urn:ietf:params:oauth:token-type:access_token".to_owned(),
                    ),
                ];
                if let Some(a) = &oauth.audience {
                    form.push(("audience", a.clone()));
                }
                if let Some(s) = &oauth.scope {
                    form.push(("scope", s.clone()));
                }
                self.token_request(oauth, form).await
            }
        }
    }

    async fn token_request(
        &self,
        o: &OAuth,
        form: Vec<(&'static str, String)>,
    ) -> Result<(Secret, Option<Duration>), TokenError> {
        let name = &self.name;
        let client_secret = secret::resolve(&o.client_secret)
            .map_err(|e| TokenError::ClientSecret(name.clone(), e))?;
        let endpoint = |detail: String| TokenError::Endpoint {
            name: name.clone(),
            detail,
        };
        let resp = self
            .http
            .post(&o.token_url)
            .basic_auth(&o.client_id, Some(client_secret.expose()))
            .form(&form)
            .send()
            .await
            .map_err(|e| endpoint(format!("unreachable: {}", e.without_url())))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(endpoint(format!("answered {status}")));
        }
        let body: serde_json::Value = crate::json_size::read_bounded(resp, MAX_TOKEN_RESPONSE)
            .await
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| endpoint("sent no JSON (or more than 64 KiB)".into()))?;
        let token = body
            .get("access_token")
            .and_then(|t| t.as_str())
            .ok_or_else(|| endpoint("answered without access_token".into()))?;
        let lifetime = body
            .get("expires_in")
            .and_then(|e| e.as_u64())
            .map(Duration::from_secs);
        Ok((Secret::new(token.to_owned()), lifetime))
    }
}

/// Where the token goes on HTTP requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// `Authorization: Bearer <token>`
    Bearer,
    /// `<header>: <token>`
    Header(HeaderName),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn file_and_exec_sources() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "from-file\n").unwrap();
        let cred = Credential::new(
            "f".into(),
            "internal".into(),
            Source::Reference(format!("file:{}", file.display())),
        );
        assert_eq!(cred.token().await.unwrap().expose(), "from-file");
        // Files are read at every use, so rotation needs no restart.
        std::fs::write(&file, "rotated").unwrap();
        assert_eq!(cred.token().await.unwrap().expose(), "rotated");

        let exec = Credential::new(
            "e".into(),
            "internal".into(),
            Source::Exec(vec!["echo".into(), "from-exec".into()]),
        );
        assert_eq!(exec.token().await.unwrap().expose(), "from-exec");
        let failing = Credential::new(
            "x".into(),
            "internal".into(),
            Source::Exec(vec!["false".into()]),
        );
        let err = failing.token().await.unwrap_err().to_string();
        assert!(
            err.contains("credential `x`") && err.contains("exited"),
            "{err}"
        );
        let missing = Credential::new(
            "m".into(),
            "internal".into(),
            Source::Reference("env:FEDGATE_SURELY_UNSET_TOKEN".into()),
        );
        assert!(
            missing
                .token()
                .await
                .unwrap_err()
                .to_string()
                .contains("FEDGATE_SURELY_UNSET_TOKEN")
        );
        assert!(
            !format!("{cred:?}").contains("rotated"),
            "Debug never shows a token"
        );
    }

    /// A token endpoint on loopback that answers every request with `answer` (raw HTTP) and
    /// counts the requests it got.
    async fn endpoint(answer: String) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(answer.as_bytes()).await;
            }
        });
        (url, hits)
    }

    fn client_credentials(token_url: String) -> Credential {
        Credential::new(
            "cc".into(),
            "internal".into(),
            Source::ClientCredentials(OAuth {
                token_url,
                client_id: "gw".into(),
                client_secret: "env:PATH".into(),
                scope: None,
                audience: None,
            }),
        )
    }

    #[tokio::test]
    async fn a_token_endpoint_that_redirects_is_not_followed() {
        // Where the redirect points: it must never see the client's credentials.
        let (elsewhere, elsewhere_hits) = endpoint(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 24\r\n\r\n{\"access_token\":\"stolen\"}".into(),
        )
        .await;
        let (url, hits) = endpoint(format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {elsewhere}\r\ncontent-length: 0\r\n\r\n"
        ))
        .await;
        let err = client_credentials(url)
            .token()
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("307"), "{err}");
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(elsewhere_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn an_oversized_token_response_is_refused() {
        let big = format!(
            "{{\"access_token\":\"{}\"}}",
            "x".repeat(MAX_TOKEN_RESPONSE)
        );
        let (url, _) = endpoint(format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{big}",
            big.len()
        ))
        .await;
        let err = client_credentials(url)
            .token()
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("64 KiB"), "{err}");
    }
}
