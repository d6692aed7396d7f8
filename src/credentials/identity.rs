//! The browser shows a connect page who it is by signing in at the organisation's identity
//! provider (`[auth.jwt.sign_in]`): OpenID Connect's code flow with PKCE and a nonce, coming
//! back to `/connect/~signed-in` only in the browser that started it (a cookie). The ID
//! token must be signed by the provider's published keys, be for this gateway's client id,
//! carry the nonce, and name the person the link was made for with the claim callers' tokens
//! name them by (same issuer, same subject). Only then does the page go on: to the
//! upstream's own sign-in, or to the form a token is pasted into (which carries a sealed
//! "signed in" mark bound to that browser and that link).

use serde::{Deserialize, Serialize};

use super::{OAuthError, Refused, SealError, Ticket, UserCredentials, oauth};
use crate::{policy::identity::SignIn, policy::token::PerUserOAuth};

/// The path (under `/connect/`) the identity provider sends the browser back to; no upstream
/// can be named so (`~` is not allowed in upstream names).
pub const SIGNED_IN_PATH: &str = "~signed-in";

/// The state sent to the identity provider.
const IDENTITY_BINDING: &[u8] = b"connect-identity";
/// The mark a signed-in browser's token form carries.
const SIGNED_IN_BINDING: &[u8] = b"connect-signed-in";
/// Names `SignIn`'s client in errors.
const CLIENT: &str = "auth.jwt.sign_in";

/// What the identity provider's `state` holds.
#[derive(Serialize, Deserialize)]
struct Started {
    /// The connect link's own state.
    #[serde(rename = "l")]
    link: String,
    #[serde(rename = "u")]
    upstream: String,
    /// The nonce the browser's cookie holds.
    #[serde(rename = "b")]
    browser: String,
    /// The OpenID nonce the ID token must carry.
    #[serde(rename = "n")]
    nonce: String,
    #[serde(rename = "v")]
    verifier: String,
    #[serde(rename = "e")]
    expires_at_ms: u64,
}

/// What a signed-in browser's token form carries.
#[derive(Serialize, Deserialize)]
struct Mark {
    /// The link's nonce.
    #[serde(rename = "n")]
    link: String,
    #[serde(rename = "o")]
    owner: String,
    #[serde(rename = "b")]
    browser: String,
    #[serde(rename = "e")]
    expires_at_ms: u64,
}

/// A browser that signed in as the person its link was made for.
#[derive(Debug)]
pub struct Proven {
    /// The connect link's state.
    pub state: String,
    pub ticket: Ticket,
    /// For the token form: the sealed mark [`UserCredentials::is_signed_in`] checks.
    pub mark: String,
}

/// The identity provider's client, its references resolved.
fn client(s: &SignIn) -> Result<oauth::ClientAuth, Refused> {
    let settings = PerUserOAuth {
        client_id: Some(s.client_id.clone()),
        client_secret: s.client_secret.clone(),
        endpoints: None,
        scopes: s.scopes.clone(),
        resource: None,
        revocation: None,
        refresh_margin_percent: 10,
    };
    oauth::ClientAuth::configured(CLIENT, &settings)
        .map_err(Refused::OAuth)?
        .ok_or_else(|| Refused::OAuth(OAuthError::Client(CLIENT.into(), "no client id".into())))
}

fn sealing(e: impl std::fmt::Display) -> Refused {
    Refused::OAuth(OAuthError::Client(CLIENT.into(), e.to_string()))
}

impl UserCredentials {
    fn seal_json(&self, value: &impl Serialize, binding: &[u8]) -> Result<String, SealError> {
        let plain = serde_json::to_vec(value).map_err(|e| SealError::Encode(e.to_string()))?;
        Ok(super::state_text(&self.sealer.seal(&plain, binding)?))
    }

    fn open_json<T: serde::de::DeserializeOwned>(&self, sealed: &str, binding: &[u8]) -> Option<T> {
        let sealed = super::state_bytes(sealed)?;
        let plain = self.sealer.open(&sealed, binding).ok()?;
        serde_json::from_slice(&plain).ok()
    }

    /// Where the identity provider sends the browser back.
    pub fn signed_in_uri(&self) -> String {
        format!(
            "{}/connect/{SIGNED_IN_PATH}",
            self.base_url.read().trim_end_matches('/')
        )
    }

    /// The person the link `state` was made for confirmed its page: where to send them to
    /// sign in, and the nonce their browser keeps (a cookie) to come back with.
    pub async fn start_sign_in(
        &self,
        state: &str,
        ticket: &Ticket,
        settings: &SignIn,
    ) -> Result<(String, String), Refused> {
        let provider = self.provider(settings).await?;
        let random = || self.sealer.random::<32>().map(hex::encode).map_err(sealing);
        let started = Started {
            link: state.trim().to_owned(),
            upstream: ticket.upstream.clone(),
            browser: random()?,
            nonce: random()?,
            verifier: random()?,
            expires_at_ms: ticket.expires_at_ms,
        };
        let sealed = self
            .seal_json(&started, IDENTITY_BINDING)
            .map_err(sealing)?;
        let mut url = self.oauth.authorize_url(
            &provider.endpoints,
            &client(settings)?,
            &self.signed_in_uri(),
            &sealed,
            &started.verifier,
            &settings.scopes,
        );
        url.query_pairs_mut().append_pair("nonce", &started.nonce);
        Ok((url.into(), started.browser))
    }

    async fn provider(&self, settings: &SignIn) -> Result<oauth::Provider, Refused> {
        self.oauth.provider(&settings.issuer).await.map_err(|e| {
            tracing::warn!("connect page sign-in: {e}");
            Refused::OAuth(e)
        })
    }

    /// The identity provider sent the browser back: if this browser started it, the code is
    /// exchanged and the ID token must name the person the link was made for. A sign-in as
    /// someone else counts as a wrong proof on that link.
    pub async fn finish_sign_in(
        &self,
        query: &[(String, String)],
        browser: Option<&str>,
        settings: &SignIn,
    ) -> Result<Proven, Refused> {
        let field = |name: &str| {
            query
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let started: Started = self
            .open_json(field("state").unwrap_or(""), IDENTITY_BINDING)
            .ok_or(Refused::BadState)?;
        let upstream = started.upstream.clone();
        let refused = |r: Refused| {
            self.metrics.count(&upstream, "refused");
            r
        };
        let ticket = self
            .check_state(&started.link, &upstream)
            .map_err(refused)?;
        if browser != Some(started.browser.as_str()) {
            return Err(refused(Refused::OtherBrowser));
        }
        if let Some(error) = field("error") {
            return Err(refused(Refused::Denied(super::sign_in::error_code(error))));
        }
        let code = field("code")
            .filter(|c| !c.is_empty() && c.len() <= oauth::MAX_TOKEN_BYTES)
            .ok_or_else(|| refused(Refused::NoCode))?;
        let subject = self
            .signed_in_subject(settings, code, &started)
            .await
            .map_err(refused)?;
        if format!("jwt:{subject}") != ticket.owner {
            self.proof_failed(&started.link, &ticket);
            tracing::warn!(
                upstream,
                "a connect link was signed in to by someone it was not made for; nothing was stored"
            );
            return Err(refused(Refused::NotYou(super::person(&ticket.owner))));
        }
        let mark = Mark {
            link: ticket.nonce.clone(),
            owner: ticket.owner.clone(),
            browser: started.browser,
            expires_at_ms: ticket.expires_at_ms,
        };
        let mark = self.seal_json(&mark, SIGNED_IN_BINDING).map_err(sealing)?;
        Ok(Proven {
            state: started.link,
            ticket,
            mark,
        })
    }

    /// Exchanges the code and returns the subject its verified ID token names.
    async fn signed_in_subject(
        &self,
        settings: &SignIn,
        code: &str,
        started: &Started,
    ) -> Result<String, Refused> {
        let provider = self.provider(settings).await?;
        let granted = self
            .oauth
            .exchange(
                &provider.endpoints,
                &client(settings)?,
                code,
                &self.signed_in_uri(),
                &started.verifier,
            )
            .await
            .map_err(Refused::OAuth)?;
        let id_token = granted
            .id_token
            .ok_or(Refused::IdToken(IdTokenRefusal::Missing))?;
        let keys = self
            .oauth
            .keys(&provider.jwks)
            .await
            .map_err(Refused::OAuth)?;
        let client_id =
            oauth::resolve("client id", &settings.client_id, CLIENT).map_err(Refused::OAuth)?;
        verify_id_token(
            id_token.expose(),
            &keys,
            &Expected {
                issuer: &settings.issuer,
                client_id: client_id.expose(),
                nonce: &started.nonce,
                subject_claim: &settings.subject_claim,
            },
        )
        .map_err(Refused::IdToken)
    }

    /// Whether a token form's `mark` says this browser signed in as the link's person.
    pub fn is_signed_in(&self, mark: &str, ticket: &Ticket, browser: Option<&str>) -> bool {
        self.open_json::<Mark>(mark, SIGNED_IN_BINDING)
            .is_some_and(|m| {
                m.link == ticket.nonce
                    && m.owner == ticket.owner
                    && browser == Some(m.browser.as_str())
                    && m.expires_at_ms >= crate::clock::now_ms()
            })
    }
}

/// What an ID token must say.
struct Expected<'a> {
    issuer: &'a str,
    client_id: &'a str,
    nonce: &'a str,
    subject_claim: &'a str,
}

/// Algorithms an ID token may be signed with: the provider's published (public) keys only.
const SIGNATURES: [jsonwebtoken::Algorithm; 8] = {
    use jsonwebtoken::Algorithm::*;
    [RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384]
};

/// Why an identity provider's ID token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdTokenRefusal {
    #[error("it sent no ID token")]
    Missing,
    #[error("the ID token is no JWT")]
    NotJwt,
    #[error("the ID token is signed with {0:?}, not with a published key")]
    Algorithm(jsonwebtoken::Algorithm),
    #[error("no published key signed the ID token")]
    NoKey,
    #[error("the provider's key is not usable")]
    UnusableKey,
    /// Expired, not yet valid, for another issuer or audience, badly signed (the reason).
    #[error("the ID token is {0}")]
    Invalid(String),
    #[error("the ID token is for another sign-in (nonce)")]
    Nonce,
    #[error(transparent)]
    Subject(#[from] crate::policy::identity::AuthError),
}

/// The subject a verified ID token names, or why it is not accepted.
fn verify_id_token(
    token: &str,
    keys: &jsonwebtoken::jwk::JwkSet,
    expected: &Expected<'_>,
) -> Result<String, IdTokenRefusal> {
    let header = jsonwebtoken::decode_header(token).map_err(|_| IdTokenRefusal::NotJwt)?;
    if !SIGNATURES.contains(&header.alg) {
        return Err(IdTokenRefusal::Algorithm(header.alg));
    }
    let jwk = match &header.kid {
        Some(kid) => keys.find(kid),
        None if keys.keys.len() == 1 => keys.keys.first(),
        None => None,
    }
    .ok_or(IdTokenRefusal::NoKey)?;
    let key = jsonwebtoken::DecodingKey::from_jwk(jwk).map_err(|_| IdTokenRefusal::UnusableKey)?;
    let mut v = jsonwebtoken::Validation::new(header.alg);
    v.set_issuer(&[expected.issuer]);
    v.set_audience(&[expected.client_id]);
    v.set_required_spec_claims(&["exp", "iss", "aud"]);
    let claims = jsonwebtoken::decode::<serde_json::Value>(token, &key, &v)
        .map_err(|e| IdTokenRefusal::Invalid(crate::policy::identity::jwt_reason(&e)))?
        .claims;
    if claims.get("nonce").and_then(|n| n.as_str()) != Some(expected.nonce) {
        return Err(IdTokenRefusal::Nonce);
    }
    Ok(crate::policy::identity::subject(
        &claims,
        expected.subject_claim,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected() -> Expected<'static> {
        Expected {
            issuer: "https://idp.example",
            client_id: "fedgate",
            nonce: "n",
            subject_claim: "sub",
        }
    }

    #[test]
    fn an_id_token_signed_with_a_shared_secret_or_not_at_all_is_refused() {
        let claims = serde_json::json!({
            "iss": "https://idp.example", "aud": "fedgate", "sub": "bob", "nonce": "n",
            "exp": crate::clock::now_ms() / 1000 + 600,
        });
        // HS256 with the client secret would let anyone who holds it mint a sign-in.
        let hs = jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(b"client-secret").expect("key"),
        )
        .expect("encode");
        let keys = jsonwebtoken::jwk::JwkSet { keys: Vec::new() };
        let why = verify_id_token(&hs, &keys, &expected()).expect_err("refused");
        assert!(
            why.to_string().contains("not with a published key"),
            "{why}"
        );
        let none = format!("eyJhbGciOiJub25lIn0.{}.", {
            use base64::Engine as _;
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string())
        });
        assert!(verify_id_token(&none, &keys, &expected()).is_err());
        let why = verify_id_token("not a token", &keys, &expected()).expect_err("refused");
        assert_eq!(why, IdTokenRefusal::NotJwt);
    }
}
