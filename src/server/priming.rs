//! A session request's SSE stream on its way out: its stream is bound to the session (see
//! `replay`), and its priming event (an id, empty data, `retry`) waits for the next event so
//! that both reach the socket in one write — a call answered quickly costs no extra write.
//! A slow call's priming event goes out alone after [`PRIMING_HOLD`], so a client whose stream
//! breaks before the answer still has an id to resume from.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use futures::Stream;
use rmcp::transport::common::server_side_http::ServerSseMessage;
use tokio::time::Sleep;

use super::replay::{Replay, ends_stream};

/// How long a priming event waits for the event after it.
pub const PRIMING_HOLD: Duration = Duration::from_millis(50);

enum State {
    Start,
    Holding(ServerSseMessage, Option<Pin<Box<Sleep>>>),
    Next(ServerSseMessage),
    Passing,
    Done,
}

pub struct Held<S> {
    inner: S,
    replay: Arc<Replay>,
    session: String,
    state: State,
    /// The stream's first event id, once seen.
    first_id: Option<String>,
    /// The request's response has been handed on (the stream ends with it).
    answered: bool,
}

/// A stream that handed on its response releases its buffer: the answer went out whole. One
/// dropped before (the client went away) stays resumable.
impl<S> Drop for Held<S> {
    fn drop(&mut self) {
        if self.answered
            && let Some(id) = &self.first_id
        {
            self.replay.delivered(id);
        }
    }
}

impl<S> Held<S> {
    pub fn new(inner: S, replay: Arc<Replay>, session: String) -> Self {
        Self {
            inner,
            replay,
            session,
            state: State::Start,
            first_id: None,
            answered: false,
        }
    }
}

impl<S> Stream for Held<S>
where
    S: Stream<Item = ServerSseMessage> + Unpin,
{
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            match std::mem::replace(&mut this.state, State::Passing) {
                State::Start => match Pin::new(&mut this.inner).poll_next(cx) {
                    Poll::Ready(Some(event)) => {
                        if let Some(id) = &event.event_id {
                            this.replay.bind(id, &this.session);
                            this.first_id = Some(id.clone());
                        }
                        if event.message.is_none() {
                            this.state = State::Holding(event, None);
                            continue;
                        }
                        this.answered |= ends_stream(&event);
                        return Poll::Ready(Some(event));
                    }
                    Poll::Ready(None) => {
                        this.state = State::Done;
                        return Poll::Ready(None);
                    }
                    Poll::Pending => {
                        this.state = State::Start;
                        return Poll::Pending;
                    }
                },
                State::Holding(priming, timer) => match Pin::new(&mut this.inner).poll_next(cx) {
                    Poll::Ready(Some(event)) => {
                        this.state = State::Next(event);
                        return Poll::Ready(Some(priming));
                    }
                    Poll::Ready(None) => {
                        this.state = State::Done;
                        return Poll::Ready(Some(priming));
                    }
                    Poll::Pending => {
                        let mut timer =
                            timer.unwrap_or_else(|| Box::pin(tokio::time::sleep(PRIMING_HOLD)));
                        if timer.as_mut().poll(cx).is_ready() {
                            return Poll::Ready(Some(priming));
                        }
                        this.state = State::Holding(priming, Some(timer));
                        return Poll::Pending;
                    }
                },
                State::Next(event) => {
                    this.answered |= ends_stream(&event);
                    return Poll::Ready(Some(event));
                }
                State::Passing => {
                    let polled = Pin::new(&mut this.inner).poll_next(cx);
                    if let Poll::Ready(Some(event)) = &polled {
                        this.answered |= ends_stream(event);
                    }
                    return polled;
                }
                State::Done => {
                    this.state = State::Done;
                    return Poll::Ready(None);
                }
            }
        }
    }
}
