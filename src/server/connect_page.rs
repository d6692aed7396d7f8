//! `/connect/<upstream>?state=…`: the page where a person connects their own account for an
//! upstream whose credential is per user. The sealed, single-use, short-lived `state` names
//! the person it was made for, but a link alone connects nothing: it may have been forwarded
//! (it goes through the model, in a blocked plan's hint). GET shows who the link is for and
//! what it connects, and a form; POST must prove the browser is that person — their own API
//! key or token typed on the page (never in a URL), or their client certificate — before a
//! pasted token is stored, or before they are sent on to sign in at an OAuth upstream's
//! authorization server. That sign-in comes back to `/connect/<upstream>/callback` only in
//! the browser that started it (a cookie holding the state's nonce), so a forwarded
//! authorization link stores nothing either. The page has no script and a CSP that allows
//! none; nothing it answers holds a token.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use super::{http::Body, parts::EdgeParts};
use crate::{
    credentials::{OAuthTarget, Refused},
    policy::token::PerUserOAuth,
};

/// A form submission is a state and a token: far less than this.
const MAX_FORM_BYTES: usize = 16 * 1024;

const CSP: &str = "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

fn page(status: StatusCode, title: &str, body: &str) -> Response<Body> {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"referrer\" content=\"no-referrer\"><title>{t}</title></head>\
         <body><h1>{t}</h1>{body}</body></html>",
        t = escape(title)
    );
    let mut r = Response::new(Full::new(Bytes::from(html)).boxed());
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(CSP),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    h.insert(
        header::REFERRER_POLICY,
        header::HeaderValue::from_static("no-referrer"),
    );
    r
}

fn refused(why: &str) -> Response<Body> {
    page(
        StatusCode::BAD_REQUEST,
        "Not connected",
        &format!("<p>{}</p>", escape(why)),
    )
}

/// How `upstream`'s per-user credential is connected.
enum Kind {
    /// The person pastes a token; what the page asks for.
    Token(Option<String>),
    /// The person signs in at the authorization server; the upstream's URL.
    OAuth(Arc<PerUserOAuth>, String),
}

fn per_user_kind(pool: &crate::upstream::pool::Pool, upstream: &str) -> Option<Kind> {
    let u = pool
        .upstreams()
        .iter()
        .find(|u| u.name() == upstream)?
        .clone();
    let spec = u.spec();
    let credential = &spec.credential.as_ref()?.credential;
    let hint = credential.per_user()?.map(str::to_owned);
    Some(match credential.per_user_oauth() {
        Some(o) => Kind::OAuth(
            o.clone(),
            spec.transport.url().unwrap_or_default().to_owned(),
        ),
        None => Kind::Token(hint),
    })
}

fn connected(upstream: &str) -> Response<Body> {
    page(
        StatusCode::OK,
        &format!("{upstream} is connected"),
        "<p>You can close this page; your call goes on.</p>",
    )
}

/// Sends the browser on (to the authorization server).
fn redirect(to: &str) -> Response<Body> {
    let mut r = page(
        StatusCode::FOUND,
        "Signing in",
        "<p>Continue at the authorization server.</p>",
    );
    match header::HeaderValue::from_str(to) {
        Ok(v) => {
            r.headers_mut().insert(header::LOCATION, v);
            r
        }
        Err(_) => refused("the authorization server's address is not usable"),
    }
}

/// The cookie that ties an OAuth sign-in to the browser that started it.
const BROWSER_COOKIE: &str = "fedgate_connect";

/// The person an owner key names, for the page: `alice (API key)`.
fn person(owner: &str) -> String {
    let (kind, name) = owner.split_once(':').unwrap_or(("", owner));
    let kind = match kind {
        "api_key" => "API key",
        "jwt" => "signed-in token",
        "client_cert" => "client certificate",
        _ => "identity",
    };
    format!("{} ({kind})", crate::names::shown(name))
}

/// Whether the browser showed it is `owner`: its client certificate maps to them, or the key
/// or token typed on the page (a form field, never a URL) authenticates as them.
fn proven(parts: &EdgeParts, owner: &str, certificate: Option<&str>, proof: &str) -> bool {
    if certificate == Some(owner) {
        return true;
    }
    let proof = proof.trim();
    if proof.is_empty() || proof.len() > crate::credentials::MAX_TOKEN_BYTES {
        return false;
    }
    let Ok(value) = header::HeaderValue::from_str(&format!("Bearer {proof}")) else {
        return false;
    };
    let mut headers = http::HeaderMap::new();
    headers.insert(header::AUTHORIZATION, value);
    parts
        .auth
        .load()
        .authenticate(&headers)
        .is_ok_and(|id| id.key() == owner)
}

/// The page a valid link opens: who it is for, what it connects, and a form that confirms it.
fn confirm_page(
    upstream: &str,
    state: &str,
    ticket: &crate::credentials::Ticket,
    certificate: Option<&str>,
    kind: &Kind,
) -> Response<Body> {
    let who = escape(&person(&ticket.owner));
    let proof = if certificate == Some(ticket.owner.as_str()) {
        format!("<p>Your client certificate shows you are {who}.</p>")
    } else {
        format!(
            "<label>Your own fedgate API key or token, to show you are {who} \
             <input type=\"password\" name=\"proof\" autocomplete=\"off\" required \
             maxlength=\"{max}\"></label>",
            max = crate::credentials::MAX_TOKEN_BYTES
        )
    };
    let (what, fields, button) = match kind {
        Kind::Token(hint) => (
            escape(
                hint.as_deref()
                    .unwrap_or(&format!("Your own token for {upstream}")),
            ),
            format!(
                "<label>Token <input type=\"password\" name=\"token\" autocomplete=\"off\" \
                 required maxlength=\"{}\"></label>",
                crate::credentials::MAX_TOKEN_BYTES
            ),
            "Connect",
        ),
        Kind::OAuth(..) => (
            format!(
                "You sign in at {}'s authorization server next.",
                escape(upstream)
            ),
            String::new(),
            "Continue to sign in",
        ),
    };
    page(
        StatusCode::OK,
        &format!("Connect {upstream}"),
        &format!(
            "<p>This link connects <strong>{u}</strong> for <strong>{who}</strong>. If you \
             are not {who}, close this page: nothing happens.</p><p>{what}</p>\
             <form method=\"post\" action=\"/connect/{u}\">\
             <input type=\"hidden\" name=\"state\" value=\"{s}\">{proof} {fields} \
             <button type=\"submit\">{button}</button></form><p>fedgate keeps it sealed and \
             sends it only with your own calls to {u}. You can disconnect any time \
             (<code>fedgate__disconnect</code>).</p>",
            u = escape(upstream),
            s = escape(state),
        ),
    )
}

/// Sends the browser to sign in, keeping the nonce it must come back with.
fn sign_in_redirect(upstream: &str, to: &str, nonce: &str, https: bool) -> Response<Body> {
    let mut r = redirect(to);
    *r.status_mut() = StatusCode::SEE_OTHER;
    let cookie = format!(
        "{BROWSER_COOKIE}={nonce}; Path=/connect/{upstream}; HttpOnly; SameSite=Lax; Max-Age={}{}",
        crate::credentials::STATE_TTL.as_secs(),
        if https { "; Secure" } else { "" }
    );
    if let Ok(v) = header::HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// The nonce the browser kept when its sign-in started.
fn browser_nonce(req: &Request<Incoming>) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == BROWSER_COOKIE)
        .map(|(_, v)| v.to_owned())
}

/// The authorization server sent the person back: finish, if this browser started it.
async fn oauth_callback(
    creds: &crate::credentials::UserCredentials,
    upstream: &str,
    target: OAuthTarget<'_>,
    req: &Request<Incoming>,
) -> Response<Body> {
    let query = req.uri().query().unwrap_or("").as_bytes();
    let fields: Vec<(String, String)> = form_urlencoded::parse(query)
        .take(32)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let browser = browser_nonce(req);
    match creds
        .callback(upstream, &fields, browser.as_deref(), target)
        .await
    {
        Ok(_) => connected(upstream),
        Err(why) => oauth_refused(&why),
    }
}

/// The authorization server was unreachable or answered nonsense: 502, else 400.
fn oauth_refused(why: &Refused) -> Response<Body> {
    let mut r = refused(&why.to_string());
    if let Refused::OAuth(e) = why
        && !matches!(e, crate::credentials::OAuthError::Refused(_))
    {
        *r.status_mut() = StatusCode::BAD_GATEWAY;
    }
    r
}

fn field(query: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(query)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

fn not_allowed() -> Response<Body> {
    page(
        StatusCode::METHOD_NOT_ALLOWED,
        "Not allowed",
        "<p>Open the link you were given.</p>",
    )
}

fn nothing_to_connect(why: &str) -> Response<Body> {
    page(
        StatusCode::NOT_FOUND,
        "Nothing to connect",
        &format!("<p>{why}</p>"),
    )
}

/// `certificate`: the identity key the browser's verified client certificate maps to.
pub(super) async fn serve(
    parts: &EdgeParts,
    upstream: &str,
    req: Request<Incoming>,
    certificate: Option<String>,
    body_timeout: Duration,
) -> Response<Body> {
    let (upstream, callback) = match upstream.strip_suffix("/callback") {
        Some(u) => (u, true),
        None => (upstream, false),
    };
    let kind = per_user_kind(&parts.pool, upstream);
    let (Some(creds), Some(kind)) = (parts.credentials.as_ref(), kind) else {
        return nothing_to_connect(
            "No upstream of this gateway is connected per person under that name.",
        );
    };
    match (&kind, callback, req.method().clone()) {
        (Kind::OAuth(settings, url), true, Method::GET) => {
            let target = OAuthTarget {
                settings,
                upstream_url: url,
            };
            oauth_callback(creds, upstream, target, &req).await
        }
        (Kind::Token(_), true, _) => {
            nothing_to_connect("This upstream is connected with a token, not by signing in.")
        }
        (_, false, Method::GET) => {
            let query = req.uri().query().unwrap_or("").as_bytes().to_vec();
            let state = field(&query, "state").unwrap_or_default();
            match creds.check_state(&state, upstream) {
                Ok(ticket) => {
                    confirm_page(upstream, &state, &ticket, certificate.as_deref(), &kind)
                }
                Err(why) => {
                    creds.count(upstream, "refused");
                    refused(&why.to_string())
                }
            }
        }
        (_, false, Method::POST) => {
            let form = Form {
                parts,
                creds,
                upstream,
                certificate: certificate.as_deref(),
            };
            form.submit(&kind, req, body_timeout).await
        }
        _ => not_allowed(),
    }
}

/// A confirmed page: the proof, then the token stored or the sign-in started.
struct Form<'a> {
    parts: &'a EdgeParts,
    creds: &'a crate::credentials::UserCredentials,
    upstream: &'a str,
    certificate: Option<&'a str>,
}

impl Form<'_> {
    async fn submit(
        &self,
        kind: &Kind,
        req: Request<Incoming>,
        body_timeout: Duration,
    ) -> Response<Body> {
        let (creds, upstream) = (self.creds, self.upstream);
        let bytes = match super::body::collect(req.into_body(), MAX_FORM_BYTES, body_timeout).await
        {
            Ok(b) => b,
            Err(why) => return refused(&why.refusal(MAX_FORM_BYTES, body_timeout).message()),
        };
        let state = field(&bytes, "state").unwrap_or_default();
        let ticket = match creds.check_state(&state, upstream) {
            Ok(t) => t,
            Err(why) => {
                creds.count(upstream, "refused");
                return refused(&why.to_string());
            }
        };
        let proof = field(&bytes, "proof").unwrap_or_default();
        if !proven(self.parts, &ticket.owner, self.certificate, &proof) {
            creds.count(upstream, "refused");
            creds.proof_failed(&state, &ticket);
            tracing::warn!(
                upstream,
                "a connect link was confirmed by someone it was not made for; nothing was stored"
            );
            return refused(&Refused::NotYou(person(&ticket.owner)).to_string());
        }
        match kind {
            Kind::Token(_) => {
                let token = field(&bytes, "token").unwrap_or_default();
                match creds.submit(upstream, &state, token.trim()).await {
                    Ok(_) => connected(upstream),
                    Err(why) => refused(&why.to_string()),
                }
            }
            Kind::OAuth(settings, url) => {
                let target = OAuthTarget {
                    settings,
                    upstream_url: url,
                };
                match creds.authorize(upstream, &state, target).await {
                    Ok((to, nonce)) => {
                        sign_in_redirect(upstream, &to, &nonce, creds.served_over_https())
                    }
                    Err(why) => oauth_refused(&why),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cookie(https: bool) -> String {
        let r = sign_in_redirect("gh", "https://as.example/authorize", "n0nce", https);
        r.headers()
            .get(header::SET_COOKIE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn the_sign_in_cookie_is_secure_when_people_reach_fedgate_over_https() {
        let plain = cookie(false);
        assert!(plain.starts_with("fedgate_connect=n0nce;"), "{plain}");
        assert!(plain.contains("HttpOnly") && plain.contains("Path=/connect/gh"));
        assert!(!plain.contains("Secure"), "{plain}");
        assert!(cookie(true).ends_with("; Secure"), "{}", cookie(true));
    }
}
