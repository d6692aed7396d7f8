//! A flow run as a task of the tasks extension: its handle names the flows namespace, the
//! flow's tool and the run id (sealed and bound to the caller like an upstream's task), and
//! its status comes from the run log — so a task survives a restart of the gateway, and any
//! replica reading the same log answers `tasks/get`.

use crate::flows::error::RunError;
use rmcp::model::{DetailedTask, JsonObject, Task, TaskPayload, TaskStatus};

use super::{
    Engine,
    events::{NodeStatus, RunStatus},
};
use crate::{config::flows::FLOWS_NAMESPACE, tasks::TaskRoute};

/// How often a caller is asked to poll a running flow.
const POLL_INTERVAL_MS: u64 = 500;

impl Engine {
    /// The task handle of a run, for `caller`.
    pub fn task_handle(&self, caller: &str, tool: &str, run_id: &str) -> String {
        self.tasks.seal(
            caller,
            &TaskRoute {
                upstream: FLOWS_NAMESPACE.to_owned(),
                tool: tool.to_owned(),
                task_id: run_id.to_owned(),
            },
        )
    }

    /// The task a run is, from its events.
    pub async fn task(&self, run_id: &str, correlation_id: &str) -> Result<DetailedTask, RunError> {
        let (record, events) = self.load(run_id).await?;
        let state = super::events::RunState::fold(&events);
        let created = iso(record.created_ms);
        let updated = iso(events.last().map_or(record.created_ms, |e| e.at_ms));
        let task = Task::new(run_id, TaskStatus::Working, created, updated)
            .with_poll_interval_ms(POLL_INTERVAL_MS);
        let payload = match state.finished {
            Some(RunStatus::Cancelled) => TaskPayload::Cancelled,
            Some(_) => {
                let flow = self
                    .flow(&record.flow)
                    .ok_or_else(|| RunError::FlowNotLoaded(record.flow.clone()))?;
                let result = super::report::result(&flow, run_id, &state, correlation_id);
                let result = match serde_json::to_value(result) {
                    Ok(serde_json::Value::Object(m)) => m,
                    _ => JsonObject::new(),
                };
                TaskPayload::Completed { result }
            }
            None if waiting_approval(&state).is_empty() => TaskPayload::Working,
            None => TaskPayload::InputRequired {
                input_requests: waiting_approval(&state)
                    .into_iter()
                    .filter_map(|(id, question)| {
                        serde_json::from_value(question).ok().map(|q| (id, q))
                    })
                    .collect(),
            },
        };
        let waiting: Vec<&str> = state
            .nodes
            .iter()
            .filter(|(_, n)| matches!(n.status, NodeStatus::AwaitingApproval | NodeStatus::Blocked))
            .map(|(id, _)| id.as_str())
            .collect();
        let mut task = task;
        if state.finished.is_none() {
            let done = state.nodes.values().filter(|n| n.status.is_final()).count();
            task = task.with_status_message(if waiting.is_empty() {
                format!("{done} nodes done")
            } else {
                format!(
                    "{done} nodes done; waiting for a decision on {}",
                    waiting.join(", ")
                )
            });
        }
        Ok(DetailedTask::new(task, payload))
    }
}

/// The approval questions of the run's parked nodes, by plan id (the `inputRequests` keys a
/// `tasks/update` answers).
fn waiting_approval(state: &super::events::RunState) -> Vec<(String, serde_json::Value)> {
    state
        .nodes
        .iter()
        .filter(|(_, n)| n.status == NodeStatus::AwaitingApproval)
        .filter_map(|(node, n)| {
            let plan = n.plan.as_ref()?;
            let id = super::node::plan_id(plan)?;
            let what = plan["instruction"].as_str().unwrap_or("A call needs approval.");
            let question = serde_json::json!({
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": format!("Flow node `{node}`: {what}"),
                    "requestedSchema": {
                        "type": "object",
                        "properties": {"approve": {"type": "boolean", "title": "Run this call", "default": true}},
                        "required": ["approve"]
                    }
                }
            });
            Some((id, question))
        })
        .collect()
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
