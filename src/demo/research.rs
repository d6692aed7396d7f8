//! The research-decision demo (`--research`, `examples/stages/`): evidence is collected,
//! verified with a credibility mark, compared, and a decision recorded, per workspace. The
//! gateway's stages decide which of these a session may call when.

use std::{collections::HashMap, sync::LazyLock};

use parking_lot::Mutex;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde_json::{Value, json};

use super::tools::{arg_str, tool};

pub(super) const TOOLS: &[&str] = &["collect", "verify", "compare", "decide"];

#[derive(Default)]
struct Workspace {
    /// (claim, source, credibility once verified)
    evidence: Vec<(String, String, Option<String>)>,
    decision: Option<(String, String)>,
}

static WORKSPACES: LazyLock<Mutex<HashMap<String, Workspace>>> = LazyLock::new(Default::default);

pub(super) fn tools() -> Vec<Tool> {
    let ws = json!({"type": "string", "description": "The workspace"});
    vec![
        tool(
            "collect",
            "Add an evidence item (a claim and its source) to a workspace; answers its id.",
            json!({"workspace": ws, "claim": {"type": "string"}, "source": {"type": "string"}}),
            false,
        ),
        tool(
            "verify",
            "Mark an evidence item's credibility (high, medium or low).",
            json!({"workspace": ws, "evidence_id": {"type": "integer", "minimum": 1},
                   "credibility": {"type": "string", "enum": ["high", "medium", "low"]}}),
            false,
        ),
        tool(
            "compare",
            "Compare a workspace's verified evidence: counts by credibility, and what is unverified.",
            json!({"workspace": ws}),
            true,
        ),
        tool(
            "decide",
            "Record the workspace's decision and its rationale.",
            json!({"workspace": ws, "decision": {"type": "string"}, "rationale": {"type": "string"}}),
            false,
        ),
    ]
}

fn answer(v: Value, error: bool) -> CallToolResult {
    if error {
        CallToolResult::structured_error(v)
    } else {
        CallToolResult::structured(v)
    }
}

/// Answers the tools above; `None` for any other name.
pub(super) fn call(name: &str, args: &Option<JsonObject>) -> Option<CallToolResult> {
    if !TOOLS.contains(&name) {
        return None;
    }
    let key = arg_str(args, "workspace").unwrap_or_default();
    let mut all = WORKSPACES.lock();
    let w = all.entry(key.clone()).or_default();
    Some(match name {
        "collect" => {
            w.evidence.push((
                arg_str(args, "claim").unwrap_or_default(),
                arg_str(args, "source").unwrap_or_default(),
                None,
            ));
            answer(
                json!({"workspace": key, "evidence_id": w.evidence.len()}),
                false,
            )
        }
        "verify" => {
            let id = args
                .as_ref()
                .and_then(|a| a.get("evidence_id"))
                .and_then(Value::as_u64)
                .unwrap_or(0) as usize;
            let mark = arg_str(args, "credibility").unwrap_or_default();
            match w.evidence.get_mut(id.wrapping_sub(1)) {
                Some(e) => {
                    e.2 = Some(mark.clone());
                    answer(json!({"evidence_id": id, "credibility": mark}), false)
                }
                None => answer(json!({"error": format!("no evidence item {id}")}), true),
            }
        }
        "compare" => {
            let mut by: HashMap<String, usize> = HashMap::new();
            let mut unverified = 0;
            for (_, _, c) in &w.evidence {
                match c {
                    Some(c) => *by.entry(c.clone()).or_default() += 1,
                    None => unverified += 1,
                }
            }
            answer(
                json!({"workspace": key, "by_credibility": by, "unverified": unverified}),
                false,
            )
        }
        _ => {
            let decision = arg_str(args, "decision").unwrap_or_default();
            w.decision = Some((
                decision.clone(),
                arg_str(args, "rationale").unwrap_or_default(),
            ));
            answer(json!({"workspace": key, "decided": decision}), false)
        }
    })
}
