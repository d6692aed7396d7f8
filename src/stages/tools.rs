//! The stage tools: `fedgate__stage_status {workspace}` (the stage, what it shows, the moves
//! out of it and who may make them, the history) and `fedgate__stage_advance {workspace, to,
//! reason, record_id}`. Either binds the caller's session to the workspace.

use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::{Value, json};

use super::{Bound, Stages, refusal, store::Move, store_down};
use crate::policy::workflow::Machine;
use crate::{
    clock::now_ms,
    names::{STAGE_ADVANCE, STAGE_STATUS},
    pipeline::{
        Call, CallError, CallFuture, OwnTool, StageRefusal,
        own::{answer, arguments, definition, list_changed},
    },
    policy::trust::CallClass,
    telemetry::audit::Record,
};

/// Most moves `stage_status` shows (the newest).
const SHOWN_HISTORY: usize = 20;
/// The longest reason and record id a move keeps.
const MAX_REASON_CHARS: usize = 2000;
const MAX_RECORD_CHARS: usize = 200;

pub(super) fn all(stages: &Arc<Stages>) -> Vec<Arc<dyn OwnTool>> {
    vec![
        Arc::new(StageStatus(stages.clone())),
        Arc::new(StageAdvance(stages.clone())),
    ]
}

fn workspace_schema(extra: Value) -> Value {
    let mut props = json!({
        "workspace": {"type": "string", "minLength": 1, "maxLength": 128,
                      "pattern": "^[A-Za-z0-9._:-]+$",
                      "description": "The workspace you work in (your user names it)"},
        "workflow": {"type": "string", "maxLength": 64,
                     "description": "The workflow, when the gateway has several"}
    });
    if let (Some(p), Some(e)) = (props.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    props
}

fn staged(r: Box<StageRefusal>) -> CallError {
    CallError::Staged(r)
}

fn text(args: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    args.get(key).and_then(Value::as_str).map(str::to_owned)
}

impl Stages {
    /// The workspace a stage tool names, its machine, and whether several workflows exist.
    fn named(&self, call: &Call) -> Result<(Bound, Arc<Machine>, bool), CallError> {
        let args = arguments(call);
        let workspace = text(&args, "workspace").unwrap_or_default();
        let b = self
            .name(text(&args, "workflow").as_deref(), &workspace)
            .map_err(staged)?;
        let m = self.machine(&b.workflow).ok_or_else(|| {
            staged(refusal(
                "stage_workspace",
                format!("workflow `{}` is gone", b.workflow),
                "call again: the configuration changed".into(),
            ))
        })?;
        Ok((b, m, self.machines.load().len() > 1))
    }

    /// The stage of `b` as `stage_status` shows it to `call`'s caller.
    async fn status(&self, call: &Call, b: &Bound, m: &Machine) -> Result<Value, CallError> {
        let instance = self
            .instance(b, m)
            .await
            .map_err(|e| staged(store_down(e)))?;
        let state = &instance.state;
        let access = &call.identity.access;
        let catalog = self.pool.catalog();
        let here = crate::policy::workflow::Standing::new(
            self.machines.load_full(),
            Some((b.workflow.clone(), state.clone())),
        );
        let tools: Vec<&str> = catalog
            .tools
            .iter()
            .map(|t| t.name.as_ref())
            .filter(|n| {
                m.gates(n) && crate::pipeline::may_call_now(&self.pool, access, Some(&here), n)
            })
            .collect();
        let moves: Vec<Value> = m
            .exits(state)
            .map(|t| {
                json!({
                    "to": t.to,
                    "roles": t.roles,
                    "needs_reason": t.reason,
                    "needs_record_id": t.record,
                    "you_may": t.roles.is_empty() || access.has_any_role(&t.roles),
                })
            })
            .collect();
        let skip = instance.history.len().saturating_sub(SHOWN_HISTORY);
        Ok(json!({
            "workflow": b.workflow,
            "workspace": b.workspace,
            "state": state,
            "description": m.states.get(state).and_then(|s| s.description.clone()),
            "tools": tools,
            "transitions": moves,
            "history": instance.history[skip..],
        }))
    }
}

#[derive(Debug)]
struct StageStatus(Arc<Stages>);

impl OwnTool for StageStatus {
    fn definition(&self) -> Tool {
        definition(
            STAGE_STATUS,
            "Show the stage of a workspace: its state, the workflow tools it lets you see and \
             call, the moves out of it and who may make them, and its history. Your session then \
             works in that workspace: your tool list shows what its stage allows.",
            json!({
                "type": "object",
                "required": ["workspace"],
                "additionalProperties": false,
                "properties": workspace_schema(json!({}))
            }),
        )
    }

    fn call(&self, call: Call) -> CallFuture {
        let stages = self.0.clone();
        Box::pin(async move {
            let (b, m, _) = stages.named(&call)?;
            let value = stages.status(&call, &b, &m).await?;
            if stages.bind(call.downstream.as_ref(), &b) {
                list_changed(&call).await;
            }
            answer(value, false).await
        })
    }
}

#[derive(Debug)]
struct StageAdvance(Arc<Stages>);

impl OwnTool for StageAdvance {
    fn definition(&self) -> Tool {
        definition(
            STAGE_ADVANCE,
            "Move a workspace to its next stage. Only the moves fedgate__stage_status lists are \
             possible, each by the roles it names; some need a reason and the id of the review \
             record that justifies them. Every session working in the workspace then sees the \
             new stage's tools.",
            json!({
                "type": "object",
                "required": ["workspace", "to"],
                "additionalProperties": false,
                "properties": workspace_schema(json!({
                    "to": {"type": "string", "minLength": 1, "maxLength": 64,
                           "description": "The state to move to"},
                    "reason": {"type": "string", "maxLength": MAX_REASON_CHARS,
                               "description": "Why (required by some moves)"},
                    "record_id": {"type": "string", "maxLength": MAX_RECORD_CHARS,
                                  "description": "The review record that justifies the move"}
                }))
            }),
        )
    }

    fn class(&self) -> CallClass {
        CallClass::Write
    }

    fn call(&self, call: Call) -> CallFuture {
        let stages = self.0.clone();
        Box::pin(async move {
            let (b, m, several) = stages.named(&call)?;
            let args = arguments(&call);
            let to = text(&args, "to").unwrap_or_default();
            let (reason, record) = (text(&args, "reason"), text(&args, "record_id"));
            let from = stages
                .instance(&b, &m)
                .await
                .map_err(|e| staged(store_down(e)))?
                .state;
            let access = call.identity.access.clone();
            let checked = m.check(
                &from,
                &to,
                |roles| roles.is_empty() || access.has_any_role(roles),
                reason.as_deref(),
                record.as_deref(),
            );
            if let Err(e) = checked {
                stages.refused(&b.workflow, "advance");
                return Err(staged(stages.located(
                    refusal("stage_move", e.to_string(), e.hint()),
                    &b,
                    Some(from),
                    several,
                )));
            }
            let mv = Move {
                from: from.clone(),
                to: to.clone(),
                by: format!("{}:{}", call.identity.kind.as_str(), call.identity.name),
                reason: reason.filter(|r| !r.trim().is_empty()),
                record: record.filter(|r| !r.trim().is_empty()),
                at_ms: now_ms(),
            };
            let moved = stages
                .store
                .advance(&b.workflow, &b.workspace, &m.initial, &mv)
                .await
                .map_err(|e| staged(store_down(e)))?;
            if !moved {
                stages.refused(&b.workflow, "advance");
                return Err(staged(stages.located(
                    refusal(
                        "stage_move",
                        format!("workspace `{}` moved on meanwhile", b.workspace),
                        "call fedgate__stage_status to see where it is now".into(),
                    ),
                    &b,
                    None,
                    several,
                )));
            }
            stages.moved_on(&call, &b, &mv);
            stages.bind(call.downstream.as_ref(), &b);
            let value = stages.status(&call, &b, &m).await?;
            answer(
                json!({"moved": {"from": from, "to": to}, "stage": value}),
                false,
            )
            .await
        })
    }
}

impl Stages {
    /// What a move leaves behind: the metric, the audit record, the sessions told.
    fn moved_on(&self, call: &Call, b: &Bound, mv: &Move) {
        self.metrics.moved(&b.workflow, &mv.from, &mv.to);
        tracing::info!(workflow = %b.workflow, workspace = %b.workspace, from = %mv.from,
            to = %mv.to, by = %mv.by, "stage moved");
        if let Some(audit) = self.audit.lock().as_ref() {
            audit.record(Record {
                time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                identity: call.identity.name.clone(),
                identity_kind: call.identity.kind.as_str(),
                method: "stages/advance",
                name: format!("{}/{}", b.workflow, b.workspace),
                upstream: None,
                decision: "allowed",
                reason: None,
                outcome: "ok",
                latency_ms: 0.0,
                correlation_id: call.correlation_id.clone(),
                arguments_sha256: None,
                arguments: Some(json!({
                    "from": mv.from, "to": mv.to, "reason": mv.reason, "record_id": mv.record,
                })),
                plan_id: None,
                approver: None,
                on_behalf_of: None,
                guardrails: None,
                cut: None,
            });
        }
        let _ = self.moved.send(b.clone());
        self.publish(b);
    }
}
