//! Approval inside flows. A node whose call needs approval gets the usual plan from the
//! approval step; the run parks (AWAITING_APPROVAL) and its caller hears of the plan — as a
//! `blocked` envelope (synchronous callers) or an `input_required` task. The plan is decided
//! as any other: `fedgate.approve` (or the task's `tasks/update`) runs the frozen call through
//! the stack, and its answer becomes the node's outcome. What `fedgate.approve` answers is the
//! flow's next result: its end, or the next plan it parks on.

use std::sync::{Arc, Weak};

use rmcp::model::CallToolResult;
use serde_json::{Map, Value, json};

use super::{Engine, driver::Msg, events::RunState, report};
use crate::{
    envelope::{Action, META_KEY, Plan, PlanError, Status},
    names::APPROVE_TOOL,
    policy::plan_events::FollowUp,
};

impl Engine {
    /// A node of `run_id` waits on plan `plan_id`.
    pub(crate) fn park(&self, plan_id: String, run_id: &str, node: &str) {
        self.parked
            .insert(plan_id, (run_id.to_owned(), node.to_owned()));
    }

    /// Routes what becomes of plans to the runs parked on them, and answers
    /// `fedgate.approve` of those plans with the flow's next result.
    pub(super) fn watch_plans(self: &Arc<Self>) {
        self.plans
            .events
            .set_follow_up(Arc::new(FollowUps(Arc::downgrade(self))));
        let mut events = self.plans.events.subscribe();
        let engine = Arc::downgrade(self);
        let stop = self.stop.clone();
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    e = events.recv() => e,
                    _ = stop.cancelled() => return,
                };
                let event = match event {
                    Ok(e) => e,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!("flow approvals: {n} plan events missed");
                        continue;
                    }
                    Err(_) => return,
                };
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                let Some((_, (run, node))) = engine.parked.remove(event.id()) else {
                    continue;
                };
                if let Some(live) = engine.live.get(&run) {
                    let _ = live.mail.send(Msg::Approval { node, event });
                }
            }
        });
    }

    /// Events the run has recorded, as of when its scheduler last waited.
    pub fn quiet_seq(&self, run_id: &str) -> u64 {
        self.live.get(run_id).map_or(0, |l| l.quiet.borrow().seq)
    }

    /// Waits until the run has come to rest parked (with more than `after` events) or has
    /// stopped being driven; returns its state and whether it is parked.
    pub async fn settle(&self, run_id: &str, after: u64) -> Result<(RunState, bool), String> {
        loop {
            let mut ended = self.ended.subscribe();
            ended.borrow_and_update();
            let Some(mut quiet) = self.live.get(run_id).map(|l| l.quiet.clone()) else {
                let (_, events) = self.load(run_id).await?;
                return Ok((RunState::fold(&events), false));
            };
            let q = *quiet.borrow_and_update();
            if q.parked && q.seq > after {
                let (_, events) = self.load(run_id).await?;
                return Ok((RunState::fold(&events), true));
            }
            tokio::select! {
                changed = quiet.changed() => if changed.is_err() {
                    let _ = ended.changed().await;
                },
                _ = ended.changed() => {}
            }
        }
    }
}

/// `fedgate.approve` of a parked node's plan answers with the flow's next result.
#[derive(Debug)]
struct FollowUps(Weak<Engine>);

impl FollowUp for FollowUps {
    fn after(
        &self,
        plan_id: &str,
    ) -> Option<std::pin::Pin<Box<dyn std::future::Future<Output = Option<CallToolResult>> + Send>>>
    {
        let engine = self.0.upgrade()?;
        let (run_id, _) = engine.parked.get(plan_id)?.clone();
        let after = engine.quiet_seq(&run_id);
        Some(Box::pin(async move {
            let (state, _) = engine.settle(&run_id, after).await.ok()?;
            let (record, _) = engine.load(&run_id).await.ok()?;
            let flow = engine.flow(&record.flow)?;
            Some(answer(
                &flow,
                &run_id,
                &state,
                &crate::pipeline::correlation_id(),
            ))
        }))
    }
}

/// A run's answer where it stands: its result when it has finished, else a `blocked` plan.
pub fn answer(
    flow: &crate::config::flows::FlowDef,
    run_id: &str,
    state: &RunState,
    correlation_id: &str,
) -> CallToolResult {
    if state.finished.is_some() {
        return report::result(flow, run_id, state, correlation_id);
    }
    let plan = blocked(flow, run_id, state, correlation_id);
    let value = plan.to_value();
    let mut r = CallToolResult::error(vec![rmcp::model::ContentBlock::text(value.to_string())]);
    if flow.output_schema.is_none() {
        r.structured_content = Some(value.clone());
    }
    let mut meta = rmcp::model::MetaObject::new();
    meta.0.insert(META_KEY.into(), value);
    meta.0.insert(report::RUN_META_KEY.into(), json!(run_id));
    r.meta = Some(meta);
    r
}

/// The plan of a parked run: approve each waiting node's plan (or decide a blocked node).
fn blocked(
    flow: &crate::config::flows::FlowDef,
    run_id: &str,
    state: &RunState,
    correlation_id: &str,
) -> Plan {
    let mut plan = report::plan(flow, run_id, state, correlation_id);
    plan.status = Status::Blocked;
    plan.errors.clear();
    let mut waiting = Vec::new();
    for (node, n) in &state.nodes {
        if let Some(id) = n.plan.as_ref().and_then(super::node::plan_id)
            && n.status == super::events::NodeStatus::AwaitingApproval
        {
            let mut args = Map::new();
            args.insert("plan_id".into(), Value::String(id.clone()));
            plan.next_actions.push(
                Action::call(APPROVE_TOOL, args)
                    .label(format!("Approve node `{node}` of flow `{}`", flow.id)),
            );
            waiting.push(format!("`{node}` (plan {id})"));
        }
        if n.status == super::events::NodeStatus::Blocked {
            plan = plan.error(
                PlanError::new("needs_decision", n.error.clone().unwrap_or_default(), true).hint(
                    format!(
                        "an operator decides: `fedgate flows decide {run_id} {node} rerun|skip`"
                    ),
                ),
            );
        }
    }
    plan.instruction = Some(if waiting.is_empty() {
        format!(
            "Flow `{}` (run {run_id}) waits for an operator's decision.",
            flow.id
        )
    } else {
        format!(
            "Flow `{}` (run {run_id}) waits for approval of {}. Call fedgate.approve with the plan_id to run it (or decision \"deny\"); its answer is the flow's next result.",
            flow.id,
            waiting.join(", ")
        )
    });
    plan
}
