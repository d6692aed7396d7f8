//! One request at an upstream, from send to response: its progress and log messages reach the
//! caller in wire order, before the response; it ends at its deadline or when the caller
//! cancels; and it pauses when the upstream asks a stateless-era caller for input, so the call
//! can be parked and resumed by the caller's retry.
#![allow(deprecated)] // logging is deprecated by SEP-2577 but still relayed

use std::{future::Future, pin::Pin, sync::Arc, time::Duration};

use rmcp::{
    ServiceError,
    model::{
        CancelledNotificationParam, ClientRequest, GetExtensions, ProgressToken, RequestId,
        RequestMetaObject, ServerResult,
    },
    service::PeerRequestOptions,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    pipeline::CallError,
    upstream::{
        Connection,
        inflight::{CallEvent, CallGuard, Downstream, InputAsk},
    },
};

/// How long input requests of one upstream call are gathered into one input_required round.
const ASK_WINDOW: Duration = Duration::from_millis(25);

type Response = Pin<Box<dyn Future<Output = Result<ServerResult, ServiceError>> + Send>>;

/// A request sent to an upstream whose response has not been returned yet.
pub struct Pending {
    conn: Arc<Connection>,
    upstream: String,
    id: RequestId,
    response: Response,
    events: mpsc::Receiver<CallEvent>,
    guard: CallGuard,
    timeout: Duration,
    /// When the first drive must end: counted from before the request was handed over.
    first_deadline: Option<tokio::time::Instant>,
}

/// How far a request got.
#[allow(clippy::large_enum_variant)] // returned once per attempt and consumed at once
/// How long telling an upstream that a call is off may take.
const CANCEL_WRITE_WAIT: Duration = Duration::from_secs(1);

// `Done` is what nearly every call ends with; boxing it would add an allocation per call.
#[allow(clippy::large_enum_variant)]
pub enum Outcome {
    Done(Result<ServerResult, CallError>),
    /// The upstream is waiting for input from a stateless-era caller.
    Input(Pending, Vec<InputAsk>),
}

enum Next {
    Event(CallEvent),
    Response(Result<ServerResult, ServiceError>),
    Cancelled,
    TimedOut,
}

impl Pending {
    /// Sends `request`; events for it are tied to `downstream`.
    pub async fn start(
        conn: Arc<Connection>,
        upstream: &str,
        mut request: ClientRequest,
        meta: RequestMetaObject,
        downstream: Option<Downstream>,
        timeout: Duration,
    ) -> Result<Self, CallError> {
        let (guard, events) = conn.inflight.open(downstream);
        request.extensions_mut().insert(guard.key);
        let first_deadline = tokio::time::Instant::now() + timeout;
        // The deadline covers handing the request over: an upstream that stopped reading (its
        // stdin pipe full) would otherwise hold the call, and every call after it, for good.
        let sent = tokio::time::timeout(
            timeout,
            conn.peer.send_request_with_option(
                request,
                PeerRequestOptions::no_options().with_meta(meta),
            ),
        )
        .await;
        let handle = match sent {
            Ok(r) => r.map_err(|e| CallError::from_service(upstream, e))?,
            Err(_) => {
                conn.broken.report(format!(
                    "a request could not be written to it within {timeout:?} (it stopped reading)"
                ));
                return Err(CallError::UpstreamTimeout {
                    upstream: upstream.to_owned(),
                    after: timeout,
                    uncertain: false,
                });
            }
        };
        Ok(Self {
            id: handle.id.clone(),
            response: Box::pin(handle.await_response()),
            conn,
            upstream: upstream.to_owned(),
            events,
            guard,
            timeout,
            first_deadline: Some(first_deadline),
        })
    }

    /// A resumed call belongs to the caller's retry: its progress, log level and capabilities.
    pub fn attach(&self, downstream: Option<Downstream>) {
        self.conn.inflight.rebind(self.guard.key, downstream);
    }

    /// Waits for the response, relaying events to `downstream` meanwhile, until the call's
    /// deadline.
    pub async fn drive(
        mut self,
        downstream: Option<&Downstream>,
        token: Option<&ProgressToken>,
        ct: &CancellationToken,
    ) -> Outcome {
        // A resumed call's deadline starts now: time it spent parked waiting for its caller is
        // not the upstream's.
        let deadline = tokio::time::sleep_until(
            self.first_deadline
                .take()
                .unwrap_or_else(|| tokio::time::Instant::now() + self.timeout),
        );
        tokio::pin!(deadline);
        loop {
            let next = tokio::select! {
                biased;
                Some(ev) = self.events.recv() => Next::Event(ev),
                r = &mut self.response => Next::Response(r),
                _ = ct.cancelled() => Next::Cancelled,
                _ = &mut deadline => Next::TimedOut,
            };
            match next {
                Next::Event(CallEvent::Input(ask)) => {
                    // A server that needs several answers sends its requests back to back;
                    // what arrives within a short window goes to the caller in one round.
                    let mut asks = vec![ask];
                    let window = tokio::time::sleep(ASK_WINDOW);
                    tokio::pin!(window);
                    loop {
                        tokio::select! {
                            biased;
                            Some(ev) = self.events.recv() => match ev {
                                CallEvent::Input(a) => asks.push(a),
                                other => relay(downstream, token, other).await,
                            },
                            _ = &mut window => break,
                        }
                    }
                    return Outcome::Input(self, asks);
                }
                Next::Event(ev) => relay(downstream, token, ev).await,
                Next::Response(r) => {
                    // Everything the upstream sent before its response is already queued.
                    while let Ok(ev) = self.events.try_recv() {
                        relay(downstream, token, ev).await;
                    }
                    let upstream = self.upstream.clone();
                    return Outcome::Done(r.map_err(|e| CallError::from_service(&upstream, e)));
                }
                Next::Cancelled => {
                    self.cancel("cancelled by the client").await;
                    return Outcome::Done(Err(CallError::Cancelled));
                }
                Next::TimedOut => {
                    self.cancel("fedgate call timeout").await;
                    return Outcome::Done(Err(CallError::UpstreamTimeout {
                        upstream: self.upstream.clone(),
                        after: self.timeout,
                        uncertain: false,
                    }));
                }
            }
        }
    }

    /// Tells the upstream to stop working on the request. (The returned future does not hold
    /// on to `self`, whose response future is not `Sync`.)
    /// Tells the upstream the call is off. Bounded: an upstream that stopped reading would
    /// hold the caller here for good; it is reported broken instead (and started again).
    pub fn cancel(&self, reason: &str) -> impl Future<Output = ()> + Send + 'static {
        let conn = self.conn.clone();
        let p = CancelledNotificationParam::new(Some(self.id.clone()), Some(reason.to_owned()));
        async move {
            let sent = tokio::time::timeout(CANCEL_WRITE_WAIT, conn.peer.notify_cancelled(p)).await;
            if sent.is_err() {
                conn.broken.report(format!(
                    "a cancellation could not be written to it within {CANCEL_WRITE_WAIT:?} (it stopped reading)"
                ));
            }
        }
    }
}

/// Passes one upstream notification of this call to the caller, in arrival order.
async fn relay(downstream: Option<&Downstream>, token: Option<&ProgressToken>, ev: CallEvent) {
    let Some(d) = downstream else { return };
    match ev {
        CallEvent::Progress(mut p) => {
            // A caller that sent no progress token asked for no progress.
            if let Some(token) = token {
                p.progress_token = token.clone();
                let _ = d.client.progress(p).await;
            }
        }
        CallEvent::Log(l) => {
            if d.log_level.is_some_and(|min| l.level as u8 >= min as u8) {
                let _ = d.client.log(l).await;
            }
        }
        // The call is over (or another round is under way): an ask without a call to carry it
        // is dropped, which answers the upstream with an error.
        CallEvent::Input(_) => {}
    }
}
