//! What a person (or an operator) does with connected accounts: each use noted, accounts
//! listed and forgotten — revoked at the authorization server first where it can be — and the
//! grant an account page's buttons carry.

use super::{
    ACCOUNT_BINDING, ACCOUNT_GRANT_TTL, Connected, CredentialError, Forgot, MAX_REMEMBERED_LINKS,
    OAuthTarget, Plain, SealError, TOUCH_EVERY_MS, UserCredentials, events, person, state_bytes,
    state_text,
};
use crate::secret::Secret;

impl UserCredentials {
    /// Notes that a call used the person's credential, at most once a minute per credential
    /// on this replica (the admin list shows it as `last_used_ms`).
    pub async fn touch(&self, owner: &str, upstream: &str) {
        let now = crate::clock::now_ms();
        let key = (owner.to_owned(), upstream.to_owned());
        if self
            .touched
            .get(&key)
            .is_some_and(|at| now.saturating_sub(*at) < TOUCH_EVERY_MS)
        {
            return;
        }
        if self.touched.len() >= MAX_REMEMBERED_LINKS {
            self.touched
                .retain(|_, at| now.saturating_sub(*at) < TOUCH_EVERY_MS);
        }
        self.touched.insert(key, now);
        if let Err(e) = self.store.touch(owner, upstream, now).await {
            tracing::debug!(upstream, "noting a credential's use failed: {e}");
        }
    }

    /// Forgets one or all of a person's credentials, revoking each OAuth grant at its
    /// authorization server first (RFC 7009) when it has a revocation endpoint. `by` is who
    /// asked when it was not the person (`admin`).
    pub async fn revoke(
        &self,
        owner: &str,
        upstream: Option<&str>,
        by: Option<&str>,
    ) -> Result<Vec<Forgot>, CredentialError> {
        let upstreams: Vec<String> = match upstream {
            Some(u) => vec![u.to_owned()],
            None => self.store.owned(owner).await?,
        };
        let mut forgot = Vec::new();
        for u in upstreams {
            let opened = self.stored(owner, &u).await?;
            let at_provider = match &opened {
                Some(o) => self.revoke_at_provider(&u, &o.plain).await,
                None => "no_endpoint",
            };
            if self.store.remove(owner, Some(&u)).await? == 0 {
                continue;
            }
            tracing::info!(
                owner = %person(owner),
                upstream = %u,
                by = by.unwrap_or("the person"),
                at_provider,
                "per-user credential forgotten"
            );
            self.event(events::Event {
                by,
                at_provider: Some(at_provider),
                ..events::Event::new(Some(owner), &u, "revoked")
            });
            forgot.push(Forgot {
                upstream: u,
                at_provider,
            });
        }
        Ok(forgot)
    }

    /// Revokes a credential's grant at its authorization server: the refresh token (which
    /// revokes the access tokens issued from it too), else the access token.
    async fn revoke_at_provider(&self, upstream: &str, plain: &Plain) -> &'static str {
        let Some((settings, url)) = self.targets.read().as_ref().and_then(|t| t(upstream)) else {
            return "no_endpoint";
        };
        let endpoints = match self.oauth.endpoints(upstream, &url, &settings).await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(upstream, "revoking at the authorization server: {e}");
                return "failed";
            }
        };
        let (token, hint) = match &plain.refresh {
            Some(r) => (Secret::new(r.clone()), "refresh_token"),
            None => (Secret::new(plain.token.clone()), "access_token"),
        };
        let target = OAuthTarget {
            settings: &settings,
            upstream_url: &url,
        };
        let revoked = match self.client_auth(upstream, target, &endpoints).await {
            Ok(client) => self.oauth.revoke(&endpoints, &client, &token, hint).await,
            Err(e) => Err(e),
        };
        match revoked {
            Ok(true) => "revoked",
            Ok(false) => "no_endpoint",
            Err(e) => {
                tracing::warn!(upstream, "revoking at the authorization server: {e}");
                "failed"
            }
        }
    }

    /// The person's connections (at most `most`), and how many more there are.
    pub async fn connections_of(
        &self,
        owner: &str,
        most: usize,
    ) -> Result<(Vec<Connected>, usize), CredentialError> {
        let upstreams = self.store.owned(owner).await?;
        let more = upstreams.len().saturating_sub(most);
        let mut out = Vec::new();
        for upstream in upstreams.into_iter().take(most) {
            if let Some(s) = self.store.get(owner, &upstream).await? {
                out.push(Connected {
                    owner: owner.to_owned(),
                    upstream,
                    connected_at_ms: s.connected_at_ms,
                    info: s.info,
                    last_used_ms: s.last_used_ms,
                });
            }
        }
        Ok((out, more))
    }

    /// A sealed grant naming `owner` for [`ACCOUNT_GRANT_TTL`]: what an account page's
    /// buttons carry once the browser proved it is them.
    pub fn account_grant(&self, owner: &str) -> Result<String, SealError> {
        let until = crate::clock::now_ms() + ACCOUNT_GRANT_TTL.as_millis() as u64;
        let plain =
            serde_json::to_vec(&(owner, until)).map_err(|e| SealError::Encode(e.to_string()))?;
        Ok(state_text(&self.sealer.seal(&plain, ACCOUNT_BINDING)?))
    }

    /// The person an unexpired account grant names.
    pub fn open_account_grant(&self, grant: &str) -> Option<String> {
        let sealed = state_bytes(grant)?;
        let plain = self.sealer.open(&sealed, ACCOUNT_BINDING).ok()?;
        let (owner, until): (String, u64) = serde_json::from_slice(&plain).ok()?;
        (until >= crate::clock::now_ms()).then_some(owner)
    }
}
