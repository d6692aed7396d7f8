//! `[credentials.NAME]`: secret references, `exec:` commands and OAuth grants.

use std::{collections::BTreeMap, sync::Arc};

use toml::Spanned;

use super::Ctx;
use crate::{
    config::RawCredential,
    policy::token::{Credential, OAuth, Source},
};

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
        let source = match (&c.source, &c.oauth) {
            (Some(s), None) => {
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
            (None, Some(o)) => {
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
                    format!("credential `{name}`: set exactly one of `source` and `oauth`"),
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
