//! Approval inside flows. A node whose call needs approval gets the usual plan from the
//! approval step; the run parks (AWAITING_APPROVAL) and its caller hears of the plan — as the
//! same `ok` plan a held direct call gets (synchronous callers) or an `input_required` task.
//! The plan is decided as any other: the caller's `fedgate__approve` (or the task's
//! `tasks/update`) runs the frozen call through the stack; when someone else approves it (a
//! reviewer, the operator) the run itself runs it as its caller. Either way its answer
//! becomes the node's outcome, and what `fedgate__approve` answers is the flow's next result:
//! its end, or the next plan it parks on.

use crate::flows::error::RunError;
use std::sync::{Arc, Weak};

use rmcp::model::CallToolResult;
use serde_json::{Map, Value, json};

use super::{Engine, driver::Msg, events::RunState, report};
use crate::{
    approval::events::{AnswerFuture, FollowUp, PlanEvent, RanError},
    envelope::{Action, META_KEY, Plan, PlanError, Status},
    names::APPROVE_TOOL,
    pipeline::{Call, CallError, Op, TypedStack},
    policy::identity::Identity,
};

/// Decided plans remembered for late `fedgate__approve` calls; past it they are forgotten.
const MAX_RESOLVED: usize = 10_000;

/// How often parked runs look at the shared copies of their plans (`[cluster] redis`): a
/// decision made on another replica reaches the run that waits within this.
const SHARED_LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Engine {
    /// A node of `run_id` waits on plan `plan_id`.
    pub(crate) fn park(&self, plan_id: String, run_id: &str, node: &str) {
        self.parked
            .insert(plan_id, (run_id.to_owned(), node.to_owned()));
    }

    /// Routes what becomes of plans to the runs parked on them, and answers
    /// `fedgate__approve` of those plans with the flow's next result.
    pub(super) fn watch_plans(self: &Arc<Self>) {
        self.plans
            .events
            .set_follow_up(Arc::new(FollowUps(Arc::downgrade(self))));
        let mut events = self.plans.events.subscribe();
        let engine = Arc::downgrade(self);
        let stop = self.stop.clone();
        let mut look = tokio::time::interval(SHARED_LOOK_EVERY);
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    e = events.recv() => e,
                    _ = look.tick() => {
                        if let Some(engine) = engine.upgrade() {
                            engine.look_at_shared_plans().await;
                        }
                        continue;
                    }
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
                // Approved by someone else: the run runs it (and stays parked until it ran).
                if let PlanEvent::Approved { id, .. } = &event {
                    if let Some(entry) = engine.parked.get(id) {
                        let (run, node) = entry.value().clone();
                        drop(entry);
                        if let Some(live) = engine.live.get(&run) {
                            let _ = live.mail.send(Msg::Approved {
                                node,
                                plan_id: id.clone(),
                            });
                        }
                    }
                    continue;
                }
                let Some((plan_id, (run, node))) = engine.parked.remove(event.id()) else {
                    continue;
                };
                if engine.resolved.len() >= MAX_RESOLVED {
                    engine.resolved.clear();
                }
                engine.resolved.insert(plan_id, run.clone());
                if let Some(live) = engine.live.get(&run) {
                    let _ = live.mail.send(Msg::Approval { node, event });
                }
            }
        });
    }

    /// Decisions made on other replicas on the plans runs here wait on: the shared copy is
    /// imported, and an approval or denial reaches the run as if it had been made here.
    async fn look_at_shared_plans(&self) {
        let Some(shared) = self.shared_plans() else {
            return;
        };
        let ids: Vec<String> = self.parked.iter().map(|e| e.key().clone()).collect();
        for id in ids {
            if shared.import(&self.plans, &id).await.is_err() {
                return;
            }
            let Some(plan) = self.plans.get(&id) else {
                continue;
            };
            let event = match plan.state {
                crate::approval::PlanState::Approved(by) => PlanEvent::Approved { id, by },
                crate::approval::PlanState::Done(crate::approval::Finished::Denied { by }) => {
                    PlanEvent::Denied { id, by }
                }
                _ => continue,
            };
            self.plans.events.send(event);
        }
    }

    /// Runs plan `plan_id` of a parked node, approved by someone else, as the run's caller:
    /// `fedgate__approve` through the stack, so authorization, limits and the audit log apply
    /// as to the caller's own approval. Should it not get to run, the plan is withdrawn and
    /// the node fails with the reason (the write never runs outside its run).
    pub(super) fn run_approved(
        self: &Arc<Self>,
        run_id: &str,
        node: String,
        plan_id: String,
        identity: Identity,
        depth: u8,
        hop: Map<String, Value>,
    ) {
        let Some(stack) = self.stack() else {
            return;
        };
        // Once: the same approval may be heard twice (here, and from the shared store).
        if !self.approving.insert(plan_id.clone()) {
            return;
        }
        let (engine, run_id) = (self.clone(), run_id.to_owned());
        tokio::spawn(async move {
            let claim = hop
                .get(crate::federation::hops::CALLER_KEY)
                .and_then(Value::as_str);
            let caller = crate::pipeline::plan_caller(&identity, claim);
            let outcome = decide(stack, identity, depth, hop.clone(), &plan_id, true).await;
            engine.approving.remove(&plan_id);
            let Err(error) = outcome else { return };
            if engine.parked.remove(&plan_id).is_none() {
                return;
            }
            tracing::warn!(run = %run_id, node = %node, plan = %plan_id, "approved plan did not run: {error}");
            let _ = engine.plans.cancel(&plan_id, &caller);
            if let Some(live) = engine.live.get(&run_id) {
                let _ = live.mail.send(Msg::Approval {
                    node,
                    event: PlanEvent::Ran {
                        id: plan_id,
                        result: Err(RanError::plain(format!(
                            "the approved call did not run: {error}"
                        ))),
                    },
                });
            }
        });
    }

    /// Events the run has recorded, as of when its scheduler last waited.
    pub fn quiet_seq(&self, run_id: &str) -> u64 {
        self.live.get(run_id).map_or(0, |l| l.quiet.borrow().seq)
    }

    /// Waits until the run has come to rest parked (with more than `after` events) or has
    /// stopped being driven; returns its state and whether it is parked.
    pub async fn settle(&self, run_id: &str, after: u64) -> Result<(RunState, bool), RunError> {
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

/// Approves (or denies) plan `plan_id` as `identity`: `fedgate__approve` through the stack, one
/// level deeper than the call it is made for, so the decision is authorized, audited and runs
/// the frozen call. Its error when the decision was refused or the call never reached the
/// upstream (what the approved call itself came to reaches its waiter as a plan event).
pub(crate) async fn decide(
    stack: TypedStack,
    identity: Identity,
    depth: u8,
    hop: Map<String, Value>,
    plan_id: &str,
    approve: bool,
) -> Result<(), CallError> {
    use tower::ServiceExt;
    let mut args = rmcp::model::JsonObject::new();
    args.insert("plan_id".into(), Value::String(plan_id.to_owned()));
    args.insert(
        "decision".into(),
        Value::String(if approve { "approve" } else { "deny" }.into()),
    );
    let mut call = Call::without_session(
        Op::CallTool(rmcp::model::CallToolRequestParams::new(APPROVE_TOOL).with_arguments(args)),
        identity,
        depth.saturating_add(1),
    );
    // The run's federation `_meta`: a plan made for a peer's caller is decided as that caller.
    for (k, v) in hop {
        call.meta.insert(k, v);
    }
    match stack.oneshot(call).await {
        Err(e @ CallError::Plan(_)) => Err(e),
        Err(e) if e.describe().reached == crate::error::Reached::No => Err(e),
        _ => Ok(()),
    }
}

/// `fedgate__approve` of a parked node's plan answers with the flow's next result.
#[derive(Debug)]
struct FollowUps(Weak<Engine>);

impl FollowUp for FollowUps {
    fn settled(&self, plan_id: &str) -> Option<AnswerFuture> {
        let engine = self.0.upgrade()?;
        let run_id = match engine.resolved.get(plan_id) {
            Some(r) => r.value().clone(),
            None => engine.parked.get(plan_id)?.value().0.clone(),
        };
        let plan_id = plan_id.to_owned();
        Some(Box::pin(async move {
            // Until no node waits on this plan any more: the run has its next result.
            let mut after = 0;
            loop {
                let (state, _) = engine.settle(&run_id, after).await.ok()?;
                use super::events::NodeStatus;
                let waits = state.nodes.values().any(|n| {
                    n.status == NodeStatus::AwaitingApproval
                        && n.plan.as_ref().and_then(super::node::plan_id).as_deref()
                            == Some(plan_id.as_str())
                });
                // A node past this plan but the run still going (the next node not started
                // yet) is no result: wait until it ends or rests on another decision.
                let rests = state.nodes.values().any(|n| {
                    matches!(n.status, NodeStatus::AwaitingApproval | NodeStatus::Blocked)
                });
                if state.finished.is_some() || (!waits && rests) {
                    let (record, _) = engine.load(&run_id).await.ok()?;
                    let flow = engine.flow(&record.flow)?;
                    return Some(answer(
                        &flow,
                        &run_id,
                        &state,
                        &crate::pipeline::correlation_id(),
                    ));
                }
                if !engine.live.contains_key(&run_id) {
                    return None;
                }
                after = state.seq;
            }
        }))
    }

    fn after(&self, plan_id: &str) -> Option<AnswerFuture> {
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

/// A run's answer where it stands: its result when it has finished; while a node waits for
/// approval, the same `ok` plan a held direct call gets (not run yet, `confirm: true`, the
/// held call's safety and arguments); else a `blocked` plan for the operator's decision.
pub fn answer(
    flow: &crate::config::flows::FlowDef,
    run_id: &str,
    state: &RunState,
    correlation_id: &str,
) -> CallToolResult {
    if state.finished.is_some() {
        return report::result(flow, run_id, state, correlation_id);
    }
    let plan = parked(flow, run_id, state, correlation_id);
    let value = plan.to_value();
    let text = rmcp::model::ContentBlock::text(value.to_string());
    // Not a failure when it waits for approval; a tool with an output schema has no output to
    // give yet, and clients accept that only from an error result (its plan still says `ok`).
    let waits_for_approval = plan.status == Status::Ok;
    let mut r = if waits_for_approval && flow.output_schema.is_none() {
        CallToolResult::success(vec![text])
    } else {
        CallToolResult::error(vec![text])
    };
    if flow.output_schema.is_none() {
        r.structured_content = Some(value.clone());
    }
    let mut meta = rmcp::model::MetaObject::new();
    meta.0.insert(META_KEY.into(), value);
    meta.0.insert(report::RUN_META_KEY.into(), json!(run_id));
    r.meta = Some(meta);
    r
}

/// The plan of a parked run: approve each waiting node's plan (or an operator decides a
/// blocked node).
fn parked(
    flow: &crate::config::flows::FlowDef,
    run_id: &str,
    state: &RunState,
    correlation_id: &str,
) -> Plan {
    let mut plan = report::plan(flow, run_id, state, correlation_id);
    plan.status = Status::Blocked;
    plan.errors.clear();
    let mut waiting = Vec::new();
    let mut safety = crate::envelope::Safety::default();
    for (node, n) in &state.nodes {
        if n.status == super::events::NodeStatus::AwaitingApproval
            && let Some(held) = n.plan.as_ref()
            && let Some(id) = super::node::plan_id(held)
        {
            let mut args = Map::new();
            args.insert("plan_id".into(), Value::String(id.clone()));
            let what = held["next_actions"][0]["label"]
                .as_str()
                .unwrap_or("the held call");
            let mut action = Action::call(APPROVE_TOOL, args).label(format!(
                "Approve node `{node}` of flow `{}`: {what}",
                flow.id
            ));
            action.confirm = Some(true);
            plan.next_actions.push(action);
            if let Ok(s) = serde_json::from_value::<crate::envelope::Safety>(held["safety"].clone())
            {
                safety.writes_code |= s.writes_code;
                for f in s.touches_files {
                    if !safety.touches_files.contains(&f) {
                        safety.touches_files.push(f);
                    }
                }
                safety.destructive = match (safety.destructive, s.destructive) {
                    (Some(a), Some(b)) => Some(a || b),
                    (a, b) => a.or(b),
                };
            }
            let held_text = held["instruction"]
                .as_str()
                .unwrap_or_default()
                .trim_end_matches('.');
            waiting.push(format!("node `{node}` (plan {id}): {held_text}"));
        }
        if n.status == super::events::NodeStatus::Blocked
            && let Some(reason) = n
                .error
                .as_deref()
                .filter(|e| e.starts_with(super::node::CONNECT_WAIT))
        {
            plan = plan.error(
                PlanError::new(
                    "credential_required",
                    format!("node `{node}` {reason}"),
                    true,
                )
                .hint(format!(
                    "tell your user: open the link in this message and connect their account there; run {run_id} goes on by itself once they have (fedgate flows status {run_id} shows it)"
                )),
            );
        } else if n.status == super::events::NodeStatus::Blocked {
            plan = plan.error(
                PlanError::new("needs_decision", n.error.clone().unwrap_or_default(), true).hint(
                    format!(
                        "an operator decides: `fedgate flows decide {run_id} {node} rerun|skip`"
                    ),
                ),
            );
        }
    }
    if waiting.is_empty() {
        let connect = plan.errors.iter().any(|e| e.code == "credential_required");
        plan.instruction = Some(if connect {
            format!(
                "Flow `{}` (run {run_id}) waits for your user to connect an account: give them the link; the run goes on by itself once they have.",
                flow.id
            )
        } else {
            format!(
                "Flow `{}` (run {run_id}) waits for an operator's decision.",
                flow.id
            )
        });
        return plan;
    }
    plan.status = Status::Ok;
    plan.errors.clear();
    plan.affected_paths = safety.touches_files.clone();
    plan.safety = Some(safety);
    plan.instruction = Some(format!(
        "Flow `{}` (run {run_id}) is waiting, not finished: {}. Ask your user; on yes call fedgate__approve with the plan_id (on no, with decision \"deny\"). Its answer is the flow's next result.",
        flow.id,
        waiting.join("; ")
    ));
    plan
}
