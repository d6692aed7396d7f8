//! Calls parked while a stateless-era caller provides input (MRTR synthesis, SEP-2322).
//!
//! A handshake-era upstream asks for input by sending a request (elicitation, sampling, roots)
//! in the middle of a call and blocking on the answer. A stateless-era caller cannot be sent
//! requests: fedgate answers its call with an `InputRequiredResult`, keeps the upstream call
//! waiting here, and resumes it when the caller retries with `inputResponses`.
//!
//! The `requestState` handed out is sealed with the gateway's state key and bound to the
//! caller, the request (method, name, digest of the arguments) and an expiry. It names a
//! parked call on this replica; it resumes it once. A parked call that is not resumed in time
//! is released: the upstream's request is answered with an error and its call is cancelled.

use crate::upstream::inflight::NoInput;
use std::{collections::HashMap, sync::Arc, time::Duration};

use parking_lot::Mutex;
use rmcp::model::{InputRequests, InputRequiredResult, InputResponses, RequestStateCodec};
use serde::{Deserialize, Serialize};
use tokio::{sync::oneshot, time::Instant};

use crate::upstream::inflight::InputAsk;
use crate::{clock::now_ms, pipeline::CallError};

/// What the sealed `requestState` says.
#[derive(Debug, Serialize, Deserialize)]
struct Ticket {
    /// The parked call.
    id: String,
    /// The replica that holds it.
    replica: String,
    /// Unix milliseconds after which the ticket is refused.
    expires: u64,
}

struct Parked<P> {
    call: P,
    /// The upstream's pending requests, keyed as in `inputRequests`.
    waiting: Vec<(String, oneshot::Sender<Result<serde_json::Value, NoInput>>)>,
    expires: Instant,
}

/// The parked calls of this replica.
pub struct ParkingLot<P> {
    seal: Arc<RequestStateCodec>,
    /// Identifies this process: a ticket of another replica is refused with a clear message.
    replica: String,
    wait: Duration,
    max: usize,
    calls: Mutex<HashMap<String, Parked<P>>>,
}

impl<P> std::fmt::Debug for ParkingLot<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParkingLot")
            .field("replica", &self.replica)
            .field("parked", &self.calls.lock().len())
            .finish()
    }
}

/// A parked call, given back to be resumed or released.
pub struct Resumed<P> {
    pub call: P,
}

impl<P> ParkingLot<P> {
    pub fn new(seal: Arc<RequestStateCodec>, wait: Duration, max: usize) -> Self {
        Self {
            seal,
            replica: format!("{:016x}", rand::random::<u64>()),
            wait,
            max,
            calls: Mutex::new(HashMap::new()),
        }
    }

    #[allow(clippy::len_without_is_empty)] // a count for a gauge, never tested for emptiness
    pub fn len(&self) -> usize {
        self.calls.lock().len()
    }

    /// Parks `call` until the caller answers `asks`; returns what the caller is told.
    /// `binding` ties the ticket to the caller and the request (see the module doc). A refused
    /// call is given back, so the caller can cancel it upstream.
    pub fn park(
        &self,
        call: P,
        asks: Vec<InputAsk>,
        binding: &[u8],
    ) -> Result<InputRequiredResult, (CallError, P)> {
        let mut calls = self.calls.lock();
        if calls.len() >= self.max {
            for ask in asks {
                let _ = ask.reply.send(Err(NoInput::Busy));
            }
            let busy = CallError::Busy {
                what: "calls waiting for client input".into(),
            };
            return Err((busy, call));
        }
        let id = format!("{:032x}", rand::random::<u128>());
        let mut requests = InputRequests::new();
        let mut waiting = Vec::with_capacity(asks.len());
        for (n, ask) in asks.into_iter().enumerate() {
            let key = format!("fedgate-{}", n + 1);
            requests.insert(key.clone(), ask.request);
            waiting.push((key, ask.reply));
        }
        let ticket = Ticket {
            id: id.clone(),
            replica: self.replica.clone(),
            expires: now_ms().saturating_add(self.wait.as_millis() as u64),
        };
        let sealed = self.seal.seal_json_with(
            &ticket,
            &rmcp::model::SealOptions::new().associated_data(binding),
        );
        let state = match sealed {
            Ok(s) => s,
            Err(e) => {
                let failed = CallError::Internal {
                    detail: format!("cannot seal request state: {e}"),
                };
                return Err((failed, call));
            }
        };
        calls.insert(
            id,
            Parked {
                call,
                waiting,
                expires: Instant::now() + self.wait,
            },
        );
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }

    /// Hands the caller's answers to the parked call named by `state` and gives the call back.
    /// Refused (and the call left parked) when the state is forged, bound to another caller or
    /// request, expired, already used, of another replica, or when an answer is missing.
    pub fn resume(
        &self,
        state: &str,
        binding: &[u8],
        responses: Option<&InputResponses>,
    ) -> Result<Resumed<P>, CallError> {
        let bad = |why: &str| CallError::BadRequestState {
            why: why.to_owned(),
        };
        let ticket: Ticket = self
            .seal
            .open_json_with(state, binding)
            .map_err(|_| bad("it was not issued by this gateway for this caller and request"))?;
        if ticket.replica != self.replica {
            return Err(bad(
                "it belongs to another fedgate replica: send retries of input-required calls \
                 to the replica that answered them (session affinity), or use one replica",
            ));
        }
        if ticket.expires < now_ms() {
            return Err(bad("it has expired"));
        }
        let mut calls = self.calls.lock();
        let Some(parked) = calls.get(&ticket.id) else {
            return Err(bad("its call was already resumed or has been released"));
        };
        let answers = responses.ok_or_else(|| bad("the retry carries no inputResponses"))?;
        if let Some((key, _)) = parked
            .waiting
            .iter()
            .find(|(k, _)| !answers.contains_key(k))
        {
            return Err(bad(&format!("inputResponses has no answer for `{key}`")));
        }
        let Some(parked) = calls.remove(&ticket.id) else {
            return Err(bad("its call was already resumed or has been released"));
        };
        drop(calls);
        for (key, reply) in parked.waiting {
            let answer = answers.get(&key).cloned().unwrap_or_default();
            let _ = reply.send(Ok(answer));
        }
        Ok(Resumed { call: parked.call })
    }

    /// Releases the calls whose callers did not come back in time; returns them so their
    /// upstream requests can be cancelled.
    pub fn expire(&self, now: Instant) -> Vec<P> {
        let mut calls = self.calls.lock();
        let gone: Vec<String> = calls
            .iter()
            .filter(|(_, p)| p.expires <= now)
            .map(|(id, _)| id.clone())
            .collect();
        gone.into_iter()
            .filter_map(|id| calls.remove(&id))
            .map(|p| {
                for (_, reply) in p.waiting {
                    let _ = reply.send(Err(NoInput::TimedOut));
                }
                p.call
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(deprecated)] // roots are deprecated by SEP-2577 but still asked for
mod tests {
    use super::*;
    use rmcp::model::{InputRequest, ListRootsRequest};

    fn lot(wait: Duration) -> ParkingLot<u32> {
        ParkingLot::new(
            Arc::new(RequestStateCodec::try_new(vec![1u8; 32]).unwrap()),
            wait,
            2,
        )
    }

    fn ask() -> (
        InputAsk,
        oneshot::Receiver<Result<serde_json::Value, NoInput>>,
    ) {
        let (reply, rx) = oneshot::channel();
        (
            InputAsk {
                request: InputRequest::ListRoots(ListRootsRequest::default()),
                reply,
            },
            rx,
        )
    }

    fn answers() -> InputResponses {
        let mut r = InputResponses::new();
        r.insert("fedgate-1".into(), serde_json::json!({"roots": []}));
        r
    }

    #[tokio::test]
    async fn a_state_resumes_its_call_once_for_its_caller_only() {
        let lot = lot(Duration::from_secs(60));
        let (a, mut rx) = ask();
        let ir = lot.park(7, vec![a], b"ann tools/call x").unwrap();
        let state = ir.request_state.unwrap();
        assert!(ir.input_requests.unwrap().contains_key("fedgate-1"));
        // Another caller or request, an edited state, or missing answers: refused, still parked.
        assert!(
            lot.resume(&state, b"bob tools/call x", Some(&answers()))
                .is_err()
        );
        let mut edited = state.clone().into_bytes();
        edited[10] ^= 1;
        let edited = String::from_utf8_lossy(&edited).into_owned();
        assert!(
            lot.resume(&edited, b"ann tools/call x", Some(&answers()))
                .is_err()
        );
        assert!(
            lot.resume(&state, b"ann tools/call x", Some(&InputResponses::new()))
                .is_err()
        );
        assert!(rx.try_recv().is_err(), "nothing answered yet");
        let back = lot
            .resume(&state, b"ann tools/call x", Some(&answers()))
            .unwrap();
        assert_eq!(back.call, 7);
        assert_eq!(
            rx.try_recv().unwrap().unwrap(),
            serde_json::json!({"roots": []})
        );
        // Replayed.
        assert!(
            lot.resume(&state, b"ann tools/call x", Some(&answers()))
                .is_err()
        );
        assert_eq!(lot.len(), 0);
    }

    #[tokio::test]
    async fn unclaimed_calls_are_released_and_the_lot_is_bounded() {
        let lot = lot(Duration::from_secs(60));
        let (a, mut rx) = ask();
        let state = lot.park(1, vec![a], b"k").unwrap().request_state.unwrap();
        let (b, _rx_b) = ask();
        lot.park(2, vec![b], b"k").unwrap();
        let (c, mut rx_c) = ask();
        assert!(lot.park(3, vec![c], b"k").is_err(), "bounded at 2");
        assert!(
            rx_c.try_recv().unwrap().is_err(),
            "the refused ask is answered"
        );
        assert!(lot.expire(Instant::now()).is_empty(), "not yet due");
        assert_eq!(
            lot.expire(Instant::now() + Duration::from_secs(61)).len(),
            2
        );
        assert!(
            rx.try_recv().unwrap().is_err(),
            "the upstream gets an error"
        );
        assert!(lot.resume(&state, b"k", Some(&answers())).is_err());
    }
}
