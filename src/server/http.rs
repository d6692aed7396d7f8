//! The HTTP listener: `/mcp` (Streamable HTTP, both eras), `/healthz`, `/readyz`.

use crate::server::api_error::ApiError;
use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use rmcp::transport::{
    StreamableHttpService, streamable_http_server::session::local::LocalSessionManager,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{
    mcp::Gateway,
    parts::EdgeParts,
    replay::{Replay, ResumeRefused},
    responses::{challenge, json, unauthorized},
    sealed_sessions::SealedSessions,
    session_limit::SessionLimit,
    tracked::Tracked,
    transport::{self, Direct},
    wire_error::WireError,
};
use crate::{config::GatewaySettings, policy::identity::AuthError};

/// Path of the MCP endpoint.
pub const MCP_PATH: &str = "/mcp";
/// `/mcp/<view>`: the same endpoint through a view (`[views.NAME]`).
const VIEW_PREFIX: &str = "/mcp/";

/// 404 for `/mcp/<name>` when no view has that name, with the names there are.
fn unknown_view(name: &str, views: &crate::policy::view::Views) -> Response<Body> {
    ApiError::not_found(format!("no view is named `{}`", crate::names::shown(name)))
        .with("views", views.names())
        .response()
}
/// `/connect/<upstream>`: where people connect their own credentials (`per_user`).
const CONNECT_PREFIX: &str = "/connect/";
/// The handshake era's session header.
const SESSION_HEADER: &str = "mcp-session-id";

pub(super) type Body = BoxBody<Bytes, Infallible>;

/// Accepts connections until `stop_accepting` is cancelled; connections and sessions already
/// open keep being served until `close_all` is cancelled (so in-flight calls can drain).
pub async fn serve(
    listener: TcpListener,
    gateway: Gateway,
    parts: EdgeParts,
    settings: &GatewaySettings,
    stop_accepting: CancellationToken,
    close_all: CancellationToken,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    if let Some(c) = &parts.credentials {
        let scheme = if settings.tls.is_some() {
            "https"
        } else {
            "http"
        };
        c.set_listener_url(format!("{scheme}://{local}"));
    }
    let replay = Replay::new(settings.replay, parts.metrics.replay_dropped.clone());
    let sessions = Arc::new(SessionLimit::new(
        settings.max_sessions,
        gateway.parts.hub.clone(),
    ));
    parts.gauges.count_sessions(sessions.clone());
    let sealed = SealedSessions::new(parts.seal.clone(), settings.session_ttl);
    let direct = Direct::new(
        gateway.clone(),
        mcp_hosts(settings),
        mcp_origins(settings, local),
        super::transport::Settings {
            replay: replay.clone(),
            sessions: sessions.clone(),
            sealed: sealed.clone(),
            sse_retry: settings.sse_retry,
            stream_after: settings.stream_after,
            idle_session: settings.session_idle,
            shutdown: close_all.child_token(),
        },
    );
    let edge = Edge {
        direct,
        parts,
        sealed,
        replay,
        max_body: settings.max_body_bytes,
        body_timeout: settings.body_read_timeout,
        allowed_hosts: Arc::new(
            ["localhost".to_owned()]
                .into_iter()
                .chain(settings.allowed_hosts.iter().cloned())
                .collect(),
        ),
        public_metrics: settings.public_metrics,
        sessions,
    };
    let limits = super::listener::Limits {
        name: "mcp",
        max_connections: settings.max_connections,
        header_timeout: settings.header_read_timeout,
        tls: settings.tls.clone().map(tokio_rustls::TlsAcceptor::from),
        tls_timeout: settings.tls_handshake_timeout,
        refused: edge.parts.metrics.refused_on("mcp"),
    };
    let handle = move |req, cert_names: Arc<Vec<String>>| edge.clone().route(req, cert_names);
    super::listener::serve(listener, limits, handle, stop_accepting, close_all).await;
    Ok(())
}

/// Everything a connection needs to answer requests.
#[derive(Clone)]
struct Edge {
    /// Answers every request of both eras on `/mcp` (see `direct`).
    direct: Direct,
    parts: EdgeParts,
    sealed: Arc<SealedSessions>,
    replay: Arc<Replay>,
    max_body: usize,
    /// How long a client may take to send a body.
    body_timeout: Duration,
    /// Host names the other routes answer (IP literals are always accepted).
    allowed_hosts: Arc<Vec<String>>,
    /// `[gateway] public_metrics`.
    public_metrics: bool,
    sessions: Arc<SessionLimit>,
}

impl Edge {
    async fn route(
        self,
        mut req: Request<Incoming>,
        cert_names: Arc<Vec<String>>,
    ) -> Response<Body> {
        let Edge {
            direct,
            parts,
            sealed,
            replay,
            max_body,
            body_timeout,
            allowed_hosts,
            public_metrics,
            sessions,
            ..
        } = self;
        // Read once per request: a reload swaps it for the next one. A client certificate is
        // mapped per request too, so a reload that drops or narrows it applies to connections
        // that stay open.
        let auth = parts.auth.load_full();
        let cert_identity = auth.certificate_identity(&cert_names);
        // DNS rebinding: a page of an attacker's name must not read the other routes either
        // (rmcp checks `/mcp` itself).
        let view = match req.uri().path().strip_prefix(VIEW_PREFIX) {
            Some(name) => match parts.views.load().get(name) {
                Some(v) => Some(v.scope.clone()),
                None if !super::health::host_allowed(&req, &allowed_hosts) => {
                    return WireError::HostNotAllowed.plain();
                }
                // Which views exist is for callers who authenticate.
                None => {
                    return match cert_identity
                        .map(Ok)
                        .unwrap_or_else(|| auth.authenticate(req.headers()))
                    {
                        Ok(_) => unknown_view(name, &parts.views.load()),
                        Err(e) => challenge(&e, auth.resource_metadata.as_ref()),
                    };
                }
            },
            None => None,
        };
        let on_mcp = view.is_some() || req.uri().path() == MCP_PATH;
        if !on_mcp && !super::health::host_allowed(&req, &allowed_hosts) {
            return WireError::HostNotAllowed.plain();
        }
        match req.uri().path() {
            // Authentication comes first: an unauthenticated request is answered 401 whatever
            // else is wrong with it, and never reaches a policy. A client certificate that maps
            // to an identity is that identity; otherwise the request's credentials decide.
            _ if on_mcp => match cert_identity
                .map(Ok)
                .unwrap_or_else(|| auth.authenticate(req.headers()))
            {
                Ok(identity) => {
                    // Host, Origin (DNS rebinding), method and media types, before anything
                    // reads the request further.
                    let (head, body) = req.into_parts();
                    if let Err(refused) = direct.gate(&head) {
                        return refused.response();
                    }
                    req = Request::from_parts(head, body);
                    // A view's path serves that view instead of the roles' default one.
                    let identity = match view {
                        Some(scope) => identity.through(scope),
                        None => identity,
                    };
                    // Clients see sealed session ids (any replica can open them: see
                    // sealed_sessions). Anything else is no session of ours.
                    let presented = req.headers().get(SESSION_HEADER).map(|v| {
                        v.to_str()
                            .ok()
                            .and_then(|v| sealed.open(v, &identity.key()))
                    });
                    let who = identity.key();
                    let deleting = req.method() == http::Method::DELETE;
                    // A session id that is no session (forged, someone else's, or ended): 404,
                    // so the client starts a new one. The stateless era ignores session ids.
                    let stateless = req
                        .headers()
                        .get("mcp-protocol-version")
                        .is_some_and(|v| v.as_bytes() >= transport::STATELESS.as_bytes());
                    if matches!(presented, Some(None)) && (deleting || !stateless) {
                        return WireError::NoSuchSession.response();
                    }
                    if let Some(Some(sid)) = &presented
                        && let Some(refused) = refused_resumption(&req, &replay, sid)
                    {
                        return refused;
                    }
                    if let Some(full) = sessions.refuse_new(&req) {
                        return full;
                    }
                    req.extensions_mut().insert(identity);
                    // A POST is in flight until its response body (JSON or SSE) has been
                    // sent: shutdown drains these. Standalone GET streams and stateless-era
                    // `subscriptions/listen` streams (which never end by themselves: a peer
                    // gateway holds one open) are not counted.
                    let listening = req
                        .headers()
                        .get("mcp-method")
                        .is_some_and(|m| m.as_bytes() == b"subscriptions/listen");
                    let in_flight = (req.method() == http::Method::POST && !listening)
                        .then(|| parts.in_flight.start());
                    let session = presented.as_ref().and_then(|s| s.as_deref());
                    // A POST body is read here, bounded in size and time, so a slow or oversized
                    // body gets a clear answer (408, 413) instead of holding the connection.
                    let answer = if req.method() == http::Method::POST {
                        match super::body::read_body(req, max_body, body_timeout).await {
                            Ok((head, body)) => {
                                let post = Post {
                                    head: &head,
                                    body: &body,
                                    session,
                                    listening,
                                    stateless,
                                };
                                post.answer(&direct).await
                            }
                            Err(refusal) => refusal,
                        }
                    } else {
                        let (head, _) = req.into_parts();
                        stream_or_delete(&direct, &head, session).await
                    };
                    let r = seal_new_session(answer, &sealed, &who);
                    match in_flight {
                        Some(guard) => Tracked::start(r, guard).await,
                        None => r,
                    }
                }
                Err(e) => challenge(&e, auth.resource_metadata.as_ref()),
            },
            p if p.starts_with("/.well-known/oauth-protected-resource") => {
                match &auth.resource_metadata {
                    Some(m) => json(StatusCode::OK, &serde_json::to_value(m).unwrap_or_default()),
                    None => ApiError::not_found("OAuth is not configured").response(),
                }
            }
            p if p == super::account_page::ACCOUNT_PATH || p == "/account/disconnect" => {
                let path = p.to_owned();
                let certificate = cert_identity
                    .as_ref()
                    .map(crate::policy::identity::Identity::key);
                super::account_page::serve(&parts, &path, req, certificate, body_timeout).await
            }
            p if p.starts_with(CONNECT_PREFIX) => {
                let upstream = p[CONNECT_PREFIX.len()..].to_owned();
                let certificate = cert_identity
                    .as_ref()
                    .map(crate::policy::identity::Identity::key);
                super::connect_page::serve(&parts, &upstream, req, certificate, body_timeout).await
            }
            "/healthz" => json(StatusCode::OK, &serde_json::json!({"status": "ok"})),
            // With [auth], the details (error texts, server names) are for callers who
            // authenticate; probes get the status and each upstream's phase.
            "/readyz" => super::health::readyz(
                &parts.pool,
                !auth.open && cert_identity.is_none() && auth.authenticate(req.headers()).is_err(),
            ),
            // With [auth], its labels (upstream and tool names, outcomes) are for callers who
            // authenticate, unless `public_metrics` opens it to scrapers.
            "/metrics" => {
                let open = public_metrics || auth.open || cert_identity.is_some();
                match if open {
                    Ok(())
                } else {
                    auth.authenticate(req.headers()).map(|_| ())
                } {
                    Ok(()) => super::health::metrics(&parts.gauges),
                    Err(e) => challenge(&e, auth.resource_metadata.as_ref()),
                }
            }
            _ => WireError::NotFound.plain(),
        }
    }
}

/// A POST to `/mcp`, its body read.
struct Post<'a> {
    head: &'a http::request::Parts,
    body: &'a Bytes,
    /// The open session its (sealed) id names.
    session: Option<&'a str>,
    /// `Mcp-Method: subscriptions/listen`.
    listening: bool,
    /// Its version header is the stateless era's.
    stateless: bool,
}

impl Post<'_> {
    /// Each path of the edge in turn, until one takes it; what none takes is refused or
    /// answered by `transport::rare`.
    async fn answer(&self, direct: &Direct) -> Response<Body> {
        let Post {
            head,
            body,
            session,
            listening,
            stateless,
        } = *self;
        let mut answered = None;
        if listening {
            answered = direct.listen(head, body).await;
        }
        if answered.is_none() {
            answered = match session {
                Some(sid) if !stateless => direct.answer(head, body, sid).await,
                _ => direct.answer_stateless(head, body).await,
            };
        }
        if answered.is_none() && session.is_none() {
            answered = direct.initialize(head, body).await;
        }
        if let Some(r) = answered {
            return r;
        }
        // A body that is no JSON-RPC message, or a version no one speaks, is refused here.
        match transport::decodable(body)
            .and_then(|()| direct.check_version(&head.headers, Some(body)))
        {
            Err(refused) => refused.response(),
            Ok(()) => direct.remaining(head, body, session).await,
        }
    }
}

/// A GET (a session's stream) or DELETE (its end); SDKs expect 200 or 204 for a DELETE (the
/// Python SDK logs a failure for anything else).
async fn stream_or_delete(
    direct: &Direct,
    head: &http::request::Parts,
    session: Option<&str>,
) -> Response<Body> {
    if let Err(refused) = direct.check_version(&head.headers, None) {
        return refused.response();
    }
    let answered = match session {
        Some(sid) if head.method == http::Method::DELETE => direct.delete(head, sid).await,
        Some(sid) => direct.stream(head, sid).await,
        None => None,
    };
    match answered {
        Some(mut r) => {
            if head.method == http::Method::DELETE && r.status() == StatusCode::ACCEPTED {
                *r.status_mut() = StatusCode::NO_CONTENT;
            }
            r
        }
        None => direct.remaining_stream(&head.headers),
    }
}

/// The `Host` names `/mcp` answers (DNS rebinding): loopback and `allowed_hosts`.
fn mcp_hosts(settings: &GatewaySettings) -> Vec<String> {
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    hosts.extend(settings.allowed_hosts.iter().cloned());
    hosts
}

/// The `Origin`s `/mcp` answers (DNS rebinding): loopback on the listener's port and
/// `allowed_origins`.
fn mcp_origins(settings: &GatewaySettings, local: SocketAddr) -> Vec<String> {
    let port = local.port();
    let mut origins = Vec::new();
    for scheme in ["http", "https"] {
        for host in ["127.0.0.1", "localhost", "[::1]"] {
            origins.push(format!("{scheme}://{host}:{port}"));
        }
    }
    origins.extend(settings.allowed_origins.iter().cloned());
    origins
}

/// A `GET` resuming after an event this session cannot resume from gets a clear answer (rmcp
/// would answer an empty stream): 404 for a stream that is not the session's, 410 when the
/// events after it were dropped from the buffer.
fn refused_resumption(
    req: &Request<Incoming>,
    replay: &Replay,
    sid: &str,
) -> Option<Response<Body>> {
    if req.method() != http::Method::GET {
        return None;
    }
    let last = req.headers().get("last-event-id")?;
    let last = last.to_str().unwrap_or("(not text)");
    if last == super::session_limit::STANDALONE_PRIMING_ID {
        // The priming event of a standalone stream: the stream starts over.
        return None;
    }
    let refused = replay.check(sid, last).err()?;
    let gone = matches!(refused, ResumeRefused::Dropped(_));
    Some(
        WireError::CannotResume {
            why: refused.to_string(),
            gone,
        }
        .response(),
    )
}

/// A response that created a session carries its sealed id instead of rmcp's.
fn seal_new_session(mut r: Response<Body>, sealed: &SealedSessions, who: &str) -> Response<Body> {
    let sealed_id = r
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|sid| sealed.seal_new(sid, who))
        .and_then(|s| http::HeaderValue::from_str(&s).ok());
    if let Some(v) = sealed_id {
        r.headers_mut().insert(SESSION_HEADER, v);
    }
    r
}

/// What a built-in test server's gate decided about a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Passes, acting as this person: the request reaches the server with [`PERSON_HEADER`].
    As(String),
    Refuse,
    /// 403 `insufficient_scope`: the token lacks these scopes (space-separated).
    NeedsScope(String),
}

/// The header a gate's [`Verdict::As`] puts on a request (one the client sent is removed).
pub const PERSON_HEADER: &str = "x-fedgate-test-person";

/// Decides whether a request's headers are authorized (built-in test servers only).
pub type Gate =
    Arc<dyn Fn(&http::HeaderMap) -> futures::future::BoxFuture<'static, Verdict> + Send + Sync>;

/// Serves an rmcp Streamable HTTP service on every path of `listener`, forever. Used by the
/// built-in test servers (demo upstream, conformance fixture), which need no routing; requests
/// the `gate` refuses get 401 with a Bearer challenge, naming `resource_metadata` (RFC 9728,
/// served at `/.well-known/oauth-protected-resource…`) when there is one.
pub async fn serve_plain<S>(
    listener: TcpListener,
    service: StreamableHttpService<S, LocalSessionManager>,
    gate: Option<Gate>,
    resource_metadata: Option<(String, serde_json::Value)>,
) -> std::io::Result<()>
where
    S: rmcp::ServerHandler + Send + 'static,
{
    let resource_metadata = Arc::new(resource_metadata);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let gate = gate.clone();
        let metadata = resource_metadata.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                let mut service = service.clone();
                let gate = gate.clone();
                let metadata = metadata.clone();
                async move {
                    if let Some((_, m)) = metadata.as_ref()
                        && req
                            .uri()
                            .path()
                            .starts_with("/.well-known/oauth-protected-resource")
                    {
                        return Ok(json(StatusCode::OK, m));
                    }
                    req.headers_mut().remove(PERSON_HEADER);
                    let verdict = match gate {
                        Some(g) => g(req.headers()).await,
                        None => Verdict::Pass,
                    };
                    match verdict {
                        Verdict::Pass => {}
                        Verdict::As(person) => {
                            if let Ok(v) = http::HeaderValue::from_str(&person) {
                                req.headers_mut().insert(PERSON_HEADER, v);
                            }
                        }
                        Verdict::Refuse => {
                            let mut r = unauthorized(&AuthError::Invalid);
                            if let Some((url, _)) = metadata.as_ref()
                                && let Ok(v) = http::HeaderValue::from_str(&format!(
                                    r#"Bearer error="invalid_token", resource_metadata="{url}""#
                                ))
                            {
                                r.headers_mut().insert(http::header::WWW_AUTHENTICATE, v);
                            }
                            return Ok(r);
                        }
                        Verdict::NeedsScope(scope) => {
                            let mut r = ApiError::new(StatusCode::FORBIDDEN, "insufficient_scope")
                                .response();
                            if let Ok(v) = http::HeaderValue::from_str(&format!(
                                r#"Bearer error="insufficient_scope", scope="{scope}""#
                            )) {
                                r.headers_mut().insert(http::header::WWW_AUTHENTICATE, v);
                            }
                            return Ok(r);
                        }
                    }
                    tower::Service::call(&mut service, req).await
                }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                .await;
        });
    }
}
