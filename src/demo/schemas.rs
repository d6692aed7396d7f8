//! Demo tools whose input schemas exercise the gateway's argument checks: a rich 2020-12
//! schema with an output schema, a draft-07 one, and one that does not compile.

use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::tools::{schema, text};

/// Ticket ids, per process.
static NEXT_TICKET: AtomicU64 = AtomicU64::new(1);

pub(super) fn tools(broken: bool) -> Vec<Tool> {
    let mut tools = vec![
        Tool::new(
            "file_ticket",
            "File a ticket (a write with required fields, an enum, a nested owner and labels).",
            schema(json!({
                "type": "object",
                "required": ["title", "priority"],
                "additionalProperties": false,
                "properties": {
                    "title": {"type": "string", "title": "Title", "minLength": 1},
                    "priority": {"enum": ["low", "normal", "high"], "title": "Priority"},
                    "estimate": {"type": "number", "minimum": 0, "description": "Hours of work"},
                    "urgent": {"type": "boolean", "title": "Urgent"},
                    "owner": {
                        "type": "object",
                        "required": ["email"],
                        "properties": {
                            "email": {"type": "string", "format": "email", "title": "Owner e-mail"},
                            "name": {"type": "string"}
                        }
                    },
                    "labels": {"type": "array", "items": {"type": "string"}}
                }
            })),
        )
        .with_raw_output_schema(schema(json!({
            "type": "object",
            "required": ["id", "title"],
            "properties": {"id": {"type": "integer"}, "title": {"type": "string"}}
        })))
        .with_annotations(ToolAnnotations::new().read_only(false).destructive(false)),
        Tool::new(
            "legacy_form",
            "Echo a pair (its input schema is draft-07, where `items` may be a tuple).",
            schema(json!({
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "required": ["pair"],
                "properties": {
                    "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}
                }
            })),
        )
        .with_annotations(ToolAnnotations::new().read_only(true)),
    ];
    if broken {
        tools.push(broken_schema());
    }
    tools
}

/// With `--broken-schema`: a tool whose input schema does not compile.
fn broken_schema() -> Tool {
    Tool::new(
        "broken_schema",
        "Echo `code` (its input schema does not compile: the pattern is not a regex).",
        schema(json!({
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "("}}
        })),
    )
    .with_annotations(ToolAnnotations::new().read_only(true))
}

/// Answers the tools above; `None` for any other name.
pub(super) fn call(name: &str, args: &Option<JsonObject>) -> Option<CallToolResult> {
    let arg = |k: &str| args.as_ref().and_then(|a| a.get(k)).cloned();
    Some(match name {
        "file_ticket" => {
            let id = NEXT_TICKET.fetch_add(1, Ordering::SeqCst);
            let v = json!({"id": id, "title": arg("title").unwrap_or(Value::Null)});
            let mut r = text(v.to_string());
            r.structured_content = Some(v);
            r
        }
        "legacy_form" => text(format!("pair: {}", arg("pair").unwrap_or(Value::Null))),
        "broken_schema" => text(format!("code: {}", arg("code").unwrap_or(Value::Null))),
        _ => return None,
    })
}
