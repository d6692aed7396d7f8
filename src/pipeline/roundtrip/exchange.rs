//! One call's round trip at its upstream, across the eras' ways of asking the caller for input:
//! the request goes out with this hop's `_meta`, input requests are relayed or parked, and a
//! caller's retry resumes a parked call.
#![allow(deprecated)] // resources/(un)subscribe are legacy-only and still forwarded

use crate::upstream::inflight::NoInput;
use std::{sync::Arc, time::Duration};

use rmcp::model::{
    CallToolRequest, CancelTaskParams, CancelTaskRequest, ClientRequest, CompleteRequest,
    DEFAULT_MRTR_MAX_ROUNDS, GetPromptRequest, GetTaskParams, GetTaskRequest, InputResponses,
    ReadResourceRequest, RequestMetaObject, RequestStateCodec, ServerResult, SubscribeRequest,
    UnsubscribeRequest, UpdateTaskParams, UpdateTaskRequest,
};

use super::{
    parked::ParkingLot,
    pending::{Outcome, Pending},
};
use crate::{
    pipeline::{Call, CallError, Op, TaskRequest},
    telemetry::metrics::Metrics,
    upstream::{Connection, DetectedEra, client::server_request, inflight::Downstream},
};

/// `_meta` keys that belong to one hop and are never copied to the next.
const HOP_META_PREFIX: &str = "io.modelcontextprotocol/";
const PROGRESS_TOKEN_KEY: &str = "progressToken";

/// How often parked calls are checked for expiry.
const REAP_EVERY: Duration = Duration::from_secs(1);

/// The round trip of one call at its upstream, with the calls parked for their callers.
#[derive(Debug, Clone)]
pub struct RoundTrip {
    lot: Arc<ParkingLot<Pending>>,
    /// How long a handshake-era caller may take to answer an upstream's input request.
    input_wait: Duration,
    metrics: Arc<Metrics>,
}

impl RoundTrip {
    /// Also starts the task that releases parked calls whose callers did not come back.
    pub fn new(
        seal: Arc<RequestStateCodec>,
        input_wait: Duration,
        max_parked_calls: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        let lot = Arc::new(ParkingLot::<Pending>::new(
            seal,
            input_wait,
            max_parked_calls,
        ));
        let weak_lot = Arc::downgrade(&lot);
        let gauge = metrics.parked_calls.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REAP_EVERY);
            loop {
                tick.tick().await;
                let Some(lot) = weak_lot.upgrade() else {
                    return;
                };
                for call in lot.expire(tokio::time::Instant::now()) {
                    call.cancel("the client did not provide the requested input in time")
                        .await;
                }
                gauge.set(lot.len() as i64);
            }
        });
        Self {
            lot,
            input_wait,
            metrics,
        }
    }

    /// Runs the call at the upstream, across the eras' ways of asking the caller for input:
    /// - a handshake-era upstream asks by sending a request; a handshake-era caller gets it as
    ///   is (see `UpstreamClient`), a stateless-era caller gets an `InputRequiredResult` while
    ///   the upstream call is parked, and its retry resumes the parked call;
    /// - a stateless-era upstream answers `InputRequiredResult`; a stateless-era caller gets it
    ///   as is, a handshake-era caller is sent the requests and fedgate retries the upstream with
    ///   the answers, transparently.
    pub async fn exchange(
        &self,
        conn: &Arc<Connection>,
        upstream: &str,
        call: Call,
        timeout: Duration,
    ) -> Result<ServerResult, CallError> {
        let peer = call
            .target
            .as_ref()
            .and_then(|t| t.route())
            .is_some_and(|r| r.spec.peer)
            .then(|| call.correlation_id.clone());
        let Call {
            op,
            meta,
            downstream,
            progress_token,
            ct,
            identity,
            decided,
            ..
        } = call;
        let person = decided.person().cloned();
        // The caller's own token (a per-user credential) goes with each request sent for them.
        let to_request = |op: Op| {
            let mut r = to_request(op);
            if let Some(p) = &person {
                rmcp::model::GetExtensions::extensions_mut(&mut r).insert(p.clone());
            }
            r
        };
        // Only calls that park or resume need it (a digest of the arguments).
        let bind = || binding(&identity.key(), upstream, &op);
        let meta = crate::federation::outbound::to_upstream(
            hop_meta(meta, conn.era, downstream.as_ref()),
            peer,
            &identity,
        );
        let mut pending = match (conn.era, retry_of(&op)) {
            (DetectedEra::Handshake, Some((state, answers))) => {
                let resumed = self.lot.resume(state, &bind(), answers)?.call;
                self.parked_changed();
                resumed.attach(downstream.clone());
                resumed
            }
            _ => {
                Pending::start(
                    conn.clone(),
                    upstream,
                    to_request(op.clone()),
                    meta.clone(),
                    downstream.clone(),
                    timeout,
                )
                .await?
            }
        };
        let mut rounds = 0;
        loop {
            match pending
                .drive(downstream.as_ref(), progress_token.as_ref(), &ct)
                .await
            {
                Outcome::Input(p, asks) if can_ask(&op) => {
                    // A parked call has no caller until it is resumed: it must not keep other
                    // calls on this connection from being the one in flight.
                    p.attach(None);
                    let parked = self.lot.park(p, asks, &bind());
                    self.parked_changed();
                    return match parked {
                        Ok(ir) => Ok(ServerResult::InputRequiredResult(ir)),
                        Err((e, p)) => {
                            p.cancel("fedgate could not park the call").await;
                            Err(e)
                        }
                    };
                }
                Outcome::Input(p, asks) => {
                    // Only tools/call, prompts/get and resources/read may answer input_required.
                    for ask in asks {
                        let _ = ask
                            .reply
                            .send(Err(NoInput::NotDuring(op.method().to_string())));
                    }
                    pending = p;
                }
                Outcome::Done(Ok(ServerResult::InputRequiredResult(ir)))
                    if rounds < DEFAULT_MRTR_MAX_ROUNDS
                        && downstream.as_ref().is_some_and(|d| !d.modern) =>
                {
                    let Some(d) = downstream.as_ref() else {
                        return Ok(ServerResult::InputRequiredResult(ir));
                    };
                    // Bounded like a parked call, and given up when the caller cancels.
                    let answers = tokio::select! {
                        a = ask_caller(d, upstream, &ir) => a?,
                        _ = ct.cancelled() => return Err(CallError::Cancelled),
                        _ = tokio::time::sleep(self.input_wait) => {
                            return Err(CallError::NoClientInput {
                                detail: "no answer in time".into(),
                            });
                        }
                    };
                    let next = answered(op.clone(), answers, ir.request_state);
                    rounds += 1;
                    pending = Pending::start(
                        conn.clone(),
                        upstream,
                        to_request(next),
                        meta.clone(),
                        downstream.clone(),
                        timeout,
                    )
                    .await?;
                }
                Outcome::Done(Ok(ServerResult::InputRequiredResult(_)))
                    if downstream.as_ref().is_some_and(|d| !d.modern) =>
                {
                    return Err(CallError::UpstreamFailed {
                        upstream: upstream.to_owned(),
                        detail: format!(
                            "asked for input more than {DEFAULT_MRTR_MAX_ROUNDS} times in one call"
                        ),
                    });
                }
                Outcome::Done(r) => return r,
            }
        }
    }

    fn parked_changed(&self) {
        self.metrics.parked_calls.set(self.lot.len() as i64);
    }
}

/// What a parked call's `requestState` is bound to: the caller, the upstream and the request
/// (method, name or URI, and a digest of the arguments), so it resumes nothing else.
fn binding(caller: &str, upstream: &str, op: &Op) -> Vec<u8> {
    let (name, args) = match op {
        // No arguments and `{}` are the same request.
        Op::CallTool(p) => (
            p.name.to_string(),
            serde_json::to_value(p.arguments.clone().unwrap_or_default()),
        ),
        Op::GetPrompt(p) => (
            p.name.clone(),
            serde_json::to_value(p.arguments.clone().unwrap_or_default()),
        ),
        Op::ReadResource(p) => (p.uri.clone(), Ok(serde_json::Value::Null)),
        other => (other.method().to_owned(), Ok(serde_json::Value::Null)),
    };
    // Canonical: a retry that sends the same arguments in another key order is the same call.
    let digest = crate::json_digest::sha256(&args.unwrap_or_default());
    let mut b = format!(
        "fedgate-mrtr\0{caller}\0{upstream}\0{}\0{name}\0",
        op.method()
    )
    .into_bytes();
    b.extend_from_slice(&digest);
    b
}

/// Whether the request may be answered with `InputRequiredResult` (SEP-2322).
fn can_ask(op: &Op) -> bool {
    matches!(op, Op::CallTool(_) | Op::GetPrompt(_) | Op::ReadResource(_))
}

/// The `requestState` and `inputResponses` of a retried input-required request.
fn retry_of(op: &Op) -> Option<(&str, Option<&InputResponses>)> {
    let (state, answers) = match op {
        Op::CallTool(p) => (&p.request_state, &p.input_responses),
        Op::GetPrompt(p) => (&p.request_state, &p.input_responses),
        Op::ReadResource(p) => (&p.request_state, &p.input_responses),
        _ => return None,
    };
    state.as_deref().map(|s| (s, answers.as_ref()))
}

/// The request retried with the caller's answers and the upstream's state.
fn answered(op: Op, answers: InputResponses, state: Option<String>) -> Op {
    match op {
        Op::CallTool(mut p) => {
            p.input_responses = Some(answers);
            p.request_state = state;
            Op::CallTool(p)
        }
        Op::GetPrompt(mut p) => {
            p.input_responses = Some(answers);
            p.request_state = state;
            Op::GetPrompt(p)
        }
        Op::ReadResource(mut p) => {
            p.input_responses = Some(answers);
            p.request_state = state;
            Op::ReadResource(p)
        }
        other => other,
    }
}

/// Sends a stateless-era upstream's input requests to a handshake-era caller, one by one, and
/// collects the answers under the upstream's keys.
async fn ask_caller(
    d: &Downstream,
    upstream: &str,
    ir: &rmcp::model::InputRequiredResult,
) -> Result<InputResponses, CallError> {
    let mut answers = InputResponses::new();
    for (key, request) in ir.input_requests.iter().flatten() {
        let Some(request) = server_request(request.clone()) else {
            return Err(CallError::UpstreamFailed {
                upstream: upstream.to_owned(),
                detail: format!("asked for input fedgate cannot relay: {request:?}"),
            });
        };
        let answer = d
            .request(request)
            .await
            .map_err(|e| CallError::NoClientInput {
                detail: format!("`{key}` of upstream `{upstream}`: {e}"),
            })?;
        let value = serde_json::to_value(&answer).map_err(|e| CallError::Internal {
            detail: format!("cannot encode the client's answer: {e}"),
        })?;
        answers.insert(key.clone(), value);
    }
    Ok(answers)
}

/// The downstream `_meta` minus what belongs to the downstream hop only. A stateless-era
/// upstream decides per request what to ask of the client and what to log, so it gets the
/// caller's capabilities and log level (rmcp fills in the rest of the hop's metadata).
fn hop_meta(
    mut meta: RequestMetaObject,
    era: DetectedEra,
    downstream: Option<&Downstream>,
) -> RequestMetaObject {
    meta.retain(|k, _| k != PROGRESS_TOKEN_KEY && !k.starts_with(HOP_META_PREFIX));
    if era == DetectedEra::Stateless
        && let Some(d) = downstream
    {
        if let Some(caps) = &d.capabilities {
            let mut caps = caps.clone();
            // Handshake-era callers never see tasks: their calls run synchronously.
            if !d.modern
                && let Some(ext) = caps.extensions.as_mut()
            {
                ext.remove(rmcp::model::TASKS_EXTENSION_ID);
            }
            meta.set_client_capabilities(caps);
        }
        if let Some(level) = d.log_level {
            meta.set_log_level(level);
        }
    }
    meta
}

fn to_request(op: Op) -> ClientRequest {
    match op {
        Op::CallTool(p) => ClientRequest::CallToolRequest(CallToolRequest::new(p)),
        Op::GetPrompt(p) => ClientRequest::GetPromptRequest(GetPromptRequest::new(p)),
        Op::ReadResource(p) => ClientRequest::ReadResourceRequest(ReadResourceRequest::new(p)),
        Op::Complete(p) => ClientRequest::CompleteRequest(CompleteRequest::new(p)),
        Op::Subscribe(p) => ClientRequest::SubscribeRequest(SubscribeRequest::new(p)),
        Op::Unsubscribe(p) => ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(p)),
        Op::Task(t) => {
            let id = t.route.task_id;
            match t.request {
                TaskRequest::Get => {
                    ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(id)))
                }
                TaskRequest::Update(answers) => ClientRequest::UpdateTaskRequest(
                    UpdateTaskRequest::new(UpdateTaskParams::new(id, answers)),
                ),
                TaskRequest::Cancel => ClientRequest::CancelTaskRequest(CancelTaskRequest::new(
                    CancelTaskParams::new(id),
                )),
            }
        }
    }
}
