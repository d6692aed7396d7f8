//! `[credentials.NAME]`: secret references, `exec:` commands, OAuth grants and per-user tokens.

use std::{collections::BTreeMap, sync::Arc};

use toml::Spanned;

use super::Ctx;
use crate::{
    config::RawCredential,
    config::RawPerUser,
    policy::token::{Credential, OAuth, PerUserOAuth, Source},
};

/// Share of an access token's lifetime left when it is refreshed, unless configured.
const DEFAULT_REFRESH_MARGIN_PERCENT: u8 = 10;

/// The first `oauth`-only field set on a per_user credential of kind `token`.
fn oauth_fields_of_token_kind(p: &RawPerUser) -> Option<&'static str> {
    [
        ("client_id", p.client_id.is_some()),
        ("client_secret", p.client_secret.is_some()),
        ("authorization_url", p.authorization_url.is_some()),
        ("token_url", p.token_url.is_some()),
        ("scopes", !p.scopes.is_empty()),
        ("resource", p.resource.is_some()),
        ("revocation_url", p.revocation_url.is_some()),
        ("refresh_margin_percent", p.refresh_margin_percent.is_some()),
    ]
    .into_iter()
    .find_map(|(f, set)| set.then_some(f))
}

fn http_url(cx: &mut Ctx<'_>, name: &str, field: &str, v: &Spanned<String>) -> bool {
    let ok = reqwest::Url::parse(v.get_ref())
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    if !ok {
        cx.err_at(
            v.span().start,
            format!("credential `{name}`: `{field}` is not an http(s) URL"),
        );
    }
    ok
}

/// `per_user = { kind = "oauth", ... }`: a client id, a secret reference (if any), and both
/// endpoints or neither (then they are discovered from the upstream).
fn per_user_oauth(cx: &mut Ctx<'_>, name: &str, p: &RawPerUser) -> Option<PerUserOAuth> {
    // Without a client id fedgate registers itself (RFC 7591) at the authorization server it
    // discovers: there is then no secret to configure, and nowhere to register when the
    // endpoints are configured instead.
    if p.client_id.is_none() {
        let configured = p.authorization_url.is_some() || p.token_url.is_some();
        if p.client_secret.is_some() || configured {
            cx.err_at(
                p.kind.span().start,
                format!("credential `{name}`: per_user kind `oauth` without `client_id` registers itself at the discovered authorization server (RFC 7591): set `client_id`, or leave `client_secret`, `authorization_url` and `token_url` out"),
            );
            return None;
        }
    }
    if let Some(s) = &p.client_secret
        && !(s.get_ref().starts_with("env:") || s.get_ref().starts_with("file:"))
    {
        cx.err_at(
            s.span().start,
            format!("credential `{name}`: secrets are references: `env:NAME` or `file:PATH`"),
        );
        return None;
    }
    if p.hint.is_some() {
        cx.err_at(
            p.kind.span().start,
            format!("credential `{name}`: `hint` belongs to per_user kind `token` (the person pastes nothing with `oauth`)"),
        );
        return None;
    }
    let endpoints = match (&p.authorization_url, &p.token_url) {
        (None, None) => None,
        (Some(a), Some(t)) => {
            let ok =
                http_url(cx, name, "authorization_url", a) & http_url(cx, name, "token_url", t);
            if !ok {
                return None;
            }
            Some((a.get_ref().clone(), t.get_ref().clone()))
        }
        (Some(one), None) | (None, Some(one)) => {
            cx.err_at(
                one.span().start,
                format!("credential `{name}`: set both `authorization_url` and `token_url`, or neither (to discover them from the upstream)"),
            );
            return None;
        }
    };
    if let Some(bad) = p.scopes.iter().find(|s| {
        s.is_empty()
            || !s
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    }) {
        cx.err_at(
            p.kind.span().start,
            format!(
                "credential `{name}`: scope `{}` is not a valid OAuth scope",
                bad.escape_debug()
            ),
        );
        return None;
    }
    if let Some(r) = &p.revocation_url
        && !http_url(cx, name, "revocation_url", r)
    {
        return None;
    }
    let margin = p.refresh_margin_percent.as_ref();
    if let Some(m) = margin.filter(|m| !(1..=100).contains(m.get_ref())) {
        cx.err_at(
            m.span().start,
            format!("credential `{name}`: `refresh_margin_percent` is a share of a token's lifetime, 1 to 100"),
        );
        return None;
    }
    Some(PerUserOAuth {
        client_id: p.client_id.as_ref().map(|c| c.get_ref().clone()),
        client_secret: p.client_secret.as_ref().map(|s| s.get_ref().clone()),
        endpoints,
        scopes: p.scopes.clone(),
        resource: p.resource.clone(),
        revocation: p.revocation_url.as_ref().map(|r| r.get_ref().clone()),
        refresh_margin_percent: margin.map_or(DEFAULT_REFRESH_MARGIN_PERCENT, |m| *m.get_ref()),
    })
}

pub(super) fn validate_credentials(
    cx: &mut Ctx<'_>,
    raw: &BTreeMap<String, Spanned<RawCredential>>,
) -> BTreeMap<String, Arc<Credential>> {
    let mut out = BTreeMap::new();
    for (name, c) in raw {
        let at = c.span().start;
        let c = c.get_ref();
        let reference = |cx: &mut Ctx<'_>, r: &Spanned<String>| {
            let v = r.get_ref();
            if !(v.starts_with("env:") || v.starts_with("file:")) {
                cx.err_at(
                    r.span().start,
                    format!(
                        "credential `{name}`: secrets are references: `env:NAME` or `file:PATH`"
                    ),
                );
            }
        };
        let source = match (&c.source, &c.oauth, &c.per_user) {
            (None, None, Some(p)) => {
                let oauth = match p.kind.get_ref().as_str() {
                    "token" => {
                        if let Some(f) = oauth_fields_of_token_kind(p) {
                            cx.err_at(
                                p.kind.span().start,
                                format!("credential `{name}`: `{f}` belongs to per_user kind `oauth`, not `token`"),
                            );
                        }
                        None
                    }
                    "oauth" => match per_user_oauth(cx, name, p) {
                        Some(o) => Some(Arc::new(o)),
                        None => continue,
                    },
                    other => {
                        cx.err_at(
                            p.kind.span().start,
                            format!(
                                "credential `{name}`: per_user kind `{other}` is not `token` or `oauth`"
                            ),
                        );
                        continue;
                    }
                };
                Source::PerUser {
                    hint: p.hint.clone(),
                    oauth,
                }
            }
            (Some(s), None, None) => {
                let v = s.get_ref();
                if let Some(cmd) = v.strip_prefix("exec:") {
                    let argv: Vec<String> = cmd.split_whitespace().map(str::to_owned).collect();
                    if argv.is_empty() {
                        cx.err_at(
                            s.span().start,
                            format!("credential `{name}`: `exec:` needs a command"),
                        );
                    }
                    Source::Exec(argv)
                } else {
                    reference(cx, s);
                    Source::Reference(v.clone())
                }
            }
            (None, Some(o), None) => {
                reference(cx, &o.client_secret);
                let oauth = OAuth {
                    token_url: o.token_url.clone(),
                    client_id: o.client_id.clone(),
                    client_secret: o.client_secret.get_ref().clone(),
                    scope: o.scope.clone(),
                    audience: o.audience.clone(),
                };
                match (o.grant.as_deref(), &o.subject_token) {
                    (None | Some("client_credentials"), _) => Source::ClientCredentials(oauth),
                    (Some("token_exchange"), Some(subject)) => Source::TokenExchange {
                        oauth,
                        subject_token: subject.clone(),
                    },
                    (Some("token_exchange"), None) => {
                        cx.err_at(
                            at,
                            format!("credential `{name}`: token_exchange needs `subject_token`"),
                        );
                        continue;
                    }
                    (Some(other), _) => {
                        cx.err_at(at, format!("credential `{name}`: grant `{other}` is not client_credentials or token_exchange"));
                        continue;
                    }
                }
            }
            _ => {
                cx.err_at(
                    at,
                    format!(
                        "credential `{name}`: set exactly one of `source`, `oauth` and `per_user`"
                    ),
                );
                continue;
            }
        };
        out.insert(
            name.clone(),
            Arc::new(Credential::new(name.clone(), c.class.clone(), source)),
        );
    }
    out
}

/// How per-user credentials are sealed and kept; `None` when no credential is per user. A
/// per-user credential without `[gateway] credential_key` is an error: a random key would lose
/// every person's credential at the next restart.
pub(super) fn user_credential_settings(
    cx: &mut Ctx<'_>,
    g: &crate::config::RawGateway,
    file: &str,
    credentials: &BTreeMap<String, Arc<Credential>>,
) -> Option<crate::config::snapshot::UserCredentialSettings> {
    let first = credentials.values().find(|c| c.per_user().is_some())?;
    let resolve = |cx: &mut Ctx<'_>, r: &Spanned<String>, what: &str| match crate::secret::resolve(
        r.get_ref(),
    ) {
        Ok(s) if s.expose().len() >= 32 => Some(s),
        Ok(_) => {
            cx.err_at(
                r.span().start,
                format!("[gateway] {what} must be at least 32 bytes"),
            );
            None
        }
        Err(e) => {
            cx.secret_problem(r.span().start, format!("[gateway] {what}: {e}"));
            None
        }
    };
    let Some(k) = &g.credential_key else {
        cx.err_at(
            0,
            format!(
                "credential `{}` is per user: set [gateway] credential_key (a secret reference of at least 32 bytes) to seal people's credentials",
                first.name
            ),
        );
        return None;
    };
    let key = resolve(cx, k, "credential_key")?;
    let retired = g
        .credential_keys_retired
        .iter()
        .filter_map(|r| resolve(cx, r, "credential_keys_retired"))
        .collect();
    Some(crate::config::snapshot::UserCredentialSettings {
        key,
        retired,
        db: std::path::Path::new(file)
            .parent()
            .unwrap_or(std::path::Path::new(""))
            .join(
                g.credential_db
                    .as_deref()
                    .unwrap_or("fedgate-credentials.db"),
            ),
        public_url: g
            .public_url
            .as_ref()
            .map(|u| u.trim_end_matches('/').to_owned()),
    })
}
