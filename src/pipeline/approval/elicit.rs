//! Approval by elicitation (`approval = "elicit"`): when the caller declared form elicitation,
//! its human is asked directly — tool, upstream, arguments and safety — and the call runs on
//! accept. A handshake-era caller gets an `elicitation/create` request on the call's stream; a
//! stateless-era caller gets an input-required result whose sealed `requestState` names the
//! plan, and its retry carries the answer. Either way the plan is made first, so the answer
//! runs exactly the frozen call once, as with `fedgate__approve`.

use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientResult, InputRequiredResult, RequestStateCodec, SealOptions,
    ServerRequest,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::pipeline::{Call, CallError, Held, Op};

/// The `inputRequests` key of the approval question, and the binding of its sealed state.
pub(super) const INPUT_KEY: &str = "fedgate-approval";

/// What the sealed `requestState` of an approval question holds.
#[derive(Debug, Serialize, Deserialize)]
struct Ticket {
    plan: String,
}

/// The caller can answer a form elicitation.
pub(super) fn can_elicit(caps: Option<&ClientCapabilities>) -> bool {
    caps.and_then(|c| c.elicitation.as_ref())
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The question put to the human.
fn params(held: &Held) -> Value {
    let mut message = format!(
        "Allow `{}` on upstream `{}` with {}?",
        held.tool, held.upstream, held.summary
    );
    if held.safety.writes_code {
        message.push_str(" It changes code.");
    }
    if !held.safety.touches_files.is_empty() {
        message.push_str(&format!(
            " It may change files matching {}.",
            held.safety.touches_files.join(", ")
        ));
    }
    if held.safety.destructive == Some(true) {
        message.push_str(" The tool says it is destructive.");
    }
    json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {
                    "type": "boolean",
                    "title": "Run this call",
                    "description": "Leave checked to run it exactly as shown",
                    "default": true
                }
            },
            "required": ["approve"]
        }
    })
}

/// Whether an elicitation answer approves: accepted, and `approve` not unchecked.
pub fn approves(answer: &Value) -> bool {
    answer.get("action").and_then(Value::as_str) == Some("accept")
        && answer
            .get("content")
            .and_then(|c| c.get("approve"))
            .and_then(Value::as_bool)
            != Some(false)
}

/// Asks a handshake-era caller on its call's stream; `Ok(true)` = approved.
pub(super) async fn ask(call: &Call, held: &Held, wait: Duration) -> Result<bool, CallError> {
    let Some(downstream) = call.downstream.as_ref() else {
        return Err(CallError::NoClientInput {
            detail: "no caller session to ask".into(),
        });
    };
    let request: ServerRequest = serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": params(held),
    }))
    .map_err(|e| CallError::Internal {
        detail: format!("approval question: {e}"),
    })?;
    let answer = tokio::time::timeout(wait, downstream.request(request))
        .await
        .map_err(|_| CallError::NoClientInput {
            detail: format!("no answer to the approval question within {wait:?}"),
        })?
        .map_err(|e| CallError::NoClientInput {
            detail: e.to_string(),
        })?;
    let answer = match answer {
        ClientResult::ElicitResult(r) => serde_json::to_value(r).unwrap_or_default(),
        other => serde_json::to_value(other).unwrap_or_default(),
    };
    Ok(approves(&answer))
}

/// What the sealed state is bound to: the question, and the call's arguments (a retry with
/// other arguments does not answer it).
fn binding(call: &Call) -> Vec<u8> {
    let args = match &call.op {
        Op::CallTool(p) => Value::Object(p.arguments.clone().unwrap_or_default()),
        _ => Value::Null,
    };
    format!("{INPUT_KEY}:{}", crate::approval::digest(&args)).into_bytes()
}

/// The input-required result that asks a stateless-era caller.
pub(super) fn input_required(
    seal: &RequestStateCodec,
    call: &Call,
    held: &Held,
) -> Result<InputRequiredResult, CallError> {
    let state = seal
        .seal_json_with(
            &Ticket {
                plan: held.id.clone(),
            },
            &SealOptions::new().associated_data(&binding(call)),
        )
        .map_err(|e| CallError::Internal {
            detail: format!("sealing the approval state: {e}"),
        })?;
    serde_json::from_value(json!({
        "resultType": "input_required",
        "inputRequests": {INPUT_KEY: {"method": "elicitation/create", "params": params(held)}},
        "requestState": state,
    }))
    .map_err(|e| CallError::Internal {
        detail: format!("approval question: {e}"),
    })
}

/// A stateless-era retry that answers an approval question: the plan id and whether the human
/// approved. `None` when the call is no such retry (its state is someone else's).
pub(super) fn answer(seal: &RequestStateCodec, call: &Call) -> Option<(String, bool)> {
    let Op::CallTool(p) = &call.op else {
        return None;
    };
    let ticket: Ticket = seal
        .open_json_with(p.request_state.as_deref()?, &binding(call))
        .ok()?;
    let approved = p
        .input_responses
        .as_ref()
        .and_then(|r| r.get(INPUT_KEY))
        .is_some_and(approves);
    Some((ticket.plan, approved))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_accepted_answer_that_keeps_approve_approves() {
        assert!(approves(
            &json!({"action": "accept", "content": {"approve": true}})
        ));
        assert!(approves(&json!({"action": "accept"})));
        assert!(!approves(
            &json!({"action": "accept", "content": {"approve": false}})
        ));
        assert!(!approves(&json!({"action": "decline"})));
        assert!(!approves(&json!({"action": "cancel"})));
    }
}
