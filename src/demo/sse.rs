//! Legacy HTTP+SSE serving for the demo upstream, so the `sse` upstream kind can be tested
//! against a real server: GET /sse opens a session, POST /message?sessionId=… feeds it.

use super::DemoError;
use std::{convert::Infallible, net::SocketAddr, process::ExitCode, sync::Arc};

use bytes::Bytes;
use dashmap::DashMap;
use futures::{StreamExt, channel::mpsc};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use rmcp::{
    RoleServer, ServiceExt,
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
};

use super::Demo;

type Body = BoxBody<Bytes, Infallible>;
type Sessions = Arc<DashMap<String, mpsc::UnboundedSender<RxJsonRpcMessage<RoleServer>>>>;

pub async fn serve(addr: SocketAddr, demo: Demo) -> Result<ExitCode, DemoError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("demo upstream: cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    println!("demo upstream (legacy sse) listening on http://{local}/sse");
    let sessions: Sessions = Arc::default();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (demo, sessions) = (demo.clone(), sessions.clone());
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let (demo, sessions) = (demo.clone(), sessions.clone());
                async move { Ok::<_, Infallible>(route(req, demo, sessions).await) }
            });
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
        });
    }
}

fn status(code: StatusCode) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::new()).boxed());
    *r.status_mut() = code;
    r
}

async fn route(req: Request<Incoming>, demo: Demo, sessions: Sessions) -> Response<Body> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/sse") => open(demo, sessions),
        (&Method::POST, "/message") => {
            let id = req
                .uri()
                .query()
                .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("sessionId=")))
                .map(str::to_owned)
                .unwrap_or_default();
            let Some(tx) = sessions.get(&id).map(|s| s.clone()) else {
                return status(StatusCode::NOT_FOUND);
            };
            let Ok(body) = req.into_body().collect().await else {
                return status(StatusCode::BAD_REQUEST);
            };
            match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(&body.to_bytes()) {
                Ok(msg) => match tx.unbounded_send(msg) {
                    Ok(()) => status(StatusCode::ACCEPTED),
                    Err(_) => status(StatusCode::GONE),
                },
                Err(_) => status(StatusCode::BAD_REQUEST),
            }
        }
        _ => status(StatusCode::NOT_FOUND),
    }
}

fn open(demo: Demo, sessions: Sessions) -> Response<Body> {
    let id = uuid_like();
    let (in_tx, in_rx) = mpsc::unbounded::<RxJsonRpcMessage<RoleServer>>();
    let (out_tx, out_rx) = mpsc::unbounded::<TxJsonRpcMessage<RoleServer>>();
    sessions.insert(id.clone(), in_tx);
    let cleanup = sessions.clone();
    let sid = id.clone();
    tokio::spawn(async move {
        if let Ok(running) = demo.serve((out_tx, in_rx)).await {
            let _ = running.waiting().await;
        }
        cleanup.remove(&sid);
    });
    let endpoint = futures::stream::once(async move {
        Ok::<_, Infallible>(Frame::data(Bytes::from(format!(
            "event: endpoint\ndata: /message?sessionId={id}\n\n"
        ))))
    });
    let messages = out_rx.map(|m| {
        let json = serde_json::to_string(&m).unwrap_or_default();
        Ok::<_, Infallible>(Frame::data(Bytes::from(format!(
            "event: message\ndata: {json}\n\n"
        ))))
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(endpoint.chain(messages))));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    r
}

fn uuid_like() -> String {
    format!("{:032x}", rand::random::<u128>())
}
