//! The operator console (`/console` on the admin listener): a static page embedded in the
//! binary, and the admin endpoints only it needs — finished calls (recent, one, and a live
//! server-sent-events stream) and latency windows. Everything else the page shows comes from
//! the admin API it already has, with the same bearer token.
//!
//! The page itself carries no data, so it is served without the token (it asks for it and
//! keeps it in the browser's session storage); every data request needs the token.

use crate::server::api_error::ApiError;
use std::{convert::Infallible, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::{http::Body, responses::json};
use crate::telemetry::call_feed::{CallFeed, FeedEntry, RECENT_CALLS};

/// Strict: only this page's own script and style, requests only to this origin.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// A comment line that keeps idle streams (and the proxies between) open.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Calls listed unless `?limit=` says otherwise.
const DEFAULT_LIMIT: usize = 200;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const RUNNER_JS: &str = include_str!("assets/runner.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The page and its assets; `None` for any other path.
pub(super) fn asset(method: &Method, path: &str) -> Option<Response<Body>> {
    let (body, kind) = match path {
        "/console" | "/console/" => (INDEX_HTML, "text/html; charset=utf-8"),
        "/console/app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "/console/runner.js" => (RUNNER_JS, "text/javascript; charset=utf-8"),
        "/console/app.css" => (APP_CSS, "text/css; charset=utf-8"),
        _ => return None,
    };
    if method != Method::GET && method != Method::HEAD {
        return Some(ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "GET only").response());
    }
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(CSP),
    );
    harden(h);
    Some(resp)
}

/// Headers every console and admin answer carries: no sniffing, framing, referrers or caching.
pub(super) fn harden(h: &mut http::HeaderMap) {
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::X_FRAME_OPTIONS,
        header::HeaderValue::from_static("DENY"),
    );
    h.insert(
        header::REFERRER_POLICY,
        header::HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
}

/// `/admin/calls…` and `/admin/latency` (already authorized); `None` for other paths.
pub(super) fn route(
    feed: Option<&CallFeed>,
    method: &Method,
    parts: &[&str],
    query: &str,
    shutdown: &CancellationToken,
) -> Option<Response<Body>> {
    if !matches!(parts, ["admin", "calls", ..] | ["admin", "latency"]) {
        return None;
    }
    let Some(feed) = feed else {
        return Some(
            ApiError::not_found("the console is off ([admin] console = false)").response(),
        );
    };
    let q = Query::parse(query);
    Some(match (method, parts) {
        (&Method::GET, ["admin", "calls"]) => {
            let limit = q
                .number("limit")
                .map_or(DEFAULT_LIMIT, |n| n.min(RECENT_CALLS));
            let calls = feed.recent(limit, |e| q.keeps(e));
            json(StatusCode::OK, &json!({"calls": calls}))
        }
        (&Method::GET, ["admin", "calls", "stream"]) => stream(feed, q.number("after"), shutdown),
        (&Method::GET, ["admin", "calls", seq]) => match seq.parse().ok().and_then(|s| feed.get(s))
        {
            Some(e) => json(
                StatusCode::OK,
                &serde_json::to_value(&*e).unwrap_or_default(),
            ),
            None => ApiError::not_found("no such call in the feed (it keeps the newest 1000)")
                .response(),
        },
        (&Method::GET, ["admin", "latency"]) => json(StatusCode::OK, &feed.latency()),
        _ => ApiError::unknown_endpoint(
            "unknown console endpoint",
            &[
                "GET /admin/calls?limit=N&upstream=U&identity=I&outcome=O",
                "GET /admin/calls/SEQ",
                "GET /admin/calls/stream?after=SEQ",
                "GET /admin/latency",
            ],
        )
        .response(),
    })
}

/// The query string, decoded.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(query: &str) -> Self {
        Self(
            form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    fn number(&self, key: &str) -> Option<usize> {
        self.get(key).and_then(|v| v.parse().ok())
    }

    fn keeps(&self, e: &FeedEntry) -> bool {
        let r = &e.record;
        self.get("upstream")
            .is_none_or(|u| r.upstream.as_deref() == Some(u))
            && self.get("identity").is_none_or(|i| r.identity == i)
            && self.get("outcome").is_none_or(|o| r.outcome == o)
    }
}

/// Server-sent events: the calls after `after` that the feed still holds, then each call as
/// it finishes, until the client goes or the gateway stops.
fn stream(feed: &CallFeed, after: Option<usize>, shutdown: &CancellationToken) -> Response<Body> {
    let (backlog, rx) = feed.follow(after.map_or(u64::MAX, |a| a as u64));
    let backlog: Vec<Bytes> = backlog.iter().map(event).collect();
    let start = futures::stream::iter(
        std::iter::once(Bytes::from_static(b"retry: 3000\n\n")).chain(backlog),
    );
    let live = futures::stream::unfold((rx, shutdown.clone()), |(mut rx, shutdown)| async move {
        let chunk = tokio::select! {
            r = rx.recv() => match r {
                Ok(e) => event(&e),
                Err(RecvError::Lagged(n)) => {
                    Bytes::from(format!("event: lagged\ndata: {{\"skipped\":{n}}}\n\n"))
                }
                Err(RecvError::Closed) => return None,
            },
            _ = tokio::time::sleep(KEEPALIVE) => Bytes::from_static(b": keepalive\n\n"),
            _ = shutdown.cancelled() => return None,
        };
        Some((chunk, (rx, shutdown)))
    });
    let frames = start
        .chain(live)
        .map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut resp = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    harden(h);
    resp
}

/// One call as an SSE event (its JSON has no raw newlines, so one `data:` line holds it).
fn event(e: &Arc<FeedEntry>) -> Bytes {
    let data = serde_json::to_string(&**e).unwrap_or_else(|_| Value::Null.to_string());
    Bytes::from(format!("id: {}\nevent: call\ndata: {data}\n\n", e.seq))
}
