//! A call or a move a workflow's stage does not allow (`[stages.NAME]`): what the stage is,
//! what it allows, who can move it on, and the call that shows it all.

use serde_json::{Map, Value, json};

use crate::envelope::{Action, Plan, PlanError};

/// Why a stage refused; built by `crate::stages`, which knows the workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageRefusal {
    /// A stable code: `stage_blocked`, `stage_unbound`, `stage_workspace`, `stage_move`.
    pub code: &'static str,
    pub message: String,
    /// What to do about it, in words.
    pub hint: String,
    pub workflow: Option<String>,
    pub workspace: Option<String>,
    pub state: Option<String>,
    /// The call that shows the stage (`fedgate__stage_status` with its workspace), when one
    /// is known.
    pub next: Option<(String, Map<String, Value>)>,
}

impl std::fmt::Display for StageRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl StageRefusal {
    /// `error.data` of the wire error.
    pub fn data(&self) -> Value {
        json!({
            "reason": self.code,
            "workflow": self.workflow,
            "workspace": self.workspace,
            "state": self.state,
        })
    }

    /// The `blocked` plan: the hint, and `stage_status` as the next action.
    pub fn plan(&self, base: Plan) -> Plan {
        let mut p = base
            .error(PlanError::new(self.code, self.message.clone(), true).hint(self.hint.clone()));
        if let Some((tool, args)) = &self.next {
            p.next_actions = vec![
                Action::call(tool.clone(), args.clone())
                    .label("see the stage: what it allows and who may move it on"),
            ];
        }
        p
    }
}
