//! The OAuth side of a person's credential (`kind = "oauth"`): sending them to sign in, the
//! callback that exchanges the code, and refreshing (with rotation) what they connected.
//! The HTTP client side lives in `oauth`; this is what `UserCredentials` does with it.

use std::sync::Arc;

use super::{
    OAUTH_BINDING, OAuthError, OAuthTarget, Plain, Refresh, Refused, SealError, Ticket,
    UserCredentials, events::Event, oauth,
};
use crate::secret::Secret;

impl UserCredentials {
    /// Refreshes the person's OAuth token unless someone did since `used` was read; the new
    /// (possibly rotated) tokens are stored. `forced`: the upstream refused `used`, so it is
    /// no use even while unexpired. Only a grant the authorization server says is gone drops
    /// the credential; any other failure keeps it and backs off before the next try.
    pub(super) async fn refresh(
        &self,
        owner: &str,
        upstream: &str,
        used: &str,
        target: OAuthTarget<'_>,
        forced: bool,
    ) -> Refresh {
        let key = (owner.to_owned(), upstream.to_owned());
        let lock = self.refreshing.entry(key.clone()).or_default().clone();
        let outcome = {
            let _one = lock.lock().await;
            self.refresh_locked(owner, upstream, used, target, forced)
                .await
        };
        drop(lock);
        self.refreshing
            .remove_if(&key, |_, l| Arc::strong_count(l) == 1);
        outcome
    }

    async fn refresh_locked(
        &self,
        owner: &str,
        upstream: &str,
        used: &str,
        target: OAuthTarget<'_>,
        forced: bool,
    ) -> Refresh {
        let percent = target.settings.refresh_margin_percent;
        let o = match self.stored(owner, upstream).await {
            Ok(Some(o)) => o,
            Ok(None) => return Refresh::Gone,
            Err(e) => return Refresh::Store(e),
        };
        if o.plain.token != used && !o.plain.expiring(percent) {
            return Refresh::Fresh(Secret::new(o.plain.token));
        }
        let usable = !forced && !o.plain.expired();
        let key = (owner.to_owned(), upstream.to_owned());
        let now = crate::clock::now_ms();
        // A token the upstream refused is tried once more whatever the backoff: the call
        // cannot go on with it.
        let waiting = (!forced)
            .then(|| self.refresh_backoff.get(&key).map(|b| b.1))
            .flatten()
            .filter(|t| *t > now);
        let Some(refresh) = o.plain.refresh.clone().map(Secret::new) else {
            // Nothing to refresh with: the token serves until it expires, then the person
            // connects again.
            return if usable {
                Refresh::Kept(Secret::new(o.plain.token))
            } else {
                self.drop_credential(owner, upstream).await;
                Refresh::Gone
            };
        };
        if let Some(until) = waiting {
            return if usable {
                Refresh::Kept(Secret::new(o.plain.token))
            } else {
                Refresh::Unavailable(format!(
                    "it failed just before; next try in {} s",
                    (until - now).div_ceil(1000)
                ))
            };
        }
        let granted = async {
            let endpoints = self
                .oauth
                .endpoints(upstream, target.upstream_url, target.settings)
                .await?;
            let client = self.client_auth(upstream, target, &endpoints).await?;
            self.oauth.refresh(&endpoints, &client, &refresh).await
        }
        .await;
        match granted {
            Ok(mut g) => {
                // Not every server rotates: the old refresh token then stays usable.
                if g.refresh.is_none() {
                    g.refresh = Some(refresh);
                }
                let mut info = o.info;
                info.refreshed_at_ms = Some(crate::clock::now_ms());
                if g.scopes.is_some() {
                    info.scopes.clone_from(&g.scopes);
                }
                let plain = Plain::granted(&g);
                if let Err(e) = self
                    .put(owner, upstream, &plain, o.connected_at_ms, info)
                    .await
                {
                    tracing::warn!(upstream, "per-user credentials: {e}");
                }
                self.refresh_backoff.remove(&key);
                self.metrics.count(upstream, "refreshed");
                Refresh::Fresh(g.access)
            }
            Err(e) if e.grant_gone() => {
                tracing::info!(owner = %super::person(owner), upstream, "the authorization server says a person's grant is gone ({e}); they are asked to connect again");
                self.event(
                    Event::new(Some(owner), upstream, "refresh_failed").because("grant_gone"),
                );
                self.drop_credential(owner, upstream).await;
                Refresh::Gone
            }
            Err(e) => {
                let failures = self.refresh_backoff.get(&key).map_or(0, |b| b.0) + 1;
                let wait = backoff_ms(failures);
                self.refresh_backoff.insert(key, (failures, now + wait));
                tracing::warn!(owner = %super::person(owner), upstream, failures, "refreshing a person's token failed ({e}); the credential is kept, next try in {} s", wait / 1000);
                let reason = match e {
                    OAuthError::Unreachable(_) => "unreachable",
                    OAuthError::Refused { .. } => "refused",
                    _ => "not_understood",
                };
                self.event(Event::new(Some(owner), upstream, "refresh_failed").because(reason));
                if usable {
                    Refresh::Kept(Secret::new(o.plain.token))
                } else {
                    Refresh::Unavailable(e.to_string())
                }
            }
        }
    }

    async fn drop_credential(&self, owner: &str, upstream: &str) {
        self.refresh_backoff
            .remove(&(owner.to_owned(), upstream.to_owned()));
        if let Err(e) = self.store.remove(owner, Some(upstream)).await {
            tracing::warn!(
                upstream,
                "dropping a credential that cannot be refreshed failed: {e}"
            );
        }
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
        // 32 random bytes as base64url: the shortest verifier PKCE takes (43 characters).
        let verifier = super::state_text(
            &self
                .sealer
                .random::<32>()
                .map_err(|e| failed(OAuthError::Client(upstream.to_owned(), e.to_string())))?,
        );
        ticket.verifier = Some(verifier.clone());
        let sealed = serde_json::to_vec(&ticket)
            .map_err(|e| SealError::Encode(e.to_string()))
            .and_then(|plain| self.sealer.seal(&plain, OAUTH_BINDING))
            .map_err(|e| failed(OAuthError::Client(upstream.to_owned(), e.to_string())))?;
        let client = self
            .client_auth(upstream, target, &endpoints)
            .await
            .map_err(failed)?;
        let url = self.oauth.authorize_url(
            &endpoints,
            &client,
            &self.redirect_uri(upstream),
            &super::state_text(&sealed),
            &verifier,
            &asked(target, &ticket),
        );
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
        let refused = |owner: Option<&str>, r: Refused| {
            self.metrics.count(upstream, "refused");
            self.event(Event::new(owner, upstream, "callback_refused").because(r.code()));
            r
        };
        let ticket = self
            .open_state(field("state").unwrap_or(""), upstream, OAUTH_BINDING)
            .map_err(|r| refused(None, r))?;
        let owner = Some(ticket.owner.as_str());
        // The browser that proved who it is when the sign-in started carries its nonce: a
        // forwarded authorization link comes back to another browser.
        if browser != Some(ticket.nonce.as_str()) {
            return Err(refused(owner, Refused::OtherBrowser));
        }
        if let Some(error) = field("error") {
            return Err(refused(owner, Refused::Denied(error_code(error))));
        }
        let code = field("code")
            .filter(|c| !c.is_empty() && c.len() <= oauth::MAX_TOKEN_BYTES)
            .ok_or_else(|| refused(owner, Refused::NoCode))?;
        let verifier = ticket
            .verifier
            .clone()
            .ok_or_else(|| refused(owner, Refused::BadState))?;
        // `claim` counts its own refusals.
        self.claim(upstream, &ticket).await.inspect_err(|r| {
            self.event(Event::new(owner, upstream, "callback_refused").because(r.code()));
        })?;
        let failed = |e: OAuthError| {
            tracing::warn!(upstream, "per-user OAuth: {e}");
            self.metrics.count(upstream, "failed");
            refused(owner, Refused::OAuth(e))
        };
        let endpoints = self
            .oauth
            .endpoints(upstream, target.upstream_url, target.settings)
            .await
            .map_err(failed)?;
        let client = self
            .client_auth(upstream, target, &endpoints)
            .await
            .map_err(failed)?;
        let granted = self
            .oauth
            .exchange(
                &endpoints,
                &client,
                code,
                &self.redirect_uri(upstream),
                &verifier,
            )
            .await
            .map_err(failed)?;
        // A token response without `scope` was granted what was asked (RFC 6749 5.1).
        let asked = asked(target, &ticket);
        let info = super::Info {
            scopes: granted.scopes.clone().or_else(|| Some(asked.clone())),
            account: granted.id_token.as_ref().and_then(oauth::account_of),
            asked_scopes: Some(asked),
            ..Default::default()
        };
        self.connect(upstream, ticket, &Plain::granted(&granted), info)
            .await
    }
}

/// The scopes a sign-in asks for: the configured ones, then those a step-up added.
fn asked(target: OAuthTarget<'_>, ticket: &Ticket) -> Vec<String> {
    let mut scopes = target.settings.scopes.clone();
    for s in &ticket.scopes {
        if !scopes.contains(s) {
            scopes.push(s.clone());
        }
    }
    scopes
}

/// How long to wait before trying a failed refresh again: 2 s doubling per failure in a row,
/// at most 5 minutes.
fn backoff_ms(failures: u32) -> u64 {
    const FIRST_MS: u64 = 2_000;
    const MOST_MS: u64 = 300_000;
    FIRST_MS
        .saturating_mul(1u64 << failures.saturating_sub(1).min(16))
        .min(MOST_MS)
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
