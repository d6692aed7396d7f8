//! Dynamic client registration (RFC 7591): with no `client_id` configured, fedgate registers
//! itself at the authorization server it discovered, once per upstream and redirect URI, and
//! keeps the registration sealed in the credential store, so a restart and every replica
//! sharing the store use the same client.

use serde::Deserialize;

use super::{
    CredentialError, Info, OAuthError, OAuthTarget, REGISTRATION_OWNER, SealError, UserCredentials,
    bound,
    oauth::{self, ClientAuth, Endpoints, OAuthClient},
    store,
};
use crate::secret::Secret;

/// What dynamic registration gave (RFC 7591 3.2.1), as it is kept (sealed). No `Debug`: it
/// holds the client secret.
#[derive(Clone, serde::Serialize, Deserialize)]
pub struct Registered {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The redirect URI registered: a changed public URL registers again.
    pub redirect_uri: String,
    /// When the secret expires (ms), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_expires_at_ms: Option<u64>,
}

impl Registered {
    /// Usable for `redirect_uri` now.
    pub fn fits(&self, redirect_uri: &str) -> bool {
        self.redirect_uri == redirect_uri
            && self
                .secret_expires_at_ms
                .is_none_or(|e| e > crate::clock::now_ms() + 60_000)
    }

    pub fn auth(&self) -> ClientAuth {
        ClientAuth {
            id: Secret::new(self.client_id.clone()),
            secret: self.client_secret.clone().map(Secret::new),
        }
    }
}

#[derive(Deserialize)]
struct RegistrationResponse {
    client_id: String,
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    client_secret_expires_at: Option<u64>,
}

impl OAuthClient {
    /// Registers fedgate as a client of the server (RFC 7591), with `redirect_uri` as its one
    /// redirect URI: a confidential client when the server gives a secret, else a public one.
    pub async fn register(
        &self,
        upstream: &str,
        endpoints: &Endpoints,
        redirect_uri: &str,
    ) -> Result<Registered, OAuthError> {
        let Some(url) = &endpoints.registration else {
            return Err(OAuthError::Client(
                upstream.to_owned(),
                "no client_id is configured and the authorization server offers no dynamic registration (RFC 7591): register fedgate there and set client_id".into(),
            ));
        };
        let sent = self
            .http
            .post(url.clone())
            .header(http::header::ACCEPT, "application/json")
            .json(&serde_json::json!({
                "client_name": "fedgate",
                "redirect_uris": [redirect_uri],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "client_secret_basic",
            }))
            .send()
            .await;
        let body = oauth::answered(sent).await?;
        let r: RegistrationResponse = serde_json::from_slice(&body).map_err(|_| {
            OAuthError::Garbage("no registration response (JSON with client_id)".into())
        })?;
        if !oauth::is_token(&r.client_id)
            || r.client_secret
                .as_deref()
                .is_some_and(|s| !oauth::is_token(s))
        {
            return Err(OAuthError::Garbage(
                "the registered client id or secret is empty, too long or malformed".into(),
            ));
        }
        Ok(Registered {
            client_id: r.client_id,
            client_secret: r.client_secret,
            redirect_uri: redirect_uri.to_owned(),
            secret_expires_at_ms: r
                .client_secret_expires_at
                .filter(|&s| s > 0)
                .map(|s| s.saturating_mul(1000)),
        })
    }
}

impl UserCredentials {
    /// How fedgate authenticates to `upstream`'s authorization server: the configured client,
    /// else the one it registered there (RFC 7591) — once per upstream and redirect URI, kept
    /// sealed in the store for every replica and restart.
    pub(super) async fn client_auth(
        &self,
        upstream: &str,
        target: OAuthTarget<'_>,
        endpoints: &Endpoints,
    ) -> Result<ClientAuth, OAuthError> {
        if let Some(c) = ClientAuth::configured(upstream, target.settings)? {
            return Ok(c);
        }
        let redirect = self.redirect_uri(upstream);
        if let Some(r) = self
            .registrations
            .get(upstream)
            .filter(|r| r.fits(&redirect))
        {
            return Ok(r.auth());
        }
        let lock = self
            .registering
            .entry(upstream.to_owned())
            .or_default()
            .clone();
        let _one = lock.lock().await;
        let stored = self.stored_registration(upstream).await;
        let registered = match stored.filter(|r| r.fits(&redirect)) {
            Some(r) => r,
            None => {
                let r = self.oauth.register(upstream, endpoints, &redirect).await?;
                self.put_registration(upstream, &r).await;
                tracing::info!(
                    upstream,
                    "registered at the authorization server (RFC 7591)"
                );
                self.metrics.count(upstream, "registered");
                r
            }
        };
        let auth = registered.auth();
        self.registrations.insert(upstream.to_owned(), registered);
        Ok(auth)
    }

    async fn stored_registration(&self, upstream: &str) -> Option<Registered> {
        let stored = self.store.get(REGISTRATION_OWNER, upstream).await.ok()??;
        let sealed = hex::decode(&stored.sealed).ok()?;
        let plain = self
            .sealer
            .open(&sealed, &bound(REGISTRATION_OWNER, upstream))
            .ok()?;
        serde_json::from_slice(&plain).ok()
    }

    async fn put_registration(&self, upstream: &str, r: &Registered) {
        let sealed = serde_json::to_vec(r)
            .map_err(|e| SealError::Encode(e.to_string()))
            .and_then(|plain| {
                self.sealer
                    .seal(&plain, &bound(REGISTRATION_OWNER, upstream))
            });
        let stored = sealed.map(|s| store::Stored {
            sealed: hex::encode(s),
            connected_at_ms: crate::clock::now_ms(),
            info: Info::default(),
            last_used_ms: None,
        });
        let put = match stored {
            Ok(s) => self
                .store
                .put(REGISTRATION_OWNER, upstream, &s)
                .await
                .map_err(CredentialError::from),
            Err(e) => Err(e.into()),
        };
        if let Err(e) = put {
            tracing::warn!(
                upstream,
                "keeping the client registration failed (it is registered again after a restart): {e}"
            );
        }
    }
}
