//! A round-robin HTTP proxy: each request goes to the next backend in turn, so consecutive
//! requests of one client land on different replicas.

use std::{
    convert::Infallible,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody, combinators::BoxBody};
use hyper::{Request, Response, body::Frame, body::Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;

/// Forwards each request to the next backend in turn; records which backend got what.
pub struct RoundRobin {
    backends: Vec<String>,
    next: AtomicUsize,
    /// When set (not `usize::MAX`), every request goes to this backend: a load balancer that
    /// took the others out.
    only: AtomicUsize,
    client: reqwest::Client,
    pub hits: Mutex<Vec<usize>>,
}

impl RoundRobin {
    pub async fn start(backends: Vec<String>) -> (Arc<Self>, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let me = Arc::new(Self {
            backends,
            next: AtomicUsize::new(0),
            only: AtomicUsize::new(usize::MAX),
            client: reqwest::Client::new(),
            hits: Mutex::new(Vec::new()),
        });
        let rr = me.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let rr = rr.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let rr = rr.clone();
                        async move { Ok::<_, Infallible>(rr.forward(req).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        (me, url)
    }

    /// From now on every request goes to backend `i` alone.
    pub fn send_all_to(&self, i: usize) {
        self.only.store(i, Ordering::SeqCst);
    }

    async fn forward(&self, req: Request<Incoming>) -> Response<BoxBody<Bytes, reqwest::Error>> {
        let i = match self.only.load(Ordering::SeqCst) {
            usize::MAX => self.next.fetch_add(1, Ordering::SeqCst) % self.backends.len(),
            i => i,
        };
        self.hits.lock().push(i);
        let (parts, body) = req.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        let mut out = self
            .client
            .request(
                parts.method,
                format!("{}{}", self.backends[i], parts.uri.path()),
            )
            .body(body);
        for (k, v) in &parts.headers {
            if k != http::header::HOST {
                out = out.header(k, v);
            }
        }
        let resp = out.send().await.unwrap();
        let mut builder = Response::builder().status(resp.status());
        for (k, v) in resp.headers() {
            builder = builder.header(k, v);
        }
        let stream = resp.bytes_stream().map(|r| r.map(Frame::data));
        builder
            .body(BodyExt::boxed(StreamBody::new(stream)))
            .unwrap()
    }
}
