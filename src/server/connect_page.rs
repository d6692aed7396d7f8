//! `/connect/<upstream>?state=…`: the page where a person connects their own account for an
//! upstream whose credential is per user. It is reached from a browser, which carries no API
//! key: the sealed, single-use, short-lived `state` names the person. GET shows a form; POST
//! stores the pasted token (sealed) and the waiting call goes on. The page has no script and
//! a CSP that allows none; nothing it answers holds a token.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use super::{core::Core, http::Body};

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

/// The hint of `upstream`'s per-user credential, if it has one.
fn per_user_hint(core: &Core, upstream: &str) -> Option<Option<String>> {
    core.pool
        .upstreams()
        .iter()
        .find(|u| u.name() == upstream)
        .and_then(|u| {
            u.spec()
                .credential
                .as_ref()
                .and_then(|i| i.credential.per_user().map(|h| h.map(str::to_owned)))
        })
}

fn field(query: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(query)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

pub(super) async fn serve(
    core: &Core,
    upstream: &str,
    req: Request<Incoming>,
    body_timeout: Duration,
) -> Response<Body> {
    let (Some(creds), Some(hint)) = (core.credentials.as_ref(), per_user_hint(core, upstream))
    else {
        return page(
            StatusCode::NOT_FOUND,
            "Nothing to connect",
            "<p>No upstream of this gateway is connected per person under that name.</p>",
        );
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
                Ok(_) => page(
                    StatusCode::OK,
                    &format!("{upstream} is connected"),
                    "<p>You can close this page; your call goes on.</p>",
                ),
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
