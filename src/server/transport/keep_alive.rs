//! SSE bodies of the direct path with a comment line after every [`EVERY`] of silence, as
//! rmcp's transport sends: a proxy that cuts idle connections would otherwise end a slow call's
//! stream (and with it, in the stateless era, the call) or an idle listen stream.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use futures::Stream;
use tokio::time::Sleep;

/// Silence after which a comment line goes out.
pub(super) const EVERY: Duration = Duration::from_secs(15);

/// An SSE comment: ignored by clients, keeps the connection busy.
const COMMENT: &[u8] = b":\n\n";

pub(super) struct KeepAlive<S> {
    inner: S,
    quiet: Pin<Box<Sleep>>,
}

impl<S> KeepAlive<S> {
    pub(super) fn new(inner: S) -> Self {
        Self {
            inner,
            quiet: Box::pin(tokio::time::sleep(EVERY)),
        }
    }
}

impl<S: Stream<Item = Bytes> + Unpin> Stream for KeepAlive<S> {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let this = &mut *self;
        if let Poll::Ready(item) = Pin::new(&mut this.inner).poll_next(cx) {
            this.quiet
                .as_mut()
                .reset(tokio::time::Instant::now() + EVERY);
            return Poll::Ready(item);
        }
        if this.quiet.as_mut().poll(cx).is_ready() {
            this.quiet
                .as_mut()
                .reset(tokio::time::Instant::now() + EVERY);
            return Poll::Ready(Some(Bytes::from_static(COMMENT)));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn silence_gets_a_comment_and_events_pass_unchanged() {
        let (tx, rx) = futures::channel::mpsc::channel::<Bytes>(4);
        let mut s = KeepAlive::new(rx);
        let mut tx = tx;
        tx.try_send(Bytes::from_static(b"data: 1\n\n")).ok();
        assert_eq!(s.next().await.as_deref(), Some(&b"data: 1\n\n"[..]));
        // Nothing for a while: a comment, once per quiet period.
        assert_eq!(s.next().await.as_deref(), Some(COMMENT));
        tx.try_send(Bytes::from_static(b"data: 2\n\n")).ok();
        assert_eq!(s.next().await.as_deref(), Some(&b"data: 2\n\n"[..]));
        drop(tx);
        assert_eq!(s.next().await, None);
    }
}
