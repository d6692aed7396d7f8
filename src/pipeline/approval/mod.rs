//! Approval: a call that needs approval (see `trust`) is held as a plan and not run; the
//! gateway tool `fedgate__approve` decides plans and runs approved ones. An approved call
//! re-enters the whole stack from the top (`observe` in), one level deeper, under the caller's
//! identity and with exactly the frozen arguments: every step decides on it again as things
//! stand when it runs (roles, view, stage, tier, arguments, guardrails both ways and their
//! hooks, limits, idempotency, retries, the breaker), and this step lets it through because it
//! carries its plan — one path, so a step added to the stack applies to approved calls too. A
//! plan whose call is refused before it reaches the upstream (a check that no longer holds, a
//! rate limit, the breaker, the upstream down) is given back, so the caller can try again once
//! the reason is gone. Every plan event is an audit record naming the plan and who decided.

mod elicit;
mod reenter;
mod relay;
mod shared;
mod tool;

use crate::pipeline::Route;
use std::{sync::Arc, time::Duration};

use rmcp::model::{CallToolResult, ContentBlock, MetaObject, RequestStateCodec, ServerResult};
use serde_json::Value;

use super::{
    Call, CallError, CallFuture, Exposed, Held, Op, TargetKind,
    envelope::{self, summarize},
    reentry::Reentry,
    step::{CallService, Step, done},
};
use crate::{
    approval::{
        Decider, Decision, NewPlan, PendingPlan, PlanRefusal, Plans,
        events::{PlanEvent, RanError},
        record::{plan_record, sync_metrics},
        shared::PlanStore,
    },
    envelope::{META_KEY, Plan, Safety, Status},
    names::APPROVE_TOOL,
    policy::{identity::Identity, trust::Approval},
    stores::idempotency::META_KEY as IDEMPOTENCY_KEY,
    telemetry::{audit::Audit, metrics::Metrics},
    upstream::pool::Pool,
};

pub use elicit::approves;
use reenter::{current, reenter, routed, same_route, version};
pub use tool::ApproveTool;

#[derive(Debug, Clone)]
pub struct Approvals {
    pub plans: Arc<Plans>,
    /// Where an approved plan's upstream is found again (a reload may have replaced it).
    pub pool: Arc<Pool>,
    pub metrics: Arc<Metrics>,
    pub audit: Option<Audit>,
    /// Seals the `requestState` of approval questions to stateless-era callers.
    pub seal: Arc<RequestStateCodec>,
    /// How long a handshake-era caller's human may take to answer an approval question.
    pub input_wait: Duration,
    /// The copy of plans every replica checks decisions against (`[cluster] redis`), or
    /// this replica's alone.
    pub store: crate::stores::Store<dyn PlanStore>,
    /// The stack approved calls re-enter from the top.
    pub reentry: Reentry,
}

/// An approved call on its way in, with what its answer needs.
struct Run {
    call: Call,
    plan: PendingPlan,
    approver: String,
    /// Continues an input-required round of a call already running: no new audit record.
    continuing: bool,
}

impl Step for Approvals {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        if let Some(id) = call.decided.approved() {
            return self.admit(inner, id.to_owned(), call);
        }
        match call.target.as_ref().map(|t| &t.kind) {
            Some(TargetKind::Gateway(_)) if is_approve(&call) => {
                if let Some((up, remote)) = relay::peer_plan(&self.pool, &plan_id_arg(&call)) {
                    return self.relay(inner, call, up, remote);
                }
            }
            Some(TargetKind::Upstream(_)) if call.decided.approval().is_none() => {
                return self.pass(inner, call);
            }
            _ => {}
        }
        let (this, mut inner) = (self.clone(), inner.clone());
        // A stateless-era caller's retry that answers an approval question.
        if let Some((id, approved)) = elicit::answer(&self.seal, &call) {
            return Box::pin(async move {
                let run = shared::around(&this.store, &this.plans, &id, || {
                    this.answered(call, &id, approved)
                })
                .await?;
                this.execute(run).await
            });
        }
        match call.target.as_ref().map(|t| &t.kind) {
            Some(TargetKind::Gateway(_)) if is_approve(&call) => Box::pin(async move {
                let id = plan_id_arg(&call);
                match shared::around(&this.store, &this.plans, &id, || this.approve(call)).await? {
                    Next::Answer(r) => Ok(ServerResult::CallToolResult(r)),
                    Next::Run(run) => this.execute(*run).await,
                    Next::Settle(f) => settled(f, id).await,
                }
            }),
            Some(TargetKind::Upstream(route)) if call.decided.approval().is_some() => {
                let held = match self.hold(route, &call) {
                    Ok(h) => h,
                    Err(e) => return done(Err(e)),
                };
                Box::pin(async move {
                    shared::publish(&this.store, &this.plans, &held.id).await?;
                    this.after_hold(call, held).await
                })
            }
            _ => inner.call(call),
        }
    }
}

impl Approvals {
    /// An approved call that re-entered the stack: through, if it still routes to the upstream
    /// tool its plan was made for (a reload may have given the name to another).
    fn admit<S: CallService>(&self, inner: &mut S, id: String, call: Call) -> CallFuture {
        match self.plans.get(&id) {
            Some(plan) if same_route(&call, &plan) => self.pass(inner, call),
            _ => done(Err(CallError::Plan(PlanRefusal::Invalidated))),
        }
    }

    /// A held call: the caller gets the plan, or its human is asked.
    fn after_hold(&self, call: Call, held: Held) -> CallFuture {
        let caps = call
            .downstream
            .as_ref()
            .and_then(|d| d.capabilities.as_ref());
        // Plans with approvers are decided by someone else: the caller gets the plan.
        if call.decided.approval() != Some(Approval::Elicit)
            || !held.approvers.is_empty()
            || !elicit::can_elicit(caps)
        {
            return done(Err(CallError::ApprovalRequired {
                plan: Box::new(held),
            }));
        }
        if call.downstream.as_ref().is_some_and(|d| d.modern) {
            return done(
                elicit::input_required(&self.seal, &call, &held)
                    .map(ServerResult::InputRequiredResult),
            );
        }
        let (this, wait) = (self.clone(), self.input_wait);
        Box::pin(async move {
            // No answer (timeout, a client error): the plan stays, to approve later.
            let Ok(approved) = elicit::ask(&call, &held, wait).await else {
                return Err(CallError::ApprovalRequired {
                    plan: Box::new(held),
                });
            };
            let run = shared::around(&this.store, &this.plans, &held.id, || {
                this.answered(call, &held.id, approved)
            })
            .await?;
            this.execute(run).await
        })
    }
}

/// Who a plan belongs to: the caller's identity, and for a peer gateway also the caller it
/// claims to act for — each caller behind a peer has its own plans, and a peer cannot decide
/// one for another caller.
pub fn plan_caller(identity: &Identity, claim: Option<&str>) -> String {
    match claim {
        Some(claim) if identity.access.is_peer() => format!("{} for {claim}", identity.key()),
        _ => identity.key(),
    }
}

/// Whom a plan of this call belongs to (see [`plan_caller`]).
fn caller_of(call: &Call) -> String {
    plan_caller(
        &call.identity,
        crate::federation::hops::caller_claim(&call.meta).as_deref(),
    )
}

/// The `plan_id` argument of a `fedgate__approve` call ("" when missing: an unknown plan).
fn plan_id_arg(call: &Call) -> String {
    match &call.op {
        Op::CallTool(p) => p
            .arguments
            .as_ref()
            .and_then(|a| a.get("plan_id"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

/// What `fedgate__approve` leads to.
enum Next {
    /// A decision was recorded; nothing runs now.
    Answer(CallToolResult),
    /// The approved call, ready to re-enter the stack.
    Run(Box<Run>),
    /// The plan already ran for a flow run that waited on it (someone else approved it): the
    /// run's next result, once it has one.
    Settle(FollowUpFuture),
}

use crate::approval::events::AnswerFuture as FollowUpFuture;

/// The answer to a `fedgate__approve` whose plan a flow run already ran: the run's next result.
async fn settled(fut: FollowUpFuture, id: String) -> Result<ServerResult, CallError> {
    match fut.await {
        Some(r) => Ok(ServerResult::CallToolResult(r)),
        None => Err(CallError::Plan(PlanRefusal::Decided {
            state: "run",
            by: format!("the flow run that waited on plan {id}"),
        })),
    }
}

/// The `decision` argument of a `fedgate__approve` call (approve unless it says `deny`).
fn decision_arg(call: &Call) -> Decision {
    match &call.op {
        Op::CallTool(p)
            if p.arguments
                .as_ref()
                .and_then(|a| a.get("decision"))
                .and_then(Value::as_str)
                == Some("deny") =>
        {
            Decision::Deny
        }
        _ => Decision::Approve,
    }
}

fn is_approve(call: &Call) -> bool {
    matches!(&call.op, Op::CallTool(p) if p.name == APPROVE_TOOL)
}

/// An approved call's failure, for whoever waits on its plan.
fn ran_error(e: &CallError, correlation_id: &str) -> RanError {
    RanError {
        message: e.wire_message(),
        retry: e.describe().retry(),
        plan: Some(envelope::plan_for(e, correlation_id).to_value()),
    }
}

/// Outcomes that mean the approved call never reached the upstream: its plan is given back.
fn not_started(e: &CallError) -> bool {
    e.describe().reached == crate::error::Reached::No
}

impl Approvals {
    /// Makes the plan of a call that needs approval; held as an `ok` plan that was not run,
    /// or put to the caller's human as a question.
    fn hold(&self, route: &Route, call: &Call) -> Result<Held, CallError> {
        let up = &route.upstream;
        let Op::CallTool(p) = &call.op else {
            return Err(CallError::Internal {
                detail: "only tool calls are held for approval".into(),
            });
        };
        let spec = &route.spec;
        let policy = spec.tool_policy(&p.name);
        let tool = match call.target.as_ref().map(|t| &t.exposed) {
            Some(Exposed::Tool(n)) => n.clone(),
            _ => p.name.to_string(),
        };
        let def = route.lists.tool(&p.name);
        let arguments = p.arguments.clone().unwrap_or_default();
        let schema = def.map(|t| Value::Object((*t.input_schema).clone()));
        let summary = summarize(&arguments, schema.as_ref());
        let settings = policy.settings;
        let safety = Safety {
            writes_code: settings.is_some_and(|s| s.writes_code),
            touches_files: settings
                .map(|s| s.touches_files.clone())
                .unwrap_or_default(),
            destructive: def
                .and_then(|t| t.annotations.as_ref())
                .and_then(|a| a.destructive_hint),
        };
        let plan = self
            .plans
            .create(NewPlan {
                caller: caller_of(call),
                upstream: up.name().to_owned(),
                tool: tool.clone(),
                upstream_tool: p.name.to_string(),
                arguments,
                summary: summary.clone(),
                idempotency_key: call.meta.get(IDEMPOTENCY_KEY).cloned(),
                policy_version: version(route, &p.name),
                approvers: policy.approvers.to_vec(),
                safety,
            })
            .map_err(CallError::Plan)?;
        self.refresh_metrics();
        self.audit(call, &plan, "plan_held", None);
        Ok(Held {
            id: plan.id,
            tool,
            upstream: up.name().to_owned(),
            summary,
            safety: plan.safety,
            approvers: plan.approvers,
            expires_ms: plan.expires_ms,
        })
    }

    /// The caller's human answered the approval question of plan `id`: the frozen call, ready
    /// to run, or the denial.
    fn answered(&self, call: Call, id: &str, approved: bool) -> Result<Run, CallError> {
        let me = caller_of(&call);
        if !approved {
            let plan = self.plans.cancel(id, &me).map_err(CallError::Plan)?;
            self.count("denied");
            self.refresh_metrics();
            self.audit(&call, &plan, "plan_denied", Some(me.clone()));
            return Err(CallError::Plan(PlanRefusal::Denied { by: me }));
        }
        let plan = self.take(id, &me)?;
        self.count("approved");
        self.audit(&call, &plan, "plan_approved", Some(me.clone()));
        self.run_of(call, plan, me, None)
    }

    /// `fedgate__approve {plan_id, decision}`: a reviewer's decision, the caller withdrawing
    /// its plan, the caller running an approved one, or the next round of one that runs.
    fn approve(&self, call: Call) -> Result<Next, CallError> {
        let Op::CallTool(p) = &call.op else {
            return Err(CallError::Internal {
                detail: "fedgate__approve is a tool".into(),
            });
        };
        let id = plan_id_arg(&call);
        let decision = decision_arg(&call);
        let me = caller_of(&call);
        // The approved call asked for input (stateless era): this retry continues it.
        if p.request_state.is_some() || p.input_responses.is_some() {
            let round = (p.request_state.clone(), p.input_responses.clone());
            let plan = self.plans.running(&id, &me).map_err(CallError::Plan)?;
            return Ok(Next::Run(Box::new(self.run_of(
                call,
                plan,
                me,
                Some(round),
            )?)));
        }
        if self.plans.is_review(&id, &me) {
            let access = call.identity.access.clone();
            let holds = move |roles: &[String]| access.has_any_role(roles);
            let plan = self
                .plans
                .decide(&id, &me, Decider::Reviewer(&holds), decision)
                .map_err(CallError::Plan)?;
            return Ok(Next::Answer(self.decided(&call, &plan, decision, &me)));
        }
        if decision == Decision::Deny {
            let plan = self.plans.cancel(&id, &me).map_err(CallError::Plan)?;
            return Ok(Next::Answer(self.decided(&call, &plan, decision, &me)));
        }
        let plan = match self.take(&id, &me) {
            Ok(p) => p,
            // Someone else approved it and the flow run waiting on it ran it: the caller gets
            // what the run came to, not a refusal that would make it ask again.
            Err(CallError::Plan(PlanRefusal::Used)) => {
                return match self.plans.events.settled(&id) {
                    Some(f) => Ok(Next::Settle(f)),
                    None => Err(CallError::Plan(PlanRefusal::Used)),
                };
            }
            Err(e) => return Err(e),
        };
        // Counted once: an operator's approval of a plan without approvers counted already.
        if plan.approvers.is_empty() && plan.approved_by.as_deref() == Some(me.as_str()) {
            self.count("approved");
        }
        let approver = plan.approved_by.clone().unwrap_or(me);
        Ok(Next::Run(Box::new(
            self.run_of(call, plan, approver, None)?,
        )))
    }

    /// The frozen call of `plan`, ready to re-enter; `round` continues an input-required round.
    fn run_of(
        &self,
        call: Call,
        plan: PendingPlan,
        approver: String,
        round: Option<(Option<String>, Option<rmcp::model::InputResponses>)>,
    ) -> Result<Run, CallError> {
        if current(&self.pool, &plan).is_none() {
            return Err(CallError::Plan(PlanRefusal::Invalidated));
        }
        let continuing = round.is_some();
        let mut call = reenter(call, &plan);
        if let (Some((state, responses)), Op::CallTool(p)) = (round, &mut call.op) {
            p.request_state = state;
            p.input_responses = responses;
        }
        Ok(Run {
            call,
            plan,
            approver,
            continuing,
        })
    }

    /// Runs an approved call through the whole stack (see the module doc). Its answer gets
    /// the envelope of its own tool; a refusal before it reached the upstream gives the plan
    /// back.
    fn execute(&self, run: Run) -> CallFuture {
        let wrapping = match current(&self.pool, &run.plan) {
            Some(up) => {
                let (resolved, target) = routed(&run.call, &run.plan, up);
                envelope::wrapping(&resolved, Some(&target), Default::default())
            }
            None => envelope::wrapping(&run.call, None, Default::default()),
        };
        let audit_call = run.call.clone();
        let fut = self.reentry.call(run.call.clone());
        let this = self.clone();
        let started = tokio::time::Instant::now();
        Box::pin(async move {
            let result = fut.await;
            match &result {
                Err(e) if !run.continuing && not_started(e) => {
                    this.plans.restore(&run.plan.id);
                    shared::restored(&this.store, &this.plans, &run.plan.id).await;
                }
                _ if !run.continuing => {
                    // The executed call's own record: its outcome and latency.
                    if let Some(audit) = &this.audit {
                        let mut r = plan_record(
                            &audit_call.identity.name,
                            audit_call.identity.kind.as_str(),
                            &audit_call.correlation_id,
                            &run.plan,
                            "plan_executed",
                            Some(run.approver),
                        );
                        r.outcome = match &result {
                            Ok(ServerResult::CallToolResult(t)) if t.is_error == Some(true) => {
                                "is_error"
                            }
                            Ok(ServerResult::InputRequiredResult(_)) => "input_required",
                            Ok(_) => "ok",
                            Err(e) => e.code(),
                        };
                        r.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
                        audit.record(r);
                    }
                }
                _ => {}
            }
            if !run.continuing && !matches!(&result, Err(e) if not_started(e)) {
                // Whoever waits on the plan (a parked flow run) may answer instead.
                let follow_up = this.plans.events.follow_up(&run.plan.id);
                this.plans.events.send(PlanEvent::Ran {
                    id: run.plan.id.clone(),
                    result: match &result {
                        Ok(r) => Ok(serde_json::to_value(r).unwrap_or(Value::Null)),
                        Err(e) => Err(ran_error(e, &audit_call.correlation_id)),
                    },
                });
                if let Some(f) = follow_up
                    && let Some(answer) = f.await
                {
                    return Ok(ServerResult::CallToolResult(answer));
                }
            }
            match result {
                Ok(r) => envelope::wrap(Ok(r), &wrapping, &this.metrics),
                // To its caller the tool is known (they hold its plan): say why it did not run.
                Err(CallError::NotAuthorized { .. }) => {
                    Err(CallError::Plan(PlanRefusal::NoLongerAllowed {
                        tool: run.plan.tool.clone(),
                    }))
                }
                Err(e) => Err(e),
            }
        })
    }

    /// Uses up the caller's plan if its policy is still the one in force.
    fn take(&self, id: &str, me: &str) -> Result<PendingPlan, CallError> {
        let pool = self.pool.clone();
        let taken = self.plans.take(id, me, |plan| {
            current(&pool, plan).is_some_and(|up| {
                version(&Route::of(up), &plan.upstream_tool) == plan.policy_version
            })
        });
        if taken.as_ref().err() == Some(&PlanRefusal::Invalidated) {
            self.count("invalidated");
        }
        self.refresh_metrics();
        taken.map_err(CallError::Plan)
    }

    fn count(&self, outcome: &str) {
        self.metrics.plans_ended(outcome, 1);
    }

    /// The answer to a recorded decision, and its metric and audit record.
    fn decided(&self, call: &Call, plan: &PendingPlan, d: Decision, by: &str) -> CallToolResult {
        let (outcome, text) = match d {
            Decision::Approve => (
                "approved",
                format!(
                    "Plan {} approved. A flow run waiting on it goes on by itself; otherwise its caller runs it by calling fedgate__approve with this plan_id.",
                    plan.id
                ),
            ),
            Decision::Deny => (
                "denied",
                format!("Plan {} denied; it will not run.", plan.id),
            ),
        };
        self.count(outcome);
        self.refresh_metrics();
        let decision = match d {
            Decision::Approve => "plan_approved",
            Decision::Deny => "plan_denied",
        };
        self.audit(call, plan, decision, Some(by.to_owned()));
        let envelope = Plan::new(Status::Ok, &call.correlation_id)
            .instruction(text.clone())
            .to_value();
        let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
        r.structured_content = Some(envelope.clone());
        let mut meta = MetaObject::new();
        meta.0.insert(META_KEY.into(), envelope);
        r.meta = Some(meta);
        r
    }

    /// The pending-plans gauge, and the plans that expired (counted and audited).
    fn refresh_metrics(&self) {
        sync_metrics(&self.plans, &self.metrics, self.audit.as_ref());
    }

    fn audit(
        &self,
        call: &Call,
        plan: &PendingPlan,
        decision: &'static str,
        approver: Option<String>,
    ) {
        if let Some(audit) = &self.audit {
            audit.record(plan_record(
                &call.identity.name,
                call.identity.kind.as_str(),
                &call.correlation_id,
                plan,
                decision,
                approver,
            ));
        }
    }
}
