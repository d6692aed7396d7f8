//! The HTTP listener: `/mcp` (Streamable HTTP, both eras), `/healthz`, `/readyz`.

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use rmcp::transport::{
    StreamableHttpServerConfig, StreamableHttpService,
    streamable_http_server::session::local::LocalSessionManager,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{
    core::Core,
    mcp::Gateway,
    replay::{Replay, ResumeRefused},
    responses::{challenge, json, unauthorized},
    resumable::Resumable,
    sealed_sessions::SealedSessions,
    tracked::Tracked,
};
use crate::{config::GatewaySettings, policy::identity::AuthError};

/// Path of the MCP endpoint.
pub const MCP_PATH: &str = "/mcp";
/// The handshake era's session header.
const SESSION_HEADER: &str = "mcp-session-id";

pub(super) type Body = BoxBody<Bytes, Infallible>;

/// Accepts connections until `stop_accepting` is cancelled; connections and sessions already
/// open keep being served until `close_all` is cancelled (so in-flight calls can drain).
pub async fn serve(
    listener: TcpListener,
    gateway: Gateway,
    core: Arc<Core>,
    settings: &GatewaySettings,
    stop_accepting: CancellationToken,
    close_all: CancellationToken,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    // Session streams start with a priming event and are buffered for resumption (`replay`).
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.sse_retry = settings.sse_retry;
    // rmcp's own copy of a finished request's events is not needed: resumption reads `replay`.
    sessions.session_config.completed_cache_ttl = Duration::ZERO;
    let replay = Replay::new(settings.replay, core.metrics.replay_dropped.clone());
    let sessions = Arc::new(Resumable::new(
        sessions,
        replay.clone(),
        settings.max_sessions,
    ));
    core.count_sessions(sessions.clone());
    let sealed = SealedSessions::new(core.seal.clone(), settings.session_ttl);
    let mut config = mcp_config(settings, local, close_all.child_token());
    config.session_store = Some(sealed.clone());
    let mcp = StreamableHttpService::new(move || Ok(gateway.clone()), sessions.clone(), config);
    let tls = settings.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let edge = Edge {
        mcp,
        core,
        sealed,
        replay,
        max_body: settings.max_body_bytes,
        header_timeout: settings.header_read_timeout,
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
    let connections = Arc::new(tokio::sync::Semaphore::new(settings.max_connections));
    let refused = edge.core.metrics.connections_refused.clone();
    let tls_timeout = settings.tls_handshake_timeout;
    let mut refusing = false;
    // Accept errors (e.g. too many open files) are transient: keep serving, but back off
    // (a failing accept returns at once, so retrying at once spins a core) and log once per
    // episode, not once per attempt.
    let mut failing: u64 = 0;
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => {
                    if failing > 0 {
                        tracing::warn!("accepting connections again after {failing} failed attempts");
                        failing = 0;
                    }
                    s
                }
                Err(e) => {
                    if failing == 0 {
                        tracing::warn!("accept failed: {e}; retrying with backoff");
                    }
                    failing += 1;
                    let pause = Duration::from_millis(10u64 << failing.min(7)).min(Duration::from_secs(1));
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = stop_accepting.cancelled() => return Ok(()),
                    }
                    continue;
                }
            },
            _ = stop_accepting.cancelled() => return Ok(()),
        };
        // Past `max_connections` a new connection is closed at once (logged once per episode),
        // so the open ones keep their share of memory and descriptors.
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            if !refusing {
                tracing::warn!(%peer, "too many connections ({}); closing new ones", settings.max_connections);
                refusing = true;
            }
            refused.inc();
            drop(stream);
            continue;
        };
        refusing = false;
        // SSE responses go out in several small writes; without NODELAY, Nagle holds them for
        // the peer's delayed ACK (~40 ms per call on a kept-alive connection).
        let _ = stream.set_nodelay(true);
        let edge = edge.clone();
        let conn_shutdown = close_all.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                None => {
                    edge.serve_connection(stream, Arc::default(), conn_shutdown)
                        .await
                }
                Some(acceptor) => match tokio::time::timeout(tls_timeout, acceptor.accept(stream))
                    .await
                    .unwrap_or_else(|_| {
                        Err(std::io::Error::other(format!(
                            "no handshake within {tls_timeout:?}"
                        )))
                    }) {
                    Ok(tls_stream) => {
                        let names = tls_stream
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .map(|c| crate::policy::identity::certificate_names(c.as_ref()))
                            .unwrap_or_default();
                        edge.serve_connection(tls_stream, Arc::new(names), conn_shutdown)
                            .await
                    }
                    Err(e) => tracing::info!(%peer, "TLS handshake failed: {e}"),
                },
            }
        });
    }
}

/// Everything a connection needs to answer requests.
#[derive(Clone)]
struct Edge {
    mcp: StreamableHttpService<Gateway, Resumable>,
    core: Arc<Core>,
    sealed: Arc<SealedSessions>,
    replay: Arc<Replay>,
    max_body: usize,
    /// How long a client may take to send headers (and a kept-alive connection may idle).
    header_timeout: Duration,
    /// How long a client may take to send a body.
    body_timeout: Duration,
    /// Host names the other routes answer (IP literals are always accepted).
    allowed_hosts: Arc<Vec<String>>,
    /// `[gateway] public_metrics`.
    public_metrics: bool,
    sessions: Arc<Resumable>,
}

impl Edge {
    async fn serve_connection<I>(
        self,
        io: I,
        cert_names: Arc<Vec<String>>,
        shutdown: CancellationToken,
    ) where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let header_timeout = self.header_timeout;
        // hyper's header timeout starts with a request's first byte: a connection that never
        // sends one would stay open. It gets `header_timeout` for its first request.
        let asked = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = asked.clone();
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            seen.store(true, std::sync::atomic::Ordering::Relaxed);
            let edge = self.clone();
            let cert_names = cert_names.clone();
            async move { Ok::<_, Infallible>(edge.route(req, &cert_names).await) }
        });
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout);
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(Some(header_timeout))
            .keep_alive_timeout(header_timeout);
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
        tokio::pin!(conn);
        let first = tokio::time::sleep(header_timeout);
        tokio::pin!(first);
        let (mut waited, mut closing) = (false, false);
        loop {
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection ended: {e}");
                    }
                    return;
                }
                _ = &mut first, if !waited => {
                    waited = true;
                    if !asked.load(std::sync::atomic::Ordering::Relaxed) && !closing {
                        tracing::debug!("closing a connection that sent no request within {header_timeout:?}");
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
                _ = shutdown.cancelled(), if !closing => {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }

    async fn route(self, mut req: Request<Incoming>, cert_names: &[String]) -> Response<Body> {
        let Edge {
            mut mcp,
            core,
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
        let auth = core.auth.load_full();
        let cert_identity = auth.certificate_identity(cert_names);
        // DNS rebinding: a page of an attacker's name must not read the other routes either
        // (rmcp checks `/mcp` itself).
        if req.uri().path() != MCP_PATH && !super::health::host_allowed(&req, &allowed_hosts) {
            return json(
                StatusCode::FORBIDDEN,
                &serde_json::json!({"error": "Host not allowed; add it to [gateway] allowed_hosts"}),
            );
        }
        match req.uri().path() {
            // Authentication comes first: an unauthenticated request is answered 401 whatever
            // else is wrong with it, and never reaches a policy. A client certificate that maps
            // to an identity is that identity; otherwise the request's credentials decide.
            MCP_PATH => match cert_identity
                .map(Ok)
                .unwrap_or_else(|| auth.authenticate(req.headers()))
            {
                Ok(identity) => {
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
                    // Ending a session that is not one (forged, someone else's, or already
                    // ended) is not a success.
                    if deleting && matches!(presented, Some(None)) {
                        return json(
                            StatusCode::NOT_FOUND,
                            &serde_json::json!({"error": "no such session"}),
                        );
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
                        .then(|| core.request_started());
                    // A POST body is read here, bounded in size and time, so a slow or oversized
                    // body gets a clear answer (408, 413) instead of holding the connection.
                    let answer = if req.method() == http::Method::POST {
                        match super::body::read_body(req, max_body, body_timeout).await {
                            Ok(req) => {
                                tower::Service::<Request<Full<Bytes>>>::call(&mut mcp, req).await
                            }
                            Err(refusal) => Ok(refusal),
                        }
                    } else {
                        tower::Service::<Request<Incoming>>::call(&mut mcp, req).await
                    };
                    let answer = match answer {
                        Ok(r) if r.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                            Ok(super::body::as_jsonrpc_error(r).await)
                        }
                        other => other,
                    };
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
            "/healthz" => json(StatusCode::OK, &serde_json::json!({"status": "ok"})),
            // With [auth], the details (error texts, server names) are for callers who
            // authenticate; probes get the status and each upstream's phase.
            "/readyz" => super::health::readyz(
                &core.pool,
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
                    Ok(()) => super::health::metrics(&core),
                    Err(e) => challenge(&e, auth.resource_metadata.as_ref()),
                }
            }
            _ => json(
                StatusCode::NOT_FOUND,
                &serde_json::json!({"error": "not found; the MCP endpoint is /mcp"}),
            ),
        }
    }
}

fn mcp_config(
    settings: &GatewaySettings,
    local: SocketAddr,
    ct: CancellationToken,
) -> StreamableHttpServerConfig {
    let port = local.port();
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    hosts.extend(settings.allowed_hosts.iter().cloned());
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
    let status = match refused {
        ResumeRefused::NoSuchStream(_) => StatusCode::NOT_FOUND,
        ResumeRefused::Dropped(_) => StatusCode::GONE,
    };
    Some(json(
        status,
        &serde_json::json!({"error": refused.to_string()}),
    ))
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

/// Decides whether a request's headers are authorized (built-in test servers only).
pub type Gate = Arc<dyn Fn(&http::HeaderMap) -> bool + Send + Sync>;

/// Serves an rmcp Streamable HTTP service on every path of `listener`, forever. Used by the
/// built-in test servers (demo upstream, conformance fixture), which need no routing; requests
/// the `gate` refuses get 401 with a Bearer challenge.
pub async fn serve_plain<S>(
    listener: TcpListener,
    service: StreamableHttpService<S, LocalSessionManager>,
    gate: Option<Gate>,
) -> std::io::Result<()>
where
    S: rmcp::ServerHandler + Send + 'static,
{
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let gate = gate.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let mut service = service.clone();
                let gate = gate.clone();
                async move {
                    if gate.is_some_and(|g| !g(req.headers())) {
                        return Ok(unauthorized(&AuthError::Invalid));
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
