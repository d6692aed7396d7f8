//! Approval: a call that needs approval (see `trust`) is held as a plan and not run; the
//! gateway tool `fedgate.approve` decides plans and runs approved ones. An approved call
//! re-enters the stack below this step, one level deeper, under the caller's identity and with
//! exactly the frozen arguments — rate limits, idempotency, retries and the breaker apply to it
//! as to any call. Every plan event is an audit record naming the plan and who decided.

use std::{sync::Arc, time::Duration};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, MetaObject, RequestStateCodec,
    ServerResult, Tool,
};
use serde_json::{Value, json};

use super::{
    Call, CallError, CallFuture, Exposed, Held, Op, OwnTool, Target, TargetKind,
    envelope::summarize,
    step::{CallService, Step, done},
    trust,
};
use crate::{
    envelope::{META_KEY, Plan, Safety, Status},
    names::APPROVE_TOOL,
    policy::{
        approval::{Approval, Decision, NewPlan, PendingPlan, PlanRefusal, Plans},
        identity::IdentityKind,
        trust::CallClass,
    },
    telemetry::{
        audit::{Audit, Record},
        metrics::Metrics,
    },
    upstream::{Upstream, pool::Pool},
};

mod elicit;

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
}

impl Step for Approvals {
    fn run<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        // A stateless-era caller's retry that answers an approval question.
        if let Some((id, approved)) = elicit::answer(&self.seal, &call) {
            return match self.answered(call, &id, approved) {
                Ok(c) => inner.call(c),
                Err(e) => done(Err(e)),
            };
        }
        match call.target.as_ref().map(|t| &t.kind) {
            Some(TargetKind::Gateway(_)) if is_approve(&call) => match self.approve(call) {
                Ok(Next::Answer(r)) => done(Ok(ServerResult::CallToolResult(r))),
                Ok(Next::Run(c)) => inner.call(*c),
                Err(e) => done(Err(e)),
            },
            Some(TargetKind::Upstream(up))
                if call.approval.is_some() && call.approved.is_none() =>
            {
                let up = up.clone();
                let held = match self.hold(&up, &call) {
                    Ok(h) => h,
                    Err(e) => return done(Err(e)),
                };
                let caps = call
                    .downstream
                    .as_ref()
                    .and_then(|d| d.capabilities.as_ref());
                if call.approval != Some(Approval::Elicit) || !elicit::can_elicit(caps) {
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
                let (this, mut inner, wait) = (self.clone(), inner.clone(), self.input_wait);
                Box::pin(async move {
                    let approved = elicit::ask(&call, &held, wait).await?;
                    let c = this.answered(call, &held.id, approved)?;
                    inner.call(c).await
                })
            }
            _ => inner.call(call),
        }
    }
}

/// What `fedgate.approve` leads to.
enum Next {
    /// A decision was recorded; nothing runs now.
    Answer(CallToolResult),
    /// The approved call, ready to re-enter the stack.
    Run(Box<Call>),
}

fn is_approve(call: &Call) -> bool {
    matches!(&call.op, Op::CallTool(p) if p.name == APPROVE_TOOL)
}

impl Approvals {
    /// Makes the plan of a call that needs approval; held as an `ok` plan that was not run,
    /// or put to the caller's human as a question.
    fn hold(&self, up: &Upstream, call: &Call) -> Result<Held, CallError> {
        let Op::CallTool(p) = &call.op else {
            return Err(CallError::Internal {
                detail: "only tool calls are held for approval".into(),
            });
        };
        let spec = up.spec();
        let policy = spec.tool_policy(&p.name);
        let tool = match call.target.as_ref().map(|t| &t.exposed) {
            Some(Exposed::Tool(n)) => n.clone(),
            _ => p.name.to_string(),
        };
        let arguments = p.arguments.clone().unwrap_or_default();
        let summary = summarize(&arguments);
        let plan = self
            .plans
            .create(NewPlan {
                caller: call.identity.key(),
                upstream: up.name().to_owned(),
                tool: tool.clone(),
                upstream_tool: p.name.to_string(),
                arguments,
                policy_version: spec.policy_version(&p.name),
                approvers: policy.approvers.to_vec(),
            })
            .map_err(CallError::Plan)?;
        self.refresh_metrics();
        let destructive = up
            .lists()
            .tool(&p.name)
            .and_then(|t| t.annotations.as_ref())
            .and_then(|a| a.destructive_hint);
        let settings = policy.settings;
        self.audit(call, &plan, "plan_held", None);
        Ok(Held {
            id: plan.id,
            tool,
            upstream: up.name().to_owned(),
            summary,
            safety: Safety {
                writes_code: settings.is_some_and(|s| s.writes_code),
                touches_files: settings
                    .map(|s| s.touches_files.clone())
                    .unwrap_or_default(),
                destructive,
            },
            approvers: plan.approvers,
            expires_ms: plan.expires_ms,
        })
    }

    /// The caller's human answered the approval question of plan `id`: the frozen call, ready
    /// to run, or the denial.
    fn answered(&self, call: Call, id: &str, approved: bool) -> Result<Call, CallError> {
        let me = call.identity.key();
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
        self.audit(&call, &plan, "plan_executed", Some(me));
        let up = current(&self.pool, &plan).ok_or(CallError::Plan(PlanRefusal::Invalidated))?;
        reenter(call, &plan, up)
    }

    /// Uses up the caller's plan if its policy is still the one in force.
    fn take(&self, id: &str, me: &str) -> Result<PendingPlan, CallError> {
        let pool = self.pool.clone();
        let taken = self.plans.take(id, me, |plan| {
            current(&pool, plan).is_some_and(|up| {
                up.spec().policy_version(&plan.upstream_tool) == plan.policy_version
            })
        });
        if taken.as_ref().err() == Some(&PlanRefusal::Invalidated) {
            self.count("invalidated");
        }
        self.refresh_metrics();
        taken.map_err(CallError::Plan)
    }

    fn count(&self, outcome: &str) {
        self.metrics.approvals.with_label_values(&[outcome]).inc();
    }

    /// `fedgate.approve {plan_id, decision}`: a reviewer's decision, the caller withdrawing
    /// its plan, or the caller running an approved one.
    fn approve(&self, call: Call) -> Result<Next, CallError> {
        let Op::CallTool(p) = &call.op else {
            return Err(CallError::Internal {
                detail: "fedgate.approve is a tool".into(),
            });
        };
        let args = p.arguments.clone().unwrap_or_default();
        let id = args
            .get("plan_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let decision = match args.get("decision").and_then(Value::as_str) {
            Some("deny") => Decision::Deny,
            _ => Decision::Approve,
        };
        let me = call.identity.key();
        if self.plans.is_review(&id, &me) {
            let access = call.identity.access.clone();
            let holds = move |roles: &[String]| access.has_any_role(roles);
            let plan = self
                .plans
                .decide(&id, &me, Some(&holds), decision)
                .map_err(CallError::Plan)?;
            return Ok(Next::Answer(self.decided(&call, &plan, decision, &me)));
        }
        if decision == Decision::Deny {
            let plan = self.plans.cancel(&id, &me).map_err(CallError::Plan)?;
            return Ok(Next::Answer(self.decided(&call, &plan, decision, &me)));
        }
        let plan = self.take(&id, &me)?;
        if plan.approvers.is_empty() {
            self.count("approved");
        }
        let up = current(&self.pool, &plan).ok_or(CallError::Plan(PlanRefusal::Invalidated))?;
        let approver = plan.approved_by.clone().unwrap_or(me);
        self.audit(&call, &plan, "plan_executed", Some(approver));
        Ok(Next::Run(Box::new(reenter(call, &plan, up)?)))
    }

    /// The answer to a recorded decision, and its metric and audit record.
    fn decided(&self, call: &Call, plan: &PendingPlan, d: Decision, by: &str) -> CallToolResult {
        let (outcome, text) = match d {
            Decision::Approve => (
                "approved",
                format!(
                    "Plan {} approved. Its caller runs it by calling fedgate.approve with this plan_id.",
                    plan.id
                ),
            ),
            Decision::Deny => (
                "denied",
                format!("Plan {} denied; it will not run.", plan.id),
            ),
        };
        self.metrics.approvals.with_label_values(&[outcome]).inc();
        self.refresh_metrics();
        self.audit(
            call,
            plan,
            if d == Decision::Approve {
                "plan_approved"
            } else {
                "plan_denied"
            },
            Some(by.to_owned()),
        );
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

/// How often plans that expired unseen are counted and audited.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

impl Approvals {
    /// Starts the task that counts and audits plans that expire while nobody asks about them;
    /// it ends with the plan store.
    pub fn start_sweeper(&self) {
        let plans = Arc::downgrade(&self.plans);
        let (metrics, audit) = (self.metrics.clone(), self.audit.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            loop {
                tick.tick().await;
                let Some(plans) = plans.upgrade() else {
                    return;
                };
                sync_metrics(&plans, &metrics, audit.as_ref());
            }
        });
    }
}

/// Brings the plan metrics up to date; plans that expired are counted and audited (decision
/// `plan_expired`, in the name of their caller). Runs after every plan event and at scrape time.
pub fn sync_metrics(plans: &Plans, metrics: &Metrics, audit: Option<&Audit>) {
    let expired = plans.take_expired();
    if !expired.is_empty() {
        metrics
            .approvals
            .with_label_values(&["expired"])
            .inc_by(expired.len() as u64);
    }
    if let Some(audit) = audit {
        for plan in &expired {
            let (kind, name) = plan.caller.split_once(':').unwrap_or(("", &plan.caller));
            audit.record(plan_record(
                name,
                IdentityKind::from_str_or_local(kind).as_str(),
                &crate::pipeline::correlation_id(),
                plan,
                "plan_expired",
                None,
            ));
        }
    }
    metrics.plans_pending.set(plans.count_pending() as i64);
}

/// The audit record of one plan event.
pub fn plan_record(
    who: &str,
    who_kind: &'static str,
    correlation_id: &str,
    plan: &PendingPlan,
    decision: &'static str,
    approver: Option<String>,
) -> Record {
    Record {
        time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        identity: who.to_owned(),
        identity_kind: who_kind,
        method: "tools/call",
        name: plan.tool.clone(),
        upstream: Some(plan.upstream.clone()),
        decision,
        reason: None,
        outcome: decision,
        latency_ms: 0.0,
        correlation_id: correlation_id.to_owned(),
        arguments_sha256: Some(plan.arguments_sha256.clone()),
        arguments: None,
        plan_id: Some(plan.id.clone()),
        approver,
    }
}

/// The plan's upstream as configured now.
fn current(pool: &Pool, plan: &PendingPlan) -> Option<Arc<Upstream>> {
    pool.upstreams()
        .iter()
        .find(|u| u.name() == plan.upstream)
        .cloned()
}

/// The approved call: the frozen tool and arguments, to the upstream as it is now, under the
/// caller's identity, one level deeper; the tier decides its class again.
fn reenter(mut call: Call, plan: &PendingPlan, up: Arc<Upstream>) -> Result<Call, CallError> {
    let mut params = CallToolRequestParams::new(plan.upstream_tool.clone());
    params.arguments = Some(plan.arguments.clone());
    call.op = Op::CallTool(params);
    let exposed = Exposed::Tool(plan.tool.clone());
    let d = trust::decide(&up, &exposed, &call.op)?;
    call.class = Some(d.class);
    call.timeout = d.timeout;
    call.retry_safe = d.retry_safe;
    call.approval = d.approval;
    call.approved = Some(plan.id.clone());
    call.depth = call.depth.saturating_add(1);
    call.target = Some(Target {
        owner: up.shared_name(),
        kind: TargetKind::Upstream(up),
        exposed,
    });
    Ok(call)
}

/// `fedgate.approve`: listed and authorized like any tool; the approval step answers it.
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
            detail: "fedgate.approve reached dispatch".into(),
        }))
    }
}
