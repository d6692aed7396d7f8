//! The OAuth side of a person's credential (`kind = "oauth"`): sending them to sign in, the
//! callback that exchanges the code, and refreshing (with rotation) what they connected.
//! The HTTP client side lives in `oauth`; this is what `UserCredentials` does with it.

use std::sync::Arc;

use super::{
    OAUTH_BINDING, OAuthError, OAuthTarget, Plain, Refused, SealError, Ticket, UserCredentials,
    oauth,
};
use crate::secret::Secret;

impl UserCredentials {
    /// Refreshes the person's OAuth token unless someone did since `used` was read; the new
    /// (possibly rotated) tokens are stored. `None` when there is nothing to refresh with or
    /// the authorization server refused: the credential is dropped, the person is asked again.
    pub(super) async fn refresh(
        &self,
        owner: &str,
        upstream: &str,
        used: &str,
        target: OAuthTarget<'_>,
    ) -> Option<Secret> {
        let key = (owner.to_owned(), upstream.to_owned());
        let lock = self.refreshing.entry(key.clone()).or_default().clone();
        let fresh = async {
            let _one = lock.lock().await;
            let plain = self.stored(owner, upstream).await.ok()??;
            if plain.token != used && !plain.expiring() {
                return Some(Secret::new(plain.token));
            }
            let refresh = Secret::new(plain.refresh?);
            let granted = async {
                let endpoints = self
                    .oauth
                    .endpoints(upstream, target.upstream_url, target.settings)
                    .await?;
                self.oauth
                    .refresh(upstream, &endpoints, target.settings, &refresh)
                    .await
            }
            .await;
            match granted {
                Ok(mut g) => {
                    // Not every server rotates: the old refresh token then stays usable.
                    if g.refresh.is_none() {
                        g.refresh = Some(refresh);
                    }
                    if let Err(e) = self.put(owner, upstream, &Plain::granted(&g)).await {
                        tracing::warn!(upstream, "per-user credentials: {e}");
                    }
                    self.metrics.count(upstream, "refreshed");
                    Some(g.access)
                }
                Err(e) => {
                    tracing::info!(upstream, "refreshing a person's token failed: {e}");
                    self.metrics.count(upstream, "refresh_failed");
                    None
                }
            }
        }
        .await;
        drop(lock);
        self.refreshing
            .remove_if(&key, |_, l| Arc::strong_count(l) == 1);
        if fresh.is_none()
            && let Err(e) = self.store.remove(owner, Some(upstream)).await
        {
            tracing::warn!(
                upstream,
                "dropping a credential that cannot be refreshed failed: {e}"
            );
        }
        fresh
    }

    /// Where the authorization server sends the person back.
    pub fn redirect_uri(&self, upstream: &str) -> String {
        format!(
            "{}/connect/{upstream}/callback",
            self.base_url.read().trim_end_matches('/')
        )
    }

    /// The person the link was made for confirmed on the page: where to send them to sign
    /// in, and the nonce their browser keeps (a cookie) to come back with. The link is not
    /// claimed here (the person may start twice); the callback claims it.
    pub async fn authorize(
        &self,
        upstream: &str,
        state: &str,
        target: OAuthTarget<'_>,
    ) -> Result<(String, String), Refused> {
        let mut ticket = self.check_state(state, upstream).inspect_err(|_| {
            self.metrics.count(upstream, "refused");
        })?;
        let failed = |e: OAuthError| {
            tracing::warn!(upstream, "per-user OAuth: {e}");
            self.metrics.count(upstream, "failed");
            Refused::OAuth(e)
        };
        let endpoints = self
            .oauth
            .endpoints(upstream, target.upstream_url, target.settings)
            .await
            .map_err(failed)?;
        let verifier = hex::encode(
            self.sealer
                .random::<32>()
                .map_err(|e| failed(OAuthError::Client(upstream.to_owned(), e.to_string())))?,
        );
        ticket.verifier = Some(verifier.clone());
        let sealed = serde_json::to_vec(&ticket)
            .map_err(|e| SealError::Encode(e.to_string()))
            .and_then(|plain| self.sealer.seal(&plain, OAUTH_BINDING))
            .map_err(|e| failed(OAuthError::Client(upstream.to_owned(), e.to_string())))?;
        let url = self
            .oauth
            .authorize_url(
                upstream,
                &endpoints,
                target.settings,
                &self.redirect_uri(upstream),
                &hex::encode(sealed),
                &verifier,
            )
            .map_err(failed)?;
        Ok((url.into(), ticket.nonce))
    }

    /// The authorization server sent the person back: the state opens and is claimed once,
    /// the code is exchanged (with the PKCE verifier), the tokens are sealed and stored.
    pub async fn callback(
        &self,
        upstream: &str,
        query: &[(String, String)],
        browser: Option<&str>,
        target: OAuthTarget<'_>,
    ) -> Result<Ticket, Refused> {
        let field = |name: &str| {
            query
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let refused = |r: Refused| {
            self.metrics.count(upstream, "refused");
            r
        };
        let ticket = self
            .open_state(field("state").unwrap_or(""), upstream, OAUTH_BINDING)
            .map_err(refused)?;
        // The browser that proved who it is when the sign-in started carries its nonce: a
        // forwarded authorization link comes back to another browser.
        if browser != Some(ticket.nonce.as_str()) {
            return Err(refused(Refused::OtherBrowser));
        }
        if let Some(error) = field("error") {
            return Err(refused(Refused::Denied(error_code(error))));
        }
        let code = field("code")
            .filter(|c| !c.is_empty() && c.len() <= oauth::MAX_TOKEN_BYTES)
            .ok_or_else(|| refused(Refused::NoCode))?;
        let verifier = ticket
            .verifier
            .clone()
            .ok_or_else(|| refused(Refused::BadState))?;
        self.claim(upstream, &ticket).await?;
        let failed = |e: OAuthError| {
            tracing::warn!(upstream, "per-user OAuth: {e}");
            self.metrics.count(upstream, "failed");
            Refused::OAuth(e)
        };
        let endpoints = self
            .oauth
            .endpoints(upstream, target.upstream_url, target.settings)
            .await
            .map_err(failed)?;
        let granted = self
            .oauth
            .exchange(
                upstream,
                &endpoints,
                target.settings,
                code,
                &self.redirect_uri(upstream),
                &verifier,
            )
            .await
            .map_err(failed)?;
        self.connect(upstream, ticket, &Plain::granted(&granted))
            .await
    }
}

/// An authorization server's `error`, as the person is shown it: a well-formed code only.
pub(super) fn error_code(error: &str) -> String {
    if !error.is_empty()
        && error.len() <= 64
        && error
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        error.to_owned()
    } else {
        "an error".to_owned()
    }
}
