//! The search tools: `fedgate__find_tools`, `fedgate__select_tools`, `fedgate__reset_tools`
//! and `fedgate__call_tool` (a call by name, unwrapped by `resolve` before any policy, so the
//! target tool meets every step with its own schema).

use std::sync::Arc;

use rmcp::model::{CallToolResult, ServerResult, Tool};
use serde_json::{Value, json};

use super::{ToolSearch, described};
use crate::{
    names::{
        BUILTIN_TOOLS, CALL_TOOL, FIND_TOOLS, MAX_TOOL_NAME_CHARS, RESET_TOOLS, SELECT_TOOLS, shown,
    },
    pipeline::{
        Call, CallError, CallFuture, OwnTool, done,
        own::{answer, arguments, definition, list_changed},
    },
};

/// The longest query `find_tools` takes (longer is refused by its schema).
pub const MAX_QUERY_CHARS: usize = 1000;
/// Most results one search returns.
pub const MAX_LIMIT: u64 = 50;
const DEFAULT_LIMIT: u64 = 10;

pub(super) fn all(search: &Arc<ToolSearch>) -> Vec<Arc<dyn OwnTool>> {
    vec![
        Arc::new(FindTools(search.clone())),
        Arc::new(SelectTools(search.clone())),
        Arc::new(ResetTools(search.clone())),
        Arc::new(CallTool),
    ]
}

#[derive(Debug)]
struct FindTools(Arc<ToolSearch>);

impl OwnTool for FindTools {
    fn definition(&self) -> Tool {
        definition(
            FIND_TOOLS,
            "Search the tools you may call by words of their names, descriptions and parameters. \
             Returns the best matches with their input schemas; add them to your tool list with \
             fedgate__select_tools, or call one at once with fedgate__call_tool.",
            json!({
                "type": "object",
                "required": ["query"],
                "additionalProperties": false,
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS,
                              "description": "Words describing the tool you need"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                              "description": "Most tools to return (default 10)"}
                }
            }),
        )
    }

    fn call(&self, call: Call) -> CallFuture {
        let search = self.0.clone();
        Box::pin(async move { search.find(&call).await })
    }
}

impl ToolSearch {
    /// `fedgate__find_tools`: the tools the caller may call now that match the query.
    async fn find(&self, call: &Call) -> Result<ServerResult, CallError> {
        let args = arguments(call);
        let query = args
            .get("query")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_LIMIT)
            .clamp(1, MAX_LIMIT) as usize;
        let search = self;
        let standing = search.standing(call).await;
        let access = &call.identity.access;
        let views = search.views.load();
        let view = ToolSearch::view(&views, access);
        let index = search.index();
        let (found, total) = index.search(query, limit, |t| {
            !BUILTIN_TOOLS.contains(&t.name.as_ref())
                && crate::pipeline::may_call_now(&search.pool, access, standing.as_ref(), &t.name)
        });
        let tools: Vec<Value> = found
            .into_iter()
            .map(|t| {
                let t = match view {
                    Some(v) => described(t.clone(), v),
                    None => t.clone(),
                };
                json!({
                    "name": t.name,
                    "title": t.title,
                    "description": t.description,
                    "inputSchema": t.input_schema,
                })
            })
            .collect();
        let outcome = if tools.is_empty() { "none" } else { "found" };
        search.metrics.searched(outcome);
        let next = if tools.is_empty() {
            "No tool matched; try other words (a verb and an object: \"create issue\")."
        } else {
            "Add the tools you need to your tool list with fedgate__select_tools {names}, or \
             call one now with fedgate__call_tool {name, arguments}."
        };
        answer(
            json!({"query": shown(query), "total": total, "tools": tools, "next": next}),
            false,
        )
        .await
    }
}

#[derive(Debug)]
struct SelectTools(Arc<ToolSearch>);

impl OwnTool for SelectTools {
    fn definition(&self) -> Tool {
        let max = self.0.views.load().settings.max_selected;
        definition(
            SELECT_TOOLS,
            "Add tools (exact names from fedgate__find_tools) to this session's tool list; your \
             client is told the list changed and lists them with their schemas. replace: true \
             drops the earlier selection.",
            json!({
                "type": "object",
                "required": ["names"],
                "additionalProperties": false,
                "properties": {
                    "names": {"type": "array", "minItems": 1, "maxItems": max,
                              "items": {"type": "string", "minLength": 1,
                                        "maxLength": MAX_TOOL_NAME_CHARS}},
                    "replace": {"type": "boolean",
                                "description": "Replace the selection instead of adding to it"}
                }
            }),
        )
    }

    fn call(&self, call: Call) -> CallFuture {
        let search = self.0.clone();
        Box::pin(async move {
            let args = arguments(&call);
            let names: Vec<String> = args
                .get("names")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect();
            let replace = args.get("replace").and_then(Value::as_bool) == Some(true);
            let refused = |why: Value| {
                search.metrics.working_set("select", "refused");
                Ok(ServerResult::CallToolResult(
                    CallToolResult::structured_error(why),
                ))
            };
            let Some(session) = session(&call) else {
                return refused(no_session());
            };
            let access = &call.identity.access;
            let standing = search.standing(&call).await;
            let unknown: Vec<String> = names
                .iter()
                .filter(|n| {
                    BUILTIN_TOOLS.contains(&n.as_str())
                        || !crate::pipeline::may_call_now(
                            &search.pool,
                            access,
                            standing.as_ref(),
                            n,
                        )
                })
                .map(|n| shown(n))
                .collect();
            if !unknown.is_empty() {
                return refused(json!({
                    "error": "no tool you may call has these names; nothing was selected",
                    "unknown": unknown,
                    "next": "Find exact names with fedgate__find_tools {query}."
                }));
            }
            let max = search.views.load().settings.max_selected;
            let mut set = if replace {
                Vec::new()
            } else {
                search
                    .sets
                    .get(&session)
                    .map(|s| s.clone())
                    .unwrap_or_default()
            };
            for n in names {
                if !set.contains(&n) {
                    set.push(n);
                }
            }
            if set.len() > max {
                return refused(json!({
                    "error": format!(
                        "a working set holds at most {max} tools; this would make {}; nothing \
                         was selected", set.len()),
                    "next": "Select with replace: true, or drop tools with fedgate__reset_tools."
                }));
            }
            search.sets.insert(session, set.clone());
            search.metrics.working_set("select", "ok");
            list_changed(&call).await;
            Ok(ServerResult::CallToolResult(CallToolResult::structured(
                json!({
                    "selected": set,
                    "next": "Your tool list changed: list tools again and call them by name."
                }),
            )))
        })
    }
}

#[derive(Debug)]
struct ResetTools(Arc<ToolSearch>);

impl OwnTool for ResetTools {
    fn definition(&self) -> Tool {
        definition(
            RESET_TOOLS,
            "Drop every tool fedgate__select_tools added to this session's tool list.",
            json!({"type": "object", "additionalProperties": false, "properties": {}}),
        )
    }

    fn call(&self, call: Call) -> CallFuture {
        let search = self.0.clone();
        Box::pin(async move {
            let Some(session) = session(&call) else {
                search.metrics.working_set("reset", "refused");
                return Ok(ServerResult::CallToolResult(
                    CallToolResult::structured_error(no_session()),
                ));
            };
            let dropped = search
                .sets
                .remove(&session)
                .map(|(_, s)| s.len())
                .unwrap_or(0);
            search.metrics.working_set("reset", "ok");
            if dropped > 0 {
                list_changed(&call).await;
            }
            Ok(ServerResult::CallToolResult(CallToolResult::structured(
                json!({"dropped": dropped}),
            )))
        })
    }
}

/// `fedgate__call_tool`: `resolve` replaces a well-formed call by the call it names, so this
/// terminal only ever sees calls its schema refused before.
#[derive(Debug)]
struct CallTool;

impl OwnTool for CallTool {
    fn definition(&self) -> Tool {
        definition(
            CALL_TOOL,
            "Call a tool by its exact name (from fedgate__find_tools) with its arguments, when \
             your client cannot list it. The arguments meet that tool's own input schema.",
            json!({
                "type": "object",
                "required": ["name"],
                "additionalProperties": false,
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": MAX_TOOL_NAME_CHARS},
                    "arguments": {"type": "object"}
                }
            }),
        )
    }

    fn call(&self, _call: Call) -> CallFuture {
        done(Err(CallError::Internal {
            detail: "fedgate__call_tool reached dispatch".into(),
        }))
    }
}

/// The session a working set belongs to: none for stateless requests.
fn session(call: &Call) -> Option<String> {
    call.downstream.as_ref().and_then(|d| d.session.clone())
}

fn no_session() -> Value {
    json!({
        "error": "this request belongs to no session, so it has no tool list to change",
        "next": "Call a found tool with fedgate__call_tool {name, arguments}."
    })
}
