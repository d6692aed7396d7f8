//! `/account`: each person's own page of the accounts they connected for per-user upstreams —
//! which upstream, which account at the provider, when connected and last used — with a button
//! that forgets one (revoked at its authorization server where it can be). The browser shows
//! who it is as on the connect page: its client certificate, or the person's own fedgate key or
//! token typed into the form (never a URL). What the page then gives is a sealed grant naming
//! the person for ten minutes, in the form of each button: only someone who proved to be them
//! can forget their accounts. No script, the connect page's CSP; nothing it shows holds a token.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::{
    connect_page::{MAX_FORM_BYTES, escape, field, not_allowed, nothing_to_connect, page, who},
    http::Body,
    parts::EdgeParts,
};
use crate::{credentials::UserCredentials, policy::identity::IdentityKind};

/// Where the page is served.
pub const ACCOUNT_PATH: &str = "/account";

pub(super) async fn serve(
    parts: &EdgeParts,
    path: &str,
    req: Request<Incoming>,
    certificate: Option<String>,
    body_timeout: Duration,
) -> Response<Body> {
    let Some(creds) = parts.credentials.as_ref() else {
        return nothing_to_connect("No upstream of this gateway is connected per person.");
    };
    match (path, req.method().clone()) {
        (ACCOUNT_PATH, Method::GET) => match certificate {
            Some(owner) => list_page(creds, &owner, None).await,
            None => sign_in_page(None),
        },
        (ACCOUNT_PATH, Method::POST) => {
            let Some(form) = read(req, body_timeout).await else {
                return sign_in_page(Some("The form could not be read."));
            };
            let owner = certificate.or_else(|| {
                who(parts, &field(&form, "proof").unwrap_or_default())
                    .filter(|id| !matches!(id.kind, IdentityKind::Anonymous | IdentityKind::Local))
                    .map(|id| id.key())
            });
            match owner {
                Some(owner) => list_page(creds, &owner, None).await,
                None => sign_in_page(Some(
                    "That key or token is not one of this gateway's: nothing is shown.",
                )),
            }
        }
        ("/account/disconnect", Method::POST) => {
            let Some(form) = read(req, body_timeout).await else {
                return sign_in_page(Some("The form could not be read."));
            };
            let grant = field(&form, "grant").unwrap_or_default();
            let Some(owner) = creds.open_account_grant(&grant) else {
                return sign_in_page(Some(
                    "This page has expired: show who you are again to forget an account.",
                ));
            };
            let upstream = field(&form, "upstream").unwrap_or_default();
            let said = match creds.revoke(&owner, Some(&upstream), None).await {
                Ok(forgot) => match forgot.first() {
                    Some(f) => format!(
                        "Your {} account is forgotten ({}).",
                        f.upstream,
                        at_provider(f.at_provider)
                    ),
                    None => format!("You had no {upstream} account connected."),
                },
                Err(e) => {
                    tracing::warn!("per-user credentials: {e}");
                    "The credential store does not answer; nothing was forgotten. Try again in a moment.".to_owned()
                }
            };
            list_page(creds, &owner, Some(&said)).await
        }
        _ => not_allowed(),
    }
}

async fn read(req: Request<Incoming>, body_timeout: Duration) -> Option<Vec<u8>> {
    super::body::collect(req.into_body(), MAX_FORM_BYTES, body_timeout)
        .await
        .ok()
        .map(|b| b.to_vec())
}

fn at_provider(word: &str) -> &'static str {
    match word {
        "revoked" => "the provider confirmed the access is withdrawn",
        "failed" => {
            "the provider did not confirm: withdraw the access in your account settings there too"
        }
        _ => {
            "the provider takes no revocation: withdraw the access in your account settings there if you want it gone there too"
        }
    }
}

fn sign_in_page(problem: Option<&str>) -> Response<Body> {
    let problem = problem
        .map(|p| format!("<p><strong>{}</strong></p>", escape(p)))
        .unwrap_or_default();
    page(
        if problem.is_empty() {
            StatusCode::OK
        } else {
            StatusCode::BAD_REQUEST
        },
        "Your connected accounts",
        &format!(
            "{problem}<p>Show who you are to see the accounts you connected through this gateway.</p>\
             <form method=\"post\" action=\"{ACCOUNT_PATH}\"><label>Your own fedgate API key or token \
             <input type=\"password\" name=\"proof\" autocomplete=\"off\" required maxlength=\"{max}\">\
             </label> <button type=\"submit\">Show my accounts</button></form>",
            max = crate::credentials::MAX_TOKEN_BYTES
        ),
    )
}

/// Most accounts one page lists.
const MAX_SHOWN: usize = 200;

async fn list_page(creds: &UserCredentials, owner: &str, said: Option<&str>) -> Response<Body> {
    let (list, more) = match creds.connections_of(owner, MAX_SHOWN).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("per-user credentials: {e}");
            return page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Your connected accounts",
                "<p>The credential store does not answer; try again in a moment.</p>",
            );
        }
    };
    let grant = match creds.account_grant(owner) {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!("per-user credentials: {e}");
            String::new()
        }
    };
    let said = said
        .map(|s| format!("<p><strong>{}</strong></p>", escape(s)))
        .unwrap_or_default();
    let rows: String = list
        .iter()
        .map(|c| {
            format!(
                "<tr><td>{u}</td><td>{a}</td><td>{t}</td><td>{l}</td><td>\
                 <form method=\"post\" action=\"/account/disconnect\">\
                 <input type=\"hidden\" name=\"grant\" value=\"{grant}\">\
                 <input type=\"hidden\" name=\"upstream\" value=\"{u}\">\
                 <button type=\"submit\">Disconnect {u}</button></form></td></tr>",
                u = escape(&c.upstream),
                a = escape(c.info.account.as_deref().unwrap_or("-")),
                t = when(Some(c.connected_at_ms)),
                l = when(c.last_used_ms),
            )
        })
        .collect();
    let table = if list.is_empty() {
        "<p>You have no connected accounts.</p>".to_owned()
    } else {
        format!(
            "<table><tr><th>Upstream</th><th>Account</th><th>Connected</th><th>Last used</th><th></th></tr>{rows}</table>{}",
            if more > 0 {
                format!("<p>and {more} more.</p>")
            } else {
                String::new()
            }
        )
    };
    page(
        StatusCode::OK,
        "Your connected accounts",
        &format!(
            "{said}<p>Signed in as {}.</p>{table}",
            escape(&crate::credentials::person(owner))
        ),
    )
}

fn when(ms: Option<u64>) -> String {
    ms.and_then(|m| i64::try_from(m).ok())
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || "-".to_owned(),
            |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
}
