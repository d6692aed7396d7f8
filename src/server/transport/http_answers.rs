//! The HTTP answers of the direct path: one JSON body, `202 Accepted`, and SSE streams (a
//! session's with ids from the resumption buffer, a stateless-era call's without, a listen
//! stream's), each with keep-alive comments in silences.

use std::convert::Infallible;

use bytes::Bytes;
use futures::StreamExt;
use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, StreamBody};
use rmcp::{model::ServerJsonRpcMessage, transport::common::server_side_http::ServerSseMessage};
use tokio_util::sync::CancellationToken;

use super::keep_alive;
use crate::server::{http::Body, responses::json_body, wire_error::WireError};

/// An SSE response of stateless-era events (JSON texts, no ids: that era does not resume).
pub(super) fn http_sse(events: tokio::sync::mpsc::Receiver<String>) -> Response<Body> {
    let events = futures::stream::unfold(events, |mut rx| async move {
        rx.recv().await.map(|text| (text, rx))
    });
    event_stream(Box::pin(
        events.map(|text| Bytes::from(format!("data: {text}\n\n"))),
    ))
}

/// An SSE response of these events, with keep-alive comments in silences.
pub(super) fn event_stream<S>(events: S) -> Response<Body>
where
    S: futures::Stream<Item = Bytes> + Unpin + Send + Sync + 'static,
{
    let frames =
        keep_alive::KeepAlive::new(events).map(|b| Ok::<_, Infallible>(http_body::Frame::data(b)));
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    h.insert("x-accel-buffering", http::HeaderValue::from_static("no"));
    r
}

/// The HTTP status of a stateless-era JSON answer, as rmcp's transport sets it (a handshake-era
/// session's errors are all 200).
pub(super) fn stateless_status(m: &ServerJsonRpcMessage) -> StatusCode {
    use rmcp::model::ErrorCode;
    let ServerJsonRpcMessage::Error(e) = m else {
        return StatusCode::OK;
    };
    match e.error.code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// The SSE answer of a stateless-era call: events without ids; the client closing it cancels
/// the call (that era's way to cancel).
pub(super) fn stateless_sse(
    events: futures::channel::mpsc::Receiver<ServerSseMessage>,
    ct: CancellationToken,
) -> Response<Body> {
    let gone = ct.drop_guard();
    event_stream(events.map(move |e| {
        let _cancels_when_dropped = &gone;
        sse_event(&e)
    }))
}

pub(super) fn accepted() -> Response<Body> {
    let mut r = Response::new(Empty::new().boxed());
    *r.status_mut() = StatusCode::ACCEPTED;
    r
}

/// One JSON-RPC message as an `application/json` answer with `status`.
pub(super) fn json(status: StatusCode, m: &ServerJsonRpcMessage) -> Response<Body> {
    match serde_json::to_vec(m) {
        Ok(bytes) => json_body(status, bytes),
        Err(e) => WireError::Internal {
            message: format!("the answer could not be encoded: {e}"),
        }
        .response(),
    }
}

/// One SSE event: `id`, `retry`, and the message as `data` (empty for a priming event).
pub(super) fn sse_event(e: &ServerSseMessage) -> Bytes {
    use std::fmt::Write;
    let mut out = String::with_capacity(64);
    if let Some(id) = &e.event_id {
        let _ = writeln!(out, "id: {id}");
    }
    if let Some(retry) = e.retry {
        let _ = writeln!(out, "retry: {}", retry.as_millis());
    }
    out.push_str("data: ");
    if let Some(m) = &e.message
        && let Ok(text) = serde_json::to_string(m.as_ref())
    {
        out.push_str(&text);
    }
    out.push_str("\n\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_sse_event_carries_id_retry_and_data() {
        let priming = ServerSseMessage::priming("3.0", Duration::from_millis(1500));
        let mut e = priming.clone();
        e.event_id = Some("3.0".into());
        assert_eq!(
            sse_event(&e),
            Bytes::from_static(b"id: 3.0\nretry: 1500\ndata: \n\n")
        );
    }
}
