//! Asking the client for input the way its era does (elicitation), for the `greet` tool.

use rmcp::{ErrorData as McpError, RoleServer, model::*, service::RequestContext};
use serde_json::{Value, json};

use super::{Demo, tools::text};

impl Demo {
    pub(super) async fn ask(
        &self,
        req: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let legacy = ctx.protocol_version().is_none_or(|v| v.has_initialize());
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
        if legacy {
            let params: ElicitRequestParams = serde_json::from_value(json!({
                "mode": "form", "message": "What is your name?", "requestedSchema": schema
            }))
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
            let answer =
                ctx.peer.create_elicitation(params).await.map_err(|e| {
                    McpError::internal_error(format!("elicitation failed: {e}"), None)
                })?;
            return Ok(CallToolResponse::Complete(greet(
                answer.action,
                answer.content.as_ref(),
            )));
        }
        // Stateless era: ask with an input-required result; the retry carries the answer.
        if let Some(answer) = req.input_responses.as_ref().and_then(|r| r.get("name")) {
            let action: ElicitationAction =
                serde_json::from_value(answer.get("action").cloned().unwrap_or(Value::Null))
                    .unwrap_or(ElicitationAction::Cancel);
            return Ok(CallToolResponse::Complete(greet(
                action,
                answer.get("content"),
            )));
        }
        let ir: InputRequiredResult = serde_json::from_value(json!({
            "resultType": "input_required",
            "inputRequests": {"name": {"method": "elicitation/create", "params": {
                "mode": "form", "message": "What is your name?", "requestedSchema": schema}}},
            "requestState": "ask-1"
        }))
        .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(CallToolResponse::InputRequired(ir))
    }
}

/// A client's answer to one request, or the input-required result that asks for it.
pub(super) enum Input {
    Answer(Value),
    Ask(InputRequiredResult),
}

/// Asks the client for input the way its era does: a request in the handshake era, an
/// input-required result (answered by the retry's `inputResponses[key]`) in the stateless era.
pub(super) async fn input(
    req: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    key: &str,
    ask: Value,
) -> Result<Input, McpError> {
    let internal = |e: String| McpError::internal_error(e, None);
    if ctx.protocol_version().is_none_or(|v| v.has_initialize()) {
        let request: ServerRequest =
            serde_json::from_value(ask).map_err(|e| internal(e.to_string()))?;
        let answer = ctx
            .peer
            .send_request(request)
            .await
            .map_err(|e| internal(format!("the client did not answer: {e}")))?;
        return serde_json::to_value(answer)
            .map(Input::Answer)
            .map_err(|e| internal(e.to_string()));
    }
    if let Some(a) = req.input_responses.as_ref().and_then(|r| r.get(key)) {
        return Ok(Input::Answer(a.clone()));
    }
    let ir = serde_json::from_value(json!({
        "resultType": "input_required",
        "inputRequests": {key: ask},
    }))
    .map_err(|e| internal(e.to_string()))?;
    Ok(Input::Ask(ir))
}

pub(super) fn greet(action: ElicitationAction, content: Option<&Value>) -> CallToolResult {
    match action {
        ElicitationAction::Accept => {
            let name = content
                .and_then(|c| c.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("stranger");
            text(format!("hello {name}"))
        }
        _ => text("the user declined"),
    }
}
