//! The definition of `fedgate__approve`; the approval step answers its calls.

use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::json;

use crate::{
    names::APPROVE_TOOL,
    pipeline::{Call, CallError, CallFuture, OwnTool, step::done},
    policy::trust::CallClass,
};

/// `fedgate__approve`: listed and authorized like any tool; the approval step answers it.
#[derive(Debug)]
pub struct ApproveTool;

impl OwnTool for ApproveTool {
    fn definition(&self) -> Tool {
        let schema = json!({
            "type": "object",
            "required": ["plan_id"],
            "additionalProperties": false,
            "properties": {
                "plan_id": {
                    "type": "string",
                    "title": "Plan id",
                    "description": "The plan_id of a plan a held call returned"
                },
                "decision": {
                    "enum": ["approve", "deny"],
                    "title": "Decision",
                    "description": "approve (default) or deny"
                }
            }
        });
        Tool::new(
            APPROVE_TOOL,
            "Approve (or deny) a call fedgate held for approval. The caller of the held call \
             runs it with its plan_id; when the plan names approver roles, an identity with \
             such a role decides first.",
            Arc::new(schema.as_object().cloned().unwrap_or_default()),
        )
    }

    fn class(&self) -> CallClass {
        CallClass::Write
    }

    fn call(&self, _call: Call) -> CallFuture {
        // The approval step answers every call of this tool before dispatch.
        done(Err(CallError::Internal {
            detail: "fedgate__approve reached dispatch".into(),
        }))
    }
}
