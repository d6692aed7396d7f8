//! `/connect/<upstream>?state=…`: the page where a person connects their own account for an
//! upstream whose credential is per user. It is reached from a browser, which carries no API
//! key: the sealed, single-use, short-lived `state` names the person. GET shows a form; POST
//! stores the pasted token (sealed) and the waiting call goes on. For an OAuth upstream GET
//! sends the person on to the authorization server, which sends them back to
//! `/connect/<upstream>/callback`, where the code is exchanged and the tokens stored. The page
//! has no script and a CSP that allows none; nothing it answers holds a token.

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

/// The OAuth side of the page: GET `/connect/<u>?state=` redirects to sign in, GET
/// `/connect/<u>/callback` finishes.
async fn serve_oauth(
    creds: &crate::credentials::UserCredentials,
    upstream: &str,
    callback: bool,
    settings: &PerUserOAuth,
    upstream_url: &str,
    req: &Request<Incoming>,
) -> Response<Body> {
    if req.method() != Method::GET {
        return page(
            StatusCode::METHOD_NOT_ALLOWED,
            "Not allowed",
            "<p>Open the link you were given.</p>",
        );
    }
    let target = OAuthTarget {
        settings,
        upstream_url,
    };
    let query = req.uri().query().unwrap_or("").as_bytes();
    if callback {
        let fields: Vec<(String, String)> = form_urlencoded::parse(query)
            .take(32)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        return match creds.callback(upstream, &fields, target).await {
            Ok(_) => connected(upstream),
            Err(why) => oauth_refused(&why),
        };
    }
    let state = field(query, "state").unwrap_or_default();
    match creds.authorize(upstream, &state, target).await {
        Ok(url) => redirect(&url),
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

pub(super) async fn serve(
    parts: &EdgeParts,
    upstream: &str,
    req: Request<Incoming>,
    body_timeout: Duration,
) -> Response<Body> {
    let (upstream, callback) = match upstream.strip_suffix("/callback") {
        Some(u) => (u, true),
        None => (upstream, false),
    };
    let kind = per_user_kind(&parts.pool, upstream);
    let (Some(creds), Some(kind)) = (parts.credentials.as_ref(), kind) else {
        return page(
            StatusCode::NOT_FOUND,
            "Nothing to connect",
            "<p>No upstream of this gateway is connected per person under that name.</p>",
        );
    };
    let hint = match kind {
        Kind::OAuth(settings, url) => {
            return serve_oauth(creds, upstream, callback, &settings, &url, &req).await;
        }
        Kind::Token(_) if callback => {
            return page(
                StatusCode::NOT_FOUND,
                "Nothing to connect",
                "<p>This upstream is connected with a token, not by signing in.</p>",
            );
        }
        Kind::Token(hint) => hint,
    };
    match *req.method() {
        Method::GET => {
            let query = req.uri().query().unwrap_or("").as_bytes().to_vec();
            let state = field(&query, "state").unwrap_or_default();
            if let Err(why) = creds.check_state(&state, upstream) {
                creds.count(upstream, "refused");
                return refused(&why.to_string());
            }
            let hint = hint.unwrap_or_else(|| format!("Your own token for {upstream}"));
            page(
                StatusCode::OK,
                &format!("Connect {upstream}"),
                &format!(
                    "<p>{}</p><form method=\"post\" action=\"/connect/{u}\">\
                     <input type=\"hidden\" name=\"state\" value=\"{s}\">\
                     <label>Token <input type=\"password\" name=\"token\" autocomplete=\"off\" \
                     required maxlength=\"{max}\"></label> <button type=\"submit\">Connect</button>\
                     </form><p>fedgate keeps it sealed and sends it only with your own calls to \
                     {u}. You can disconnect any time (<code>fedgate__disconnect</code>).</p>",
                    escape(&hint),
                    u = escape(upstream),
                    s = escape(&state),
                    max = crate::credentials::MAX_TOKEN_BYTES,
                ),
            )
        }
        Method::POST => {
            let bytes =
                match super::body::collect(req.into_body(), MAX_FORM_BYTES, body_timeout).await {
                    Ok(b) => b,
                    Err(why) => {
                        return refused(&why.refusal(MAX_FORM_BYTES, body_timeout).message());
                    }
                };
            let state = field(&bytes, "state").unwrap_or_default();
            let token = field(&bytes, "token").unwrap_or_default();
            match creds.submit(upstream, &state, token.trim()).await {
                Ok(_) => connected(upstream),
                Err(why) => refused(&why.to_string()),
            }
        }
        _ => page(
            StatusCode::METHOD_NOT_ALLOWED,
            "Not allowed",
            "<p>Open the link you were given.</p>",
        ),
    }
}
