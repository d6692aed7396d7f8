//! What a finished run says: the `flows__<id>` tool's result (outputs on success, a `partial`
//! or `error` plan envelope with per-node results otherwise) and the timeline `fedgate flows
//! show` prints.

use std::fmt::Write;

use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::{Value, json};

use super::events::{NodeStatus, Output, RunState, RunStatus, Stamped};
use crate::{
    config::flows::FlowDef,
    envelope::{META_KEY, Plan, PlanError, Status, StepResult},
};

/// `_meta` key of the run id in a flow tool's result.
pub const RUN_META_KEY: &str = "io.fedgate/flow_run";

/// The tool result of a finished run.
pub fn result(
    flow: &FlowDef,
    run_id: &str,
    state: &RunState,
    correlation_id: &str,
) -> CallToolResult {
    let mut meta = MetaObject::new();
    meta.0.insert(RUN_META_KEY.into(), json!(run_id));
    if state.finished == Some(RunStatus::Succeeded) {
        let outputs = state.outputs.clone().unwrap_or_else(|| json!({}));
        let mut r = CallToolResult::success(vec![ContentBlock::text(outputs.to_string())]);
        r.structured_content = Some(outputs);
        r.meta = Some(meta);
        return r;
    }
    let plan = plan(flow, run_id, state, correlation_id);
    let value = plan.to_value();
    meta.0.insert(META_KEY.into(), value.clone());
    let mut r = CallToolResult::error(vec![ContentBlock::text(value.to_string())]);
    if flow.output_schema.is_none() {
        r.structured_content = Some(value);
    }
    r.meta = Some(meta);
    r
}

/// The envelope of a run that did not succeed: `partial` when some nodes succeeded, `error`
/// otherwise; every node's result in `partial_results`.
pub fn plan(flow: &FlowDef, run_id: &str, state: &RunState, correlation_id: &str) -> Plan {
    let status = match state.finished {
        Some(RunStatus::Partial) => Status::Partial,
        _ => Status::Error,
    };
    let what = match state.finished {
        Some(RunStatus::Cancelled) => "was cancelled".to_owned(),
        Some(RunStatus::Partial) => "finished in part".to_owned(),
        Some(RunStatus::Diverged) => "diverged from the run it replays".to_owned(),
        _ => "failed".to_owned(),
    };
    let mut plan = Plan::new(status, correlation_id).instruction(format!(
        "Flow `{}` {what} (run {run_id}). {} `fedgate flows show {run_id}` has the timeline.",
        flow.id,
        state
            .error
            .as_deref()
            .map(|e| format!("{e}."))
            .unwrap_or_default()
    ));
    plan.partial_results = flow.nodes.iter().map(|n| step(&n.id, state)).collect();
    let code = match state.finished {
        Some(RunStatus::Cancelled) => "cancelled",
        Some(RunStatus::Partial) => "flow_partial",
        Some(RunStatus::Diverged) => "replay_diverged",
        _ => "flow_failed",
    };
    plan.error(PlanError::new(
        code,
        state
            .error
            .clone()
            .unwrap_or_else(|| format!("flow {what}")),
        state.finished != Some(RunStatus::Cancelled),
    ))
}

fn step(id: &str, state: &RunState) -> StepResult {
    let n = state.nodes.get(id);
    let status = n.map_or(NodeStatus::Pending, |n| n.status);
    let label = match status {
        NodeStatus::Succeeded => "ok",
        NodeStatus::Skipped => "skipped",
        NodeStatus::Blocked => "blocked",
        // Not run (yet): waiting for approval, for nodes before it, or for its turn.
        NodeStatus::AwaitingApproval
        | NodeStatus::Pending
        | NodeStatus::Ready
        | NodeStatus::Running
        | NodeStatus::Retrying => "pending",
        NodeStatus::Failed | NodeStatus::Cancelled => "error",
    };
    let output = n.and_then(|n| n.output.as_ref()).map(|o| match o {
        Output::Inline(v) => v.clone(),
        Output::Artifact { id, bytes } => json!({"artifact": id, "bytes": bytes}),
    });
    let error = n
        .filter(|_| label != "ok")
        .and_then(|n| n.error.clone())
        .map(|e| {
            // A refusal keeps what the refusal said of itself (a loop is not worth retrying).
            let refusal = n
                .and_then(|n| n.plan.as_ref())
                .and_then(|p| p["errors"][0].as_object());
            let code = match status {
                NodeStatus::Skipped => "skipped",
                NodeStatus::Blocked => "needs_decision",
                NodeStatus::AwaitingApproval => "approval_required",
                NodeStatus::Cancelled => "cancelled",
                _ => refusal
                    .and_then(|r| r.get("code"))
                    .and_then(Value::as_str)
                    .unwrap_or("node_failed"),
            };
            let recoverable = refusal
                .and_then(|r| r.get("recoverable"))
                .and_then(Value::as_bool)
                .unwrap_or(status != NodeStatus::Skipped);
            let mut pe = PlanError::new(code, e, recoverable);
            if let Some(plan) = n.and_then(|n| n.plan.as_ref())
                && let Some(hint) = plan["errors"][0]["hint"].as_str()
            {
                pe = pe.hint(hint);
            }
            pe
        });
    StepResult {
        step: id.to_owned(),
        status: label.into(),
        output,
        error,
    }
}

/// A readable timeline of a run: one line per event, then each node's final state.
pub fn timeline(run_id: &str, flow: &str, events: &[Stamped], state: &RunState) -> String {
    let mut out = String::new();
    let start = events.first().map_or(0, |e| e.at_ms);
    let _ = writeln!(
        out,
        "run {run_id}  flow {flow}  status {}",
        state.finished.map_or("running", |s| s.as_str())
    );
    for e in events {
        let body = serde_json::to_value(&e.event).unwrap_or(Value::Null);
        let kind = body["event"].as_str().unwrap_or("?").to_owned();
        let node = body["node"]
            .as_str()
            .map(|n| format!(" {n}"))
            .unwrap_or_default();
        let extra = match (
            &body["error"],
            &body["reason"],
            &body["attempt"],
            &body["status"],
        ) {
            (_, _, _, Value::String(s)) => format!("  {s}"),
            (Value::String(e), ..) => format!("  {e}"),
            (_, Value::String(r), ..) => format!("  {r}"),
            (_, _, Value::Number(a), _) => format!("  attempt {a}"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  +{:>6} ms  #{:<4} {kind}{node}{extra}",
            e.at_ms - start,
            e.seq
        );
    }
    let _ = writeln!(out, "nodes:");
    for (id, n) in &state.nodes {
        let took = match (n.started_ms, n.finished_ms) {
            (Some(a), Some(b)) => format!("{} ms", b - a),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "  {id:<20} {:<18} attempts {}  {took}{}",
            super::driver::status_label(n.status),
            n.attempts,
            n.error
                .as_deref()
                .map(|e| format!("  {e}"))
                .unwrap_or_default()
        );
    }
    out
}
