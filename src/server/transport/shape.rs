//! The gateway's answer to a directly served request, shaped for the caller's era exactly as
//! rmcp's handler shapes it on its own path.

use rmcp::{
    ErrorData, ServerHandler,
    model::{CallToolResponse, ClientCapabilities, DiscoverResult, ErrorCode, ServerResult},
};

use super::message::Request;
use crate::server::{mcp::Gateway, request_of::Incoming};

/// The gateway's answer, shaped for the caller's era as rmcp's handler shapes it.
pub(super) async fn shaped(
    g: &Gateway,
    request: Request,
    r: &Incoming,
) -> Result<ServerResult, ErrorData> {
    if let Some(method) = request.task_method() {
        tasks_gate(g, method, r)?;
    }
    let mut result = match request {
        Request::CallTool(p) => {
            let answer = g.tools_call(p, r).await?;
            let tasks = r.capabilities.as_ref().is_some_and(|c| c.supports_tasks());
            if matches!(answer, CallToolResponse::Task(_)) && !tasks {
                return Err(ErrorData::missing_required_client_capability(
                    ClientCapabilities::builder().enable_tasks().build(),
                ));
            }
            ServerResult::from(answer)
        }
        Request::ListTools(p) => ServerResult::ListToolsResult(g.tools_list(p, r).await?),
        Request::ListPrompts(p) => ServerResult::ListPromptsResult(g.prompts_list(p, r).await?),
        Request::GetPrompt(p) => ServerResult::from(g.prompts_get(p, r).await?),
        Request::ListResources(p) => {
            ServerResult::ListResourcesResult(g.resources_list(p, r).await?)
        }
        Request::ListTemplates(p) => {
            ServerResult::ListResourceTemplatesResult(g.templates_list(p, r).await?)
        }
        Request::ReadResource(p) => ServerResult::from(g.resources_read(p, r).await?),
        Request::Ping => ServerResult::empty(()),
        Request::SetLevel(p) => {
            g.logging_set_level(p, r).await?;
            ServerResult::empty(())
        }
        Request::Complete(p) => ServerResult::CompleteResult(g.completion(p, r).await?),
        Request::GetTask(p) => ServerResult::GetTaskResult(g.tasks_get(p, r).await?),
        Request::UpdateTask(p) => {
            g.tasks_update(p, r).await?;
            ServerResult::task_ack(())
        }
        Request::CancelTask(p) => {
            g.tasks_cancel(p, r).await?;
            ServerResult::task_ack(())
        }
        Request::Subscribe(p) => {
            g.resources_subscribe(p, r).await?;
            ServerResult::empty(())
        }
        Request::Unsubscribe(p) => {
            g.resources_unsubscribe(p, r).await?;
            ServerResult::empty(())
        }
        Request::Custom(method) => {
            return Err(crate::server::unrouted::custom_request(&method, r.modern));
        }
        Request::Discover => ServerResult::DiscoverResult(DiscoverResult::from_server_info(
            g.supported_protocol_versions().into_owned(),
            g.info(),
        )),
    };
    if r.stateless {
        result.fill_missing_cache_hints();
        return Ok(result);
    }
    if matches!(result, ServerResult::InputRequiredResult(_)) {
        return Err(ErrorData::invalid_request(
            "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer",
            None,
        ));
    }
    result.strip_result_type_for_legacy_peer();
    result.strip_non_object_output_for_legacy_peer();
    Ok(result)
}

/// `tasks/*` exist while the gateway offers the extension (`-32601` otherwise), for callers
/// that declared it (`-32021` otherwise) — rmcp's handler gates them the same way.
fn tasks_gate(g: &Gateway, method: &'static str, r: &Incoming) -> Result<(), ErrorData> {
    if !g.info().capabilities.supports_tasks() {
        return Err(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, method, None));
    }
    if r.capabilities.as_ref().is_some_and(|c| c.supports_tasks()) {
        return Ok(());
    }
    Err(ErrorData::missing_required_client_capability(
        ClientCapabilities::builder().enable_tasks().build(),
    ))
}

/// The gateway's answer, as rmcp's handler gives it to each era: the stateless era gets the
/// standard invalid-params code for a resource that is not found.
pub(super) async fn answer(
    g: &Gateway,
    request: Request,
    r: &Incoming,
) -> Result<ServerResult, ErrorData> {
    shaped(g, request, r).await.map_err(|mut e| {
        if r.stateless && e.code == rmcp::model::ErrorCode::RESOURCE_NOT_FOUND {
            e.code = rmcp::model::ErrorCode::INVALID_PARAMS;
        }
        e
    })
}

/// Whether a tool's input schema mirrors an argument in an `Mcp-Param-*` header.
pub(super) fn names_a_header(schema: &serde_json::Map<String, serde_json::Value>) -> bool {
    schema
        .iter()
        .any(|(k, v)| k == "x-mcp-header" || v.as_object().is_some_and(names_a_header))
}
