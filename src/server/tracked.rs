//! A response body that keeps its request counted as in flight (for draining at shutdown)
//! until it has been sent, and ends an SSE stream right after its JSON-RPC response.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Response, header};
use http_body_util::BodyExt;

use super::{http::Body, parts::Started};

/// A response body that keeps its request counted as in flight until it is fully sent.
///
/// The SSE stream of a POST ends with the JSON-RPC response to its request (nothing follows
/// it), so the body ends right there: hyper then writes the event and the end of the chunked
/// stream in one write, instead of waiting a wake-up for rmcp to close the stream.
pub(super) struct Tracked {
    body: Body,
    _guard: Started,
    /// The first frame of an SSE stream, read before the headers were handed to hyper.
    first: Option<http_body::Frame<Bytes>>,
    ends_with_response: bool,
    ended: bool,
}

impl Tracked {
    /// The response with its body tracked. An SSE stream's headers go out with its first event
    /// (a call's progress or its answer), not alone ahead of it: one write less per call.
    pub(super) async fn start(r: Response<Body>, guard: Started) -> Response<Body> {
        let sse = r
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let (parts, mut body) = r.into_parts();
        let mut tracked = Tracked {
            first: None,
            ends_with_response: sse,
            ended: false,
            _guard: guard,
            body: Body::default(),
        };
        if sse {
            match body.frame().await {
                Some(Ok(frame)) => {
                    tracked.note(&frame);
                    tracked.first = Some(frame);
                }
                Some(Err(never)) => match never {},
                None => tracked.ended = true,
            }
        }
        tracked.body = body;
        Response::from_parts(parts, tracked.boxed())
    }

    /// Ends the stream after the frame that answers the request.
    fn note(&mut self, frame: &http_body::Frame<Bytes>) {
        if self.ends_with_response && frame.data_ref().is_some_and(|d| is_response_event(d)) {
            self.ended = true;
        }
    }
}

/// Whether an SSE frame carries a JSON-RPC response (an `id` with a result or an error, no
/// `method`: not a notification, not a server-to-client request).
fn is_response_event(frame: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        id: Option<serde::de::IgnoredAny>,
        method: Option<serde::de::IgnoredAny>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    let mut data = frame
        .split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(b"data:"));
    // One data line per event (rmcp writes compact JSON); anything else is not judged.
    let (Some(line), None) = (data.next(), data.next()) else {
        return false;
    };
    match serde_json::from_slice::<Probe>(line) {
        Ok(p) => p.id.is_some() && p.method.is_none() && (p.result.is_some() || p.error.is_some()),
        Err(_) => false,
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if let Some(frame) = self.first.take() {
            return std::task::Poll::Ready(Some(Ok(frame)));
        }
        if self.ended {
            return std::task::Poll::Ready(None);
        }
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if let std::task::Poll::Ready(Some(Ok(frame))) = &polled {
            self.note(frame);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && (self.ended || self.body.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::is_response_event;

    #[test]
    fn only_a_response_event_ends_the_stream() {
        let ev = |json: &str| format!("data: {json}\nid: 0/1\n\n").into_bytes();
        assert!(is_response_event(&ev(
            r#"{"jsonrpc":"2.0","id":3,"result":{}}"#
        )));
        assert!(is_response_event(&ev(
            r#"{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"m"}}"#
        )));
        // Progress, a server-to-client request, a priming event, garbage: the stream goes on.
        assert!(!is_response_event(&ev(
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#
        )));
        assert!(!is_response_event(&ev(
            r#"{"jsonrpc":"2.0","id":9,"method":"elicitation/create","params":{}}"#
        )));
        assert!(!is_response_event(b"id: 0/0\nretry: 3000\ndata:\n\n"));
        assert!(!is_response_event(&ev("not json")));
    }
}
