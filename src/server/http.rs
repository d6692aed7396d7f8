//! The HTTP listener: `/mcp` (Streamable HTTP, both eras), `/healthz`, `/readyz`.

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use rmcp::transport::{
    StreamableHttpServerConfig, StreamableHttpService,
    streamable_http_server::session::local::LocalSessionManager,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{
    direct::{self, Direct},
    mcp::Gateway,
    parts::EdgeParts,
    replay::{Replay, ResumeRefused},
    responses::{challenge, json, unauthorized},
    resumable::Resumable,
    sealed_sessions::SealedSessions,
    tracked::Tracked,
    wire_error::WireError,
};
use crate::{config::GatewaySettings, policy::identity::AuthError};

/// Path of the MCP endpoint.
pub const MCP_PATH: &str = "/mcp";
/// `/mcp/<view>`: the same endpoint through a view (`[views.NAME]`).
const VIEW_PREFIX: &str = "/mcp/";

/// 404 for `/mcp/<name>` when no view has that name, with the names there are.
fn unknown_view(name: &str, views: &crate::policy::view::Views) -> Response<Body> {
    json(
        StatusCode::NOT_FOUND,
        &serde_json::json!({
            "error": format!("no view is named `{}`", crate::names::shown(name)),
            "views": views.names(),
        }),
    )
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
    // Session streams start with a priming event and are buffered for resumption (`replay`).
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.sse_retry = settings.sse_retry;
    // rmcp's own copy of a finished request's events is not needed: resumption reads `replay`.
    sessions.session_config.completed_cache_ttl = Duration::ZERO;
    let replay = Replay::new(settings.replay, parts.metrics.replay_dropped.clone());
    sessions.session_config.keep_alive = Some(settings.session_idle);
    let sessions = Arc::new(Resumable::new(
        sessions,
        replay.clone(),
        settings.max_sessions,
        gateway.parts.hub.clone(),
    ));
    parts.gauges.count_sessions(sessions.clone());
    let sealed = SealedSessions::new(parts.seal.clone(), settings.session_ttl);
    let mut config = mcp_config(settings, local, close_all.child_token());
    config.session_store = Some(sealed.clone());
    let direct = Direct::new(
        gateway.clone(),
        mcp_hosts(settings),
        config.allowed_origins.clone(),
        super::direct::Settings {
            replay: replay.clone(),
            sessions: sessions.clone(),
            sealed: sealed.clone(),
            sse_retry: settings.sse_retry,
            stream_after: settings.stream_after,
            idle_session: settings.session_idle,
            shutdown: close_all.child_token(),
        },
    );
    let mcp = StreamableHttpService::new(move || Ok(gateway.clone()), sessions.clone(), config);
    let edge = Edge {
        mcp,
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
    mcp: StreamableHttpService<Gateway, Resumable>,
    /// Answers calls, lists and reads of both eras without rmcp's transport (see `direct`).
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
    sessions: Arc<Resumable>,
}

impl Edge {
    async fn route(
        self,
        mut req: Request<Incoming>,
        cert_names: Arc<Vec<String>>,
    ) -> Response<Body> {
        let Edge {
            mut mcp,
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
                    // Clients see sealed session ids; rmcp sees its own (any replica can open
                    // them: see sealed_sessions). Anything else is no session of ours.
                    let presented = req
                        .headers()
                        .get(SESSION_HEADER)
                        .map(|v| v.to_str().ok().and_then(|v| sealed.open(v, &identity.name)));
                    if let Some(sid) = &presented {
                        let inner = sid
                            .as_deref()
                            .and_then(|s| http::HeaderValue::from_str(s).ok())
                            .unwrap_or(http::HeaderValue::from_static("unknown"));
                        req.headers_mut().insert(SESSION_HEADER, inner);
                    }
                    let who = identity.name.clone();
                    let deleting = req.method() == http::Method::DELETE;
                    // A session id that is no session (forged, someone else's, or ended): 404,
                    // so the client starts a new one. The stateless era ignores session ids.
                    let stateless = req
                        .headers()
                        .get("mcp-protocol-version")
                        .is_some_and(|v| v.as_bytes() >= direct::STATELESS.as_bytes());
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
                    // A POST body is read here, bounded in size and time, so a slow or oversized
                    // body gets a clear answer (408, 413) instead of holding the connection.
                    let answer = if req.method() == http::Method::POST {
                        match super::body::read_body(req, max_body, body_timeout).await {
                            Ok((head, body)) => {
                                let answered = match &presented {
                                    Some(Some(sid)) => direct.answer(&head, &body, sid).await,
                                    None if listening => direct.listen(&head, &body).await,
                                    None => match direct.answer_stateless(&head, &body).await {
                                        Some(r) => Some(r),
                                        None => match direct.initialize(&head, &body).await {
                                            Some(r) => Some(r),
                                            None => direct.session_required(&head, &body),
                                        },
                                    },
                                    _ => None,
                                };
                                match answered {
                                    Some(r) => Ok(r),
                                    // A body that is no JSON-RPC message is refused here.
                                    None => match direct::decodable(&body).and_then(|()| {
                                        direct.check_version(&head.headers, Some(&body))
                                    }) {
                                        Err(refused) => Ok(refused.response()),
                                        Ok(()) => {
                                            let sid = presented.as_ref().and_then(|s| s.as_deref());
                                            rmcp_post(&mut mcp, &direct, head, body, sid).await
                                        }
                                    },
                                }
                            }
                            Err(refusal) => Ok(refusal),
                        }
                    } else {
                        let native = match &presented {
                            Some(Some(sid)) => {
                                let (head, body) = req.into_parts();
                                let answered = match head.method {
                                    http::Method::DELETE => direct.delete(&head, sid).await,
                                    http::Method::GET => direct.stream(&head, sid).await,
                                    _ => None,
                                };
                                req = Request::from_parts(head, body);
                                answered
                            }
                            None => direct.sessionless(req.headers()),
                            Some(None) => None,
                        };
                        match native {
                            Some(r) => Ok(r),
                            None => match direct.check_version(req.headers(), None) {
                                Err(refused) => Ok(refused.response()),
                                Ok(()) => {
                                    tower::Service::<Request<Incoming>>::call(&mut mcp, req).await
                                }
                            },
                        }
                    };
                    if deleting && let Some(Some(sid)) = &presented {
                        direct.ended(sid);
                    }
                    let answer = answer.map(|mut r| {
                        // rmcp answers a session DELETE with 202; SDKs expect 200 or 204 (the
                        // Python SDK logs a failure for anything else), and nothing is pending.
                        if deleting && r.status() == StatusCode::ACCEPTED {
                            *r.status_mut() = StatusCode::NO_CONTENT;
                        }
                        r
                    });
                    match answer.map(|r| seal_new_session(r, &sealed, &who)) {
                        Ok(r) => match in_flight {
                            Some(guard) => Tracked::start(r, guard).await,
                            None => r,
                        },
                        Err(never) => match never {},
                    }
                }
                Err(e) => challenge(&e, auth.resource_metadata.as_ref()),
            },
            p if p.starts_with("/.well-known/oauth-protected-resource") => {
                match &auth.resource_metadata {
                    Some(m) => json(StatusCode::OK, &serde_json::to_value(m).unwrap_or_default()),
                    None => json(
                        StatusCode::NOT_FOUND,
                        &serde_json::json!({"error": "OAuth is not configured"}),
                    ),
                }
            }
            p if p.starts_with(CONNECT_PREFIX) => {
                let upstream = p[CONNECT_PREFIX.len()..].to_owned();
                super::connect_page::serve(&parts, &upstream, req, body_timeout).await
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

/// A POST the direct path did not take, answered by rmcp's transport. A session's
/// `notifications/initialized` is answered once the session is ready for the next request.
async fn rmcp_post(
    mcp: &mut StreamableHttpService<Gateway, Resumable>,
    direct: &Direct,
    head: http::request::Parts,
    body: Bytes,
    session: Option<&str>,
) -> Result<Response<Body>, std::convert::Infallible> {
    let initialized = direct::is_initialized(&body);
    let req = Request::from_parts(head, Full::new(body));
    let r = tower::Service::<Request<Full<Bytes>>>::call(mcp, req).await;
    if let Some(sid) = session
        && initialized
    {
        direct.until_negotiated(sid).await;
    }
    r
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

fn mcp_config(
    settings: &GatewaySettings,
    local: SocketAddr,
    ct: CancellationToken,
) -> StreamableHttpServerConfig {
    let port = local.port();
    let hosts = mcp_hosts(settings);
    let mut origins = Vec::new();
    for scheme in ["http", "https"] {
        for host in ["127.0.0.1", "localhost", "[::1]"] {
            origins.push(format!("{scheme}://{host}:{port}"));
        }
    }
    origins.extend(settings.allowed_origins.iter().cloned());
    StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .with_max_request_body_bytes(settings.max_body_bytes)
        .with_sse_retry(settings.sse_retry)
        .with_json_response(true)
        .with_cancellation_token(ct)
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
    if last == super::resumable::STANDALONE_PRIMING_ID {
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
