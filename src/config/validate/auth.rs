//! `[auth]` and `[roles]`: API keys, JWT, OAuth metadata, client certificates, role globs.

use std::{collections::BTreeMap, sync::Arc};

use globset::Glob;
use jsonwebtoken::{Algorithm, DecodingKey};
use toml::Spanned;

use super::{Ctx, upstreams::Tiers};
use crate::{
    config::{RawAuth, RawRole},
    policy::{
        authz::{Role, Roles},
        identity::{ApiKey, Authenticator, JwtConfig, ResourceMetadata, SignIn, load_jwks},
    },
    secret,
};

pub(super) fn validate_auth(
    cx: &mut Ctx<'_>,
    raw: Option<Spanned<RawAuth>>,
    raw_roles: BTreeMap<String, RawRole>,
    tiers: &mut Tiers,
    naming: &crate::names::Naming,
    views: &crate::policy::view::Views,
) -> Authenticator {
    let mut roles = Roles::default();
    for (name, r) in raw_roles {
        let max_rank = r.max_tier.as_ref().map(|t| match tiers.get(t.get_ref()) {
            Ok(tier) => tier.rank,
            Err(diags) => {
                tiers.refuse(cx, t, &format!("role `{name}`: max_tier"), diags);
                0
            }
        });
        let view = r.view.as_ref().and_then(|v| match views.get(v.get_ref()) {
            Some(view) => Some(view.scope.clone()),
            None => {
                cx.err_at(
                    v.span().start,
                    format!(
                        "role `{name}`: unknown view `{}` (views: {})",
                        v.get_ref(),
                        listed(&views.names())
                    ),
                );
                None
            }
        });
        let owner = format!("role `{name}`");
        let role = Role {
            tools: globs(cx, &owner, &r.tools, Some(naming)),
            prompts: globs(cx, &owner, &r.prompts, Some(naming)),
            resources: globs(cx, &owner, &r.resources, None),
            max_rank,
            secrets_in_results: r.secrets_in_results,
            view,
        };
        roles.0.insert(name, role);
    }
    let Some(raw) = raw else {
        return Authenticator::open();
    };
    let at = raw.span().start;
    let raw = raw.into_inner();
    let known = |cx: &mut Ctx<'_>, list: &[Spanned<String>]| -> Vec<String> {
        for r in list {
            if !roles.0.contains_key(r.get_ref()) {
                cx.err_at(
                    r.span().start,
                    format!(
                        "unknown role `{}`: define it under [roles.{}]",
                        r.get_ref(),
                        r.get_ref()
                    ),
                );
            }
        }
        list.iter().map(|r| r.get_ref().clone()).collect()
    };
    let anonymous_roles = known(cx, &raw.anonymous_roles);
    let mut api_keys = Vec::new();
    for k in &raw.api_keys {
        let digest = hex::decode(k.sha256.get_ref().trim())
            .ok()
            .and_then(|d| <[u8; 32]>::try_from(d).ok());
        let roles = known(cx, &k.roles);
        if k.name.is_empty() || k.name.len() > 256 || k.name.chars().any(char::is_control) {
            cx.err_at(
                k.sha256.span().start,
                format!(
                    "API key `{}`: a name is 1 to 256 bytes without control characters (it names the person)",
                    crate::names::shown(&k.name)
                ),
            );
        }
        match digest {
            Some(sha256) => api_keys.push(ApiKey {
                name: k.name.clone(),
                sha256,
                roles,
            }),
            None => cx.err_at(
                k.sha256.span().start,
                format!(
                    "API key `{}`: sha256 must be 64 hex digits (e.g. `printf %s KEY | sha256sum`)",
                    k.name
                ),
            ),
        }
    }
    let jwt = raw.jwt.map(|j| {
        let mut keys = Vec::new();
        if let Some(s) = &j.hs256_secret {
            let key = secret::resolve(s.get_ref())
                .map_err(|e| e.to_string())
                .and_then(|secret| {
                    DecodingKey::from_secret(secret.expose().as_bytes()).map_err(|e| e.to_string())
                });
            match key {
                Ok(key) => keys.push((None, Algorithm::HS256, key)),
                Err(e) => cx.secret_problem(s.span().start, format!("auth.jwt.hs256_secret: {e}")),
            }
        }
        if let Some(f) = &j.jwks_file {
            match load_jwks(f.get_ref()) {
                Ok(k) => keys.extend(k),
                Err(e) => cx.err_at(f.span().start, e.to_string()),
            }
        }
        if j.hs256_secret.is_none() && j.jwks_file.is_none() {
            cx.err_at(at, "[auth.jwt] needs `hs256_secret` or `jwks_file`".into());
        }
        let subject_claim = j.subject_claim.unwrap_or_else(|| "sub".into());
        let sign_in = j
            .sign_in
            .and_then(|s| sign_in(cx, s, j.issuer.as_deref(), &subject_claim))
            .map(Arc::new);
        JwtConfig {
            keys,
            issuer: j.issuer,
            audience: j.audience,
            roles_claim: j.roles_claim.unwrap_or_else(|| "roles".into()),
            subject_claim,
            sign_in,
        }
    });
    let cert_roles: Vec<(String, Vec<String>, bool)> = raw
        .client_certs
        .iter()
        .map(|c| (c.subject.clone(), known(cx, &c.roles), c.peer))
        .collect();
    let roles = Arc::new(roles);
    Authenticator {
        anonymous: raw
            .anonymous
            .then(|| Arc::new(roles.access(&anonymous_roles))),
        api_keys,
        jwt,
        client_certs: cert_roles
            .into_iter()
            .map(|(subject, r, peer)| {
                let access = roles.access(&r);
                let access = if peer { access.as_peer() } else { access };
                (subject, Arc::new(access))
            })
            .collect(),
        roles,
        open: false,
        resource_metadata: raw.oauth.map(|o| ResourceMetadata {
            resource: o.resource,
            authorization_servers: o.authorization_servers,
            scopes_supported: o.scopes,
            bearer_methods_supported: vec!["header".into()],
        }),
    }
}

/// `[auth.jwt.sign_in]`: the issuer it signs in at is the one callers' tokens must name, so
/// an ID token of the same issuer and subject is the same person.
fn sign_in(
    cx: &mut Ctx<'_>,
    raw: crate::config::RawSignIn,
    issuer: Option<&str>,
    subject_claim: &str,
) -> Option<SignIn> {
    let at = raw.client_id.span().start;
    let Some(issuer) = issuer else {
        cx.err_at(
            at,
            "[auth.jwt.sign_in] needs `[auth.jwt] issuer`: people sign in at that issuer, and \
             its ID token's `iss` and subject must be the caller's"
                .into(),
        );
        return None;
    };
    if !matches!(reqwest::Url::parse(issuer), Ok(u) if matches!(u.scheme(), "http" | "https")) {
        cx.err_at(
            at,
            format!("[auth.jwt] issuer `{issuer}` is no http(s) URL: [auth.jwt.sign_in] discovers the identity provider there"),
        );
        return None;
    }
    for (what, r) in [
        ("client_id", Some(&raw.client_id)),
        ("client_secret", raw.client_secret.as_ref()),
    ] {
        if let Some(r) = r.filter(|r| secret::is_reference(r.get_ref()))
            && let Err(e) = secret::resolve(r.get_ref())
        {
            cx.secret_problem(r.span().start, format!("auth.jwt.sign_in.{what}: {e}"));
        }
    }
    if let Some(s) = raw
        .client_secret
        .as_ref()
        .filter(|s| !secret::is_reference(s.get_ref()))
    {
        cx.err_at(
            s.span().start,
            "auth.jwt.sign_in.client_secret: use an `env:NAME` or `file:PATH` reference, not the secret itself".into(),
        );
    }
    let mut scopes = vec!["openid".to_owned()];
    scopes.extend(raw.scopes.into_iter().filter(|s| s != "openid"));
    Some(SignIn {
        issuer: issuer.to_owned(),
        client_id: raw.client_id.into_inner(),
        client_secret: raw.client_secret.map(Spanned::into_inner),
        scopes,
        subject_claim: subject_claim.to_owned(),
    })
}

/// Globs of `owner` checked and in exposed form: tool and prompt globs (`naming` given) name
/// `upstream/name` whatever the separator; today's exposed form is still read, with a warning.
pub(super) fn globs(
    cx: &mut Ctx<'_>,
    owner: &str,
    globs: &[Spanned<String>],
    naming: Option<&crate::names::Naming>,
) -> Vec<String> {
    let mut out = Vec::with_capacity(globs.len());
    for g in globs {
        let glob = match naming {
            Some(naming) => {
                let r = naming.reference(g.get_ref());
                if let crate::names::Reference::Legacy { canonical, .. } = &r {
                    cx.warn_at(
                        g.span().start,
                        format!(
                            "{owner}: write `{}` as `{canonical}`: that form names the tool \
                             whatever the separator",
                            g.get_ref()
                        ),
                    );
                }
                r.exposed().to_owned()
            }
            None => g.get_ref().clone(),
        };
        if let Err(e) = Glob::new(&glob) {
            cx.err_at(
                g.span().start,
                format!("{owner}: bad glob `{}`: {e}", g.get_ref()),
            );
        }
        out.push(glob);
    }
    out
}

/// Names for a diagnostic: `a, b` or `none`.
pub(super) fn listed(names: &[&str]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}
