//! One listener for every port fedgate serves (`/mcp` with its probes and metrics, the admin
//! API with its console): connections capped with a clear 503 past the cap, TLS handshakes and
//! first requests bounded in time, failing accepts backed off and logged once per episode.

use std::{
    convert::Infallible,
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use prometheus::IntCounter;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};
use tokio_util::sync::CancellationToken;

use super::http::Body;

/// How one listener bounds what its clients can hold.
pub(super) struct Limits {
    /// `mcp` or `admin`: in log lines and the refused-connections metric.
    pub name: &'static str,
    pub max_connections: usize,
    /// For a new connection, from its accept to its first request's headers; then for each
    /// request's headers and a kept-alive connection's idle time.
    pub header_timeout: Duration,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pub tls_timeout: Duration,
    /// Counts connections refused past `max_connections`.
    pub refused: IntCounter,
}

/// Connections past the cap that get their 503 written at once; beyond these (a flood) they
/// are closed unanswered, so refusing costs no more descriptors than this.
const REFUSALS_IN_FLIGHT: usize = 64;
/// How long a refused connection may take to read its 503.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Accepts connections until `stop_accepting` is cancelled and serves each with `handle`
/// (a request and the names in the client's certificate); open connections are closed
/// gracefully once `close_all` is cancelled.
pub(super) async fn serve<H, F>(
    listener: TcpListener,
    limits: Limits,
    handle: H,
    stop_accepting: CancellationToken,
    close_all: CancellationToken,
) where
    H: Fn(Request<Incoming>, Arc<Vec<String>>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let Limits {
        name,
        max_connections,
        header_timeout,
        tls,
        tls_timeout,
        refused,
    } = limits;
    let connections = Arc::new(Semaphore::new(max_connections));
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT));
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
                        tracing::warn!(listener = name, "accepting connections again after {failing} failed attempts");
                        failing = 0;
                    }
                    s
                }
                Err(e) => {
                    if failing == 0 {
                        tracing::warn!(listener = name, "accept failed: {e}; retrying with backoff");
                    }
                    failing += 1;
                    let pause = crate::policy::retry::backoff(
                        u32::try_from(failing).unwrap_or(u32::MAX),
                        Duration::from_millis(20),
                        Duration::from_secs(1),
                        Duration::ZERO,
                    );
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = stop_accepting.cancelled() => return,
                    }
                    continue;
                }
            },
            _ = stop_accepting.cancelled() => return,
        };
        // Past `max_connections` a new connection is refused at once (logged once per
        // episode), so the open ones keep their share of memory and descriptors.
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            if !refusing {
                tracing::warn!(listener = name, %peer, "too many connections ({max_connections}); refusing new ones");
                refusing = true;
            }
            refused.inc();
            if tls.is_none()
                && let Ok(slot) = refusals.clone().try_acquire_owned()
            {
                tokio::spawn(async move {
                    refuse_busy(stream).await;
                    drop(slot);
                });
            }
            continue;
        };
        refusing = false;
        // SSE responses go out in several small writes; without NODELAY, Nagle holds them for
        // the peer's delayed ACK (~40 ms per call on a kept-alive connection).
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        let shutdown = close_all.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let Some(acceptor) = tls else {
                return connection(stream, Arc::default(), handle, header_timeout, shutdown).await;
            };
            match tokio::time::timeout(tls_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls_stream)) => {
                    let names = tls_stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .map(|c| crate::policy::identity::certificate_names(c.as_ref()))
                        .unwrap_or_default();
                    connection(
                        tls_stream,
                        Arc::new(names),
                        handle,
                        header_timeout,
                        shutdown,
                    )
                    .await
                }
                Ok(Err(e)) => tracing::info!(listener = name, %peer, "TLS handshake failed: {e}"),
                Err(_) => tracing::info!(
                    listener = name, %peer,
                    "TLS handshake failed: no handshake within {tls_timeout:?}"
                ),
            }
        });
    }
}

/// A plain-text `503` for a connection past the cap. The request is drained (briefly) before
/// closing: closing with unread bytes sends a reset, which can destroy the answer before the
/// client reads it.
async fn refuse_busy(mut stream: TcpStream) {
    let answer = super::wire_error::WireError::TooManyConnections.raw_http1();
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Serves one connection (HTTP/1.1 or HTTP/2) until it ends or `shutdown` closes it.
async fn connection<I, H, F>(
    io: I,
    cert_names: Arc<Vec<String>>,
    handle: H,
    header_timeout: Duration,
    shutdown: CancellationToken,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>, Arc<Vec<String>>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    // hyper's header timeout starts with a request's first byte: a connection that never
    // sends one would stay open. It gets `header_timeout` for its first request.
    let asked = Arc::new(AtomicBool::new(false));
    let seen = asked.clone();
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        seen.store(true, Ordering::Relaxed);
        let answer = handle(req, cert_names.clone());
        async move { Ok::<_, Infallible>(answer.await) }
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
                if !asked.load(Ordering::Relaxed) && !closing {
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
