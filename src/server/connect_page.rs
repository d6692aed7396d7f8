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
    credentials::{OAuthTarget, Proven, Refused},
    policy::{identity::SignIn, token::PerUserOAuth},
};

/// A form submission is a state and a token: far less than this.
pub(super) const MAX_FORM_BYTES: usize = 16 * 1024;

const CSP: &str = "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

pub(super) fn page(status: StatusCode, title: &str, body: &str) -> Response<Body> {
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
    if let Some((oauth, url)) = pool.per_user_oauth(upstream) {
        return Some(Kind::OAuth(oauth, url));
    }
    let u = pool
        .upstreams()
        .iter()
        .find(|u| u.name() == upstream)?
        .clone();
    let spec = u.spec();
    let hint = spec.credential.as_ref()?.credential.per_user()?;
    Some(Kind::Token(hint.map(str::to_owned)))
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

/// The cookie that ties an upstream's OAuth sign-in to the browser that started it.
const BROWSER_COOKIE: &str = "fedgate_connect";

/// Whether the key or token typed on the page (a form field, never a URL) authenticates as
/// `owner`.
pub(super) fn proven(parts: &EdgeParts, owner: &str, proof: &str) -> bool {
    who(parts, proof).is_some_and(|id| id.key() == owner)
}

/// The person a key or token typed on a page authenticates as.
pub(super) fn who(parts: &EdgeParts, proof: &str) -> Option<crate::policy::identity::Identity> {
    let proof = proof.trim();
    if proof.is_empty() || proof.len() > crate::credentials::MAX_TOKEN_BYTES {
        return None;
    }
    let value = header::HeaderValue::from_str(&format!("Bearer {proof}")).ok()?;
    let mut headers = http::HeaderMap::new();
    headers.insert(header::AUTHORIZATION, value);
    parts.auth.load().authenticate(&headers).ok()
}

/// How the browser shows the page it is the link's person.
enum Proof {
    /// Its verified client certificate maps to them.
    Certificate,
    /// They sign in at the organisation's identity provider (a JWT person).
    SignIn(Arc<SignIn>),
    /// They type their own fedgate key or token on the page.
    Typed,
}

impl Proof {
    fn of(parts: &EdgeParts, owner: &str, certificate: Option<&str>) -> Self {
        if certificate == Some(owner) {
            return Proof::Certificate;
        }
        let sign_in = owner
            .starts_with("jwt:")
            .then(|| parts.auth.load().jwt.as_ref()?.sign_in.clone())
            .flatten();
        sign_in.map_or(Proof::Typed, Proof::SignIn)
    }

    /// The page's words and fields for it.
    fn fields(&self, who: &str) -> String {
        match self {
            Proof::Certificate => format!("<p>Your client certificate shows you are {who}.</p>"),
            Proof::SignIn(s) => format!(
                "<p>To show you are {who}, you sign in at your organisation's identity provider \
                 ({}) first.</p>",
                escape(&s.issuer)
            ),
            Proof::Typed => format!(
                "<label>Your own fedgate API key or token, to show you are {who} \
                 <input type=\"password\" name=\"proof\" autocomplete=\"off\" required \
                 maxlength=\"{max}\"></label>",
                max = crate::credentials::MAX_TOKEN_BYTES
            ),
        }
    }
}

/// The field a pasted token goes into.
fn token_field() -> String {
    format!(
        "<label>Token <input type=\"password\" name=\"token\" autocomplete=\"off\" \
         required maxlength=\"{}\"></label>",
        crate::credentials::MAX_TOKEN_BYTES
    )
}

/// The page a valid link opens: who it is for, what it connects, and a form that confirms it.
fn confirm_page(
    upstream: &str,
    state: &str,
    ticket: &crate::credentials::Ticket,
    proof: &Proof,
    kind: &Kind,
) -> Response<Body> {
    let who = escape(&crate::credentials::person(&ticket.owner));
    let signs_in = matches!(proof, Proof::SignIn(_));
    let (what, fields, button) = match kind {
        Kind::Token(hint) => (
            escape(
                hint.as_deref()
                    .unwrap_or(&format!("Your own token for {upstream}")),
            ),
            // Asked for once the sign-in showed who the browser is.
            if signs_in {
                String::new()
            } else {
                token_field()
            },
            if signs_in {
                "Sign in to continue"
            } else {
                "Connect"
            },
        ),
        Kind::OAuth(..) => (
            format!(
                "You sign in at {}'s authorization server next.",
                escape(upstream)
            ),
            String::new(),
            if signs_in {
                "Sign in to continue"
            } else {
                "Continue to sign in"
            },
        ),
    };
    form_page(
        upstream,
        &format!(
            "<p>This link connects <strong>{u}</strong> for <strong>{who}</strong>. If you \
             are not {who}, close this page: nothing happens.</p><p>{what}</p>",
            u = escape(upstream)
        ),
        &format!(
            "<input type=\"hidden\" name=\"state\" value=\"{s}\">{proof} {fields}",
            s = escape(state),
            proof = proof.fields(&who)
        ),
        button,
    )
}

/// A page with `intro`, then a form posting `fields` to the upstream's page.
fn form_page(upstream: &str, intro: &str, fields: &str, button: &str) -> Response<Body> {
    page(
        StatusCode::OK,
        &format!("Connect {upstream}"),
        &format!(
            "{intro}<form method=\"post\" action=\"/connect/{u}\">{fields} \
             <button type=\"submit\">{button}</button></form><p>fedgate keeps it sealed and \
             sends it only with your own calls to {u}. You can disconnect any time \
             (<code>fedgate__disconnect</code>).</p>",
            u = escape(upstream),
        ),
    )
}

/// After the sign-in showed who the browser is: the form the token is pasted into.
fn token_page(upstream: &str, proven: &Proven, hint: Option<&str>) -> Response<Body> {
    let who = escape(&crate::credentials::person(&proven.ticket.owner));
    let what = escape(hint.unwrap_or(&format!("Your own token for {upstream}")));
    form_page(
        upstream,
        &format!(
            "<p>You signed in as <strong>{who}</strong>. This connects <strong>{u}</strong> \
             for you.</p><p>{what}</p>",
            u = escape(upstream)
        ),
        &format!(
            "<input type=\"hidden\" name=\"state\" value=\"{s}\">\
             <input type=\"hidden\" name=\"signed_in\" value=\"{m}\"> {token}",
            s = escape(&proven.state),
            m = escape(&proven.mark),
            token = token_field()
        ),
        "Connect",
    )
}

/// Sends the browser to sign in (`to`), keeping in cookie `name` (sent back to `path`) the
/// nonce it must come back with.
fn sign_in_redirect(to: &str, cookie: (&str, &str), nonce: &str, https: bool) -> Response<Body> {
    let mut r = redirect(to);
    *r.status_mut() = StatusCode::SEE_OTHER;
    let (name, path) = cookie;
    let cookie = format!(
        "{name}={nonce}; Path={path}; HttpOnly; SameSite=Lax; Max-Age={}{}",
        crate::credentials::STATE_TTL.as_secs(),
        if https { "; Secure" } else { "" }
    );
    if let Ok(v) = header::HeaderValue::from_str(&cookie) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// Where the upstream's authorization server sends the browser back, and its cookie there.
fn upstream_cookie(upstream: &str) -> String {
    format!("/connect/{upstream}")
}

/// The cookie that ties an identity sign-in to the browser that started it; sent back to the
/// identity provider's return path and to every upstream's page (the token form).
const IDENTITY_COOKIE: (&str, &str) = ("fedgate_identity", "/connect/");

/// The nonce the browser kept in cookie `name` when its sign-in started.
fn cookie(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// A callback's query, bounded.
fn query_fields(req: &Request<Incoming>) -> Vec<(String, String)> {
    form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
        .take(32)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The authorization server sent the person back: finish, if this browser started it.
async fn oauth_callback(
    creds: &crate::credentials::UserCredentials,
    upstream: &str,
    target: OAuthTarget<'_>,
    req: &Request<Incoming>,
) -> Response<Body> {
    let browser = cookie(req, BROWSER_COOKIE);
    match creds
        .callback(upstream, &query_fields(req), browser.as_deref(), target)
        .await
    {
        Ok(_) => connected(upstream),
        Err(why) => oauth_refused(&why),
    }
}

/// Sends a proven person on to sign in at the upstream's authorization server.
async fn to_upstream_sign_in(
    creds: &crate::credentials::UserCredentials,
    upstream: &str,
    state: &str,
    target: OAuthTarget<'_>,
) -> Response<Body> {
    match creds.authorize(upstream, state, target).await {
        Ok((to, nonce)) => sign_in_redirect(
            &to,
            (BROWSER_COOKIE, &upstream_cookie(upstream)),
            &nonce,
            creds.served_over_https(),
        ),
        Err(why) => oauth_refused(&why),
    }
}

/// The identity provider sent the person back: if they are the link's person, on to the
/// upstream's sign-in or to the token form.
async fn signed_in(
    parts: &EdgeParts,
    creds: &crate::credentials::UserCredentials,
    req: &Request<Incoming>,
) -> Response<Body> {
    let Some(settings) = parts
        .auth
        .load()
        .jwt
        .as_ref()
        .and_then(|j| j.sign_in.clone())
    else {
        return nothing_to_connect("This gateway has no identity provider sign-in.");
    };
    let browser = cookie(req, IDENTITY_COOKIE.0);
    let proven = match creds
        .finish_sign_in(&query_fields(req), browser.as_deref(), &settings)
        .await
    {
        Ok(p) => p,
        Err(why) => return oauth_refused(&why),
    };
    let upstream = proven.ticket.upstream.clone();
    match per_user_kind(&parts.pool, &upstream) {
        Some(Kind::OAuth(settings, url)) => {
            let target = OAuthTarget {
                settings: &settings,
                upstream_url: &url,
            };
            to_upstream_sign_in(creds, &upstream, &proven.state, target).await
        }
        Some(Kind::Token(hint)) => token_page(&upstream, &proven, hint.as_deref()),
        None => nothing_to_connect(
            "No upstream of this gateway is connected per person under that name.",
        ),
    }
}

/// The authorization server was unreachable or answered nonsense: 502, else 400.
fn oauth_refused(why: &Refused) -> Response<Body> {
    let mut r = refused(&why.to_string());
    if let Refused::OAuth(e) = why
        && !matches!(e, crate::credentials::OAuthError::Refused { .. })
    {
        *r.status_mut() = StatusCode::BAD_GATEWAY;
    }
    r
}

pub(super) fn field(query: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(query)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

pub(super) fn not_allowed() -> Response<Body> {
    page(
        StatusCode::METHOD_NOT_ALLOWED,
        "Not allowed",
        "<p>Open the link you were given.</p>",
    )
}

pub(super) fn nothing_to_connect(why: &str) -> Response<Body> {
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
    let Some(creds) = parts.credentials.as_ref() else {
        return nothing_to_connect(
            "No upstream of this gateway is connected per person under that name.",
        );
    };
    if upstream == crate::credentials::SIGNED_IN_PATH {
        return match *req.method() {
            Method::GET => signed_in(parts, creds, &req).await,
            _ => not_allowed(),
        };
    }
    let (upstream, callback) = match upstream.strip_suffix("/callback") {
        Some(u) => (u, true),
        None => (upstream, false),
    };
    let Some(kind) = per_user_kind(&parts.pool, upstream) else {
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
                    let proof = Proof::of(parts, &ticket.owner, certificate.as_deref());
                    confirm_page(upstream, &state, &ticket, &proof, &kind)
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

/// What a submitted form showed about who the browser is.
enum Shown {
    TheirsAlone,
    NotThem,
    /// It goes to sign in at the identity provider first.
    SignIn(Response<Body>),
}

impl Form<'_> {
    async fn submit(
        &self,
        kind: &Kind,
        req: Request<Incoming>,
        body_timeout: Duration,
    ) -> Response<Body> {
        let (creds, upstream) = (self.creds, self.upstream);
        let identity_cookie = cookie(&req, IDENTITY_COOKIE.0);
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
        match self
            .shown(&bytes, &state, &ticket, identity_cookie.as_deref())
            .await
        {
            Shown::TheirsAlone => {}
            Shown::SignIn(redirect) => return redirect,
            Shown::NotThem => {
                creds.count(upstream, "refused");
                creds.proof_failed(&state, &ticket);
                tracing::warn!(
                    upstream,
                    "a connect link was confirmed by someone it was not made for; nothing was stored"
                );
                let who = crate::credentials::person(&ticket.owner);
                return refused(&Refused::NotYou(who).to_string());
            }
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
                to_upstream_sign_in(creds, upstream, &state, target).await
            }
        }
    }

    /// Whether the form shows the browser is the link's person: its certificate, the key typed
    /// on the page, or the mark of a sign-in at the identity provider in this browser; without
    /// that mark, a JWT person is sent to sign in.
    async fn shown(
        &self,
        form: &[u8],
        state: &str,
        ticket: &crate::credentials::Ticket,
        identity_cookie: Option<&str>,
    ) -> Shown {
        let creds = self.creds;
        let yes = |shown: bool| {
            if shown {
                Shown::TheirsAlone
            } else {
                Shown::NotThem
            }
        };
        match Proof::of(self.parts, &ticket.owner, self.certificate) {
            Proof::Certificate => Shown::TheirsAlone,
            Proof::Typed => yes(proven(
                self.parts,
                &ticket.owner,
                &field(form, "proof").unwrap_or_default(),
            )),
            Proof::SignIn(settings) => match field(form, "signed_in") {
                Some(mark) => yes(creds.is_signed_in(&mark, ticket, identity_cookie)),
                None => match creds.start_sign_in(state, ticket, &settings).await {
                    Ok((to, nonce)) => Shown::SignIn(sign_in_redirect(
                        &to,
                        IDENTITY_COOKIE,
                        &nonce,
                        creds.served_over_https(),
                    )),
                    Err(why) => Shown::SignIn(oauth_refused(&why)),
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cookie(https: bool) -> String {
        let r = sign_in_redirect(
            "https://as.example/authorize",
            (BROWSER_COOKIE, &upstream_cookie("gh")),
            "n0nce",
            https,
        );
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
