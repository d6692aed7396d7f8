//! The plan store: each plan's state and the transitions between states, under one lock.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::clock::now_ms;

/// Most plans one caller may have waiting at once.
pub const MAX_PENDING_PER_CALLER: usize = 100;

/// What a pending plan binds.
#[derive(Debug, Clone, Serialize)]
pub struct PendingPlan {
    pub id: String,
    /// The caller, as `kind:name`.
    pub caller: String,
    pub upstream: String,
    /// The name the caller used.
    pub tool: String,
    /// The upstream's own name for it.
    #[serde(skip)]
    pub upstream_tool: String,
    /// The frozen arguments; never shown (they may hold secrets), only their digest and the
    /// redacted `summary`.
    #[serde(skip)]
    pub arguments: Map<String, Value>,
    pub arguments_sha256: String,
    /// The arguments as a reviewer reads them, secrets redacted.
    pub summary: String,
    /// The held call's idempotency key, which the approved call carries.
    #[serde(skip)]
    pub idempotency_key: Option<Value>,
    pub policy_version: String,
    /// Roles whose holders decide; empty = the caller decides.
    pub approvers: Vec<String>,
    /// What the held call may do, as the plan envelope told the agent.
    pub safety: crate::envelope::Safety,
    pub created_ms: u64,
    pub expires_ms: u64,
    pub state: PlanState,
    /// Who approved it, once someone did (the caller itself, for plans without approvers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "by")]
pub enum PlanState {
    /// Waiting for a decision (the caller's own, or an approver's).
    Pending,
    /// An approver said yes; the caller's next `fedgate__approve` runs it.
    Approved(String),
    /// Finished: run, denied, expired or invalidated (kept until expiry to answer precisely).
    Done(Finished),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finished {
    Executed,
    Denied {
        by: String,
    },
    Expired,
    Invalidated,
    /// The run that waited on it was resumed (a restart, or another replica took it over) and
    /// asked again with a new plan.
    Superseded,
}

/// Why a plan cannot be run or decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanRefusal {
    #[error("no such plan (unknown id, or not yours)")]
    Unknown,
    #[error("plan already used; ask again by calling the tool")]
    Used,
    #[error("plan expired; call the tool again for a new one")]
    Expired,
    #[error("plan denied by {by}")]
    Denied { by: String },
    #[error("the policy of this tool changed since the plan was made; call the tool again")]
    Invalidated,
    #[error("waiting for approval by role {}", roles.join(" or "))]
    Waiting { roles: Vec<String> },
    #[error("only an identity with role {} may decide this plan, and not its own caller", roles.join(" or "))]
    NotApprover { roles: Vec<String> },
    #[error("too many plans waiting for approval; decide or let some expire first")]
    Full,
    #[error(
        "the plan was changed on another replica at the same time; call fedgate__approve again"
    )]
    Changed,
    #[error("you have {0} plans waiting for approval; decide or withdraw some first")]
    TooManyOfYours(usize),
    #[error("plan already {state} by {by}; it runs once, for its caller")]
    Decided { state: &'static str, by: String },
    #[error(
        "the operator may only deny this plan ([admin] approve_plans = false): its caller approves it with fedgate__approve"
    )]
    OperatorMayOnlyDeny,
    #[error(
        "superseded: the flow run that waited on this plan was resumed and asked again with a new plan; decide that one (GET /admin/plans, fedgate plans list)"
    )]
    Superseded,
    #[error("the caller's roles no longer allow `{tool}`: the approved plan was not run")]
    NoLongerAllowed { tool: String },
}

impl PlanRefusal {
    pub fn code(&self) -> &'static str {
        match self {
            PlanRefusal::Unknown => "plan_unknown",
            PlanRefusal::Used => "plan_used",
            PlanRefusal::Expired => "plan_expired",
            PlanRefusal::Denied { .. } => "plan_denied",
            PlanRefusal::Invalidated => "plan_invalidated",
            PlanRefusal::Waiting { .. } => "awaiting_approval",
            PlanRefusal::NotApprover { .. } => "not_approver",
            PlanRefusal::Full | PlanRefusal::TooManyOfYours(_) => "too_many_plans",
            PlanRefusal::Changed => "plan_changed",
            PlanRefusal::Decided { .. } => "plan_decided",
            PlanRefusal::Superseded => "plan_superseded",
            PlanRefusal::OperatorMayOnlyDeny => "not_approver",
            PlanRefusal::NoLongerAllowed { .. } => "plan_not_allowed",
        }
    }

    /// A refusal that says the plan exists but cannot take this decision now (HTTP 409), as
    /// opposed to a plan this asker cannot see (404).
    pub fn is_conflict(&self) -> bool {
        !matches!(self, PlanRefusal::Unknown)
    }
}

impl PendingPlan {
    /// Where the plan is in its life: `pending`, `approved`, `ran`, `denied`, `expired`,
    /// `invalidated`.
    pub fn state_label(&self) -> &'static str {
        match &self.state {
            PlanState::Pending => "pending",
            PlanState::Approved(_) => "approved",
            PlanState::Done(Finished::Executed) => "ran",
            PlanState::Done(Finished::Denied { .. }) => "denied",
            PlanState::Done(Finished::Expired) => "expired",
            PlanState::Done(Finished::Invalidated) => "invalidated",
            PlanState::Done(Finished::Superseded) => "superseded",
        }
    }
}

/// Whether the deciding identity holds one of the given roles.
pub type HoldsRole<'a> = dyn Fn(&[String]) -> bool + 'a;

/// Who decides a plan through [`Plans::decide`].
#[derive(Clone, Copy)]
pub enum Decider<'a> {
    /// An identity holding one of the plan's approver roles (never the plan's own caller).
    Reviewer(&'a HoldsRole<'a>),
    /// The operator (admin API, console, `fedgate plans`). `approve_any`: it may approve plans
    /// without approver roles too; `own` is its own caller key (plans of runs it started are
    /// its own to approve either way).
    Operator { approve_any: bool, own: &'a str },
}

/// A decision on a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Deny,
}

/// What `create` needs.
#[derive(Debug, Clone)]
pub struct NewPlan {
    pub caller: String,
    pub upstream: String,
    pub tool: String,
    pub upstream_tool: String,
    pub arguments: Map<String, Value>,
    pub summary: String,
    pub idempotency_key: Option<Value>,
    pub policy_version: String,
    pub approvers: Vec<String>,
    pub safety: crate::envelope::Safety,
}

/// Pending plans, in memory (one replica; shared stores are a later issue).
#[derive(Debug)]
pub struct Plans {
    ttl_ms: u64,
    max_pending: usize,
    plans: Mutex<HashMap<String, PendingPlan>>,
    /// Plans that expired since [`Plans::take_expired`] last asked (for metrics and audit).
    expired: Mutex<Vec<PendingPlan>>,
    /// What became of plans, for those waiting on one.
    pub events: super::events::PlanEvents,
}

impl Plans {
    pub fn new(ttl_ms: u64, max_pending: usize) -> Self {
        Self {
            ttl_ms,
            max_pending,
            plans: Mutex::new(HashMap::new()),
            expired: Mutex::new(Vec::new()),
            events: Default::default(),
        }
    }

    /// The plans that expired since the last call (for a counter and the audit log); expires
    /// what is due first.
    pub fn take_expired(&self) -> Vec<PendingPlan> {
        {
            let mut plans = self.plans.lock();
            let due = sweep(&mut plans, now_ms());
            self.note_expired(due);
        }
        std::mem::take(&mut *self.expired.lock())
    }

    fn note_expired(&self, plans: Vec<PendingPlan>) {
        for p in &plans {
            self.events
                .send(super::events::PlanEvent::Expired { id: p.id.clone() });
        }
        if !plans.is_empty() {
            self.expired.lock().extend(plans);
        }
    }

    pub fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }

    /// Stores a new plan; its id is 128 random bits.
    pub fn create(&self, new: NewPlan) -> Result<PendingPlan, PlanRefusal> {
        let now = now_ms();
        let mut plans = self.plans.lock();
        self.note_expired(sweep(&mut plans, now));
        let waiting = || {
            plans
                .values()
                .filter(|p| !matches!(p.state, PlanState::Done(_)))
        };
        if waiting().count() >= self.max_pending {
            return Err(PlanRefusal::Full);
        }
        // One caller cannot fill the store for everyone.
        let mine = waiting().filter(|p| p.caller == new.caller).count();
        if mine >= MAX_PENDING_PER_CALLER {
            return Err(PlanRefusal::TooManyOfYours(mine));
        }
        // Finished plans are only kept to answer precisely; drop them first when full.
        if plans.len() >= self.max_pending.saturating_mul(2) {
            plans.retain(|_, p| !matches!(p.state, PlanState::Done(_)));
        }
        let plan = PendingPlan {
            id: format!("plan_{:032x}", rand::random::<u128>()),
            arguments_sha256: digest(&Value::Object(new.arguments.clone())),
            caller: new.caller,
            upstream: new.upstream,
            tool: new.tool,
            upstream_tool: new.upstream_tool,
            arguments: new.arguments,
            summary: new.summary,
            idempotency_key: new.idempotency_key,
            policy_version: new.policy_version,
            approvers: new.approvers,
            safety: new.safety,
            created_ms: now,
            expires_ms: now.saturating_add(self.ttl_ms),
            state: PlanState::Pending,
            approved_by: None,
        };
        plans.insert(plan.id.clone(), plan.clone());
        Ok(plan)
    }

    /// The caller asks to run its plan. `current` says whether the plan's policy version is
    /// still the one in force. On success the plan is used up and returned.
    pub fn take(
        &self,
        id: &str,
        caller: &str,
        current: impl FnOnce(&PendingPlan) -> bool,
    ) -> Result<PendingPlan, PlanRefusal> {
        let now = now_ms();
        let mut plans = self.plans.lock();
        let plan = self.live(&mut plans, id, now, |p| p.caller == caller)?;
        if let PlanState::Pending = plan.state
            && !plan.approvers.is_empty()
        {
            return Err(PlanRefusal::Waiting {
                roles: plan.approvers.clone(),
            });
        }
        if !current(plan) {
            plan.state = PlanState::Done(Finished::Invalidated);
            return Err(PlanRefusal::Invalidated);
        }
        plan.approved_by.get_or_insert_with(|| caller.to_owned());
        plan.state = PlanState::Done(Finished::Executed);
        Ok(plan.clone())
    }

    /// A plan its caller is running, for a retry that continues it (an input-required round
    /// of the approved call).
    pub fn running(&self, id: &str, caller: &str) -> Result<PendingPlan, PlanRefusal> {
        let plans = self.plans.lock();
        match plans.get(id).filter(|p| p.caller == caller) {
            Some(p) if p.state == PlanState::Done(Finished::Executed) => Ok(p.clone()),
            Some(_) => Err(PlanRefusal::Used),
            None => Err(PlanRefusal::Unknown),
        }
    }

    /// Gives a plan back after its approved call was refused before it reached the upstream
    /// (rate limit, breaker, upstream down): the caller may try again while it is valid.
    pub fn restore(&self, id: &str) {
        if let Some(p) = self.plans.lock().get_mut(id)
            && p.state == PlanState::Done(Finished::Executed)
        {
            p.state = match (&p.approved_by, p.approvers.is_empty()) {
                (Some(by), false) => PlanState::Approved(by.clone()),
                _ => {
                    p.approved_by = None;
                    PlanState::Pending
                }
            };
        }
    }

    /// The caller withdraws its own plan.
    pub fn cancel(&self, id: &str, caller: &str) -> Result<PendingPlan, PlanRefusal> {
        let mut plans = self.plans.lock();
        let plan = self.live(&mut plans, id, now_ms(), |p| p.caller == caller)?;
        plan.state = PlanState::Done(Finished::Denied {
            by: caller.to_owned(),
        });
        self.events.send(super::events::PlanEvent::Denied {
            id: id.to_owned(),
            by: caller.to_owned(),
        });
        Ok(plan.clone())
    }

    /// A reviewer or the operator (`by`) decides. An approval wakes whoever waits on the plan
    /// (a parked flow run); the same decision twice is refused with the plan's state.
    pub fn decide(
        &self,
        id: &str,
        by: &str,
        decider: Decider<'_>,
        decision: Decision,
    ) -> Result<PendingPlan, PlanRefusal> {
        let mut plans = self.plans.lock();
        let operator = matches!(decider, Decider::Operator { .. });
        let plan = self.live(&mut plans, id, now_ms(), |p| {
            // Plans without approvers belong to their caller (and the operator); to anyone
            // else they do not exist.
            operator || !p.approvers.is_empty()
        })?;
        match decider {
            Decider::Reviewer(holds) => {
                if plan.caller == by || !holds(&plan.approvers) {
                    return Err(PlanRefusal::NotApprover {
                        roles: plan.approvers.clone(),
                    });
                }
            }
            Decider::Operator { approve_any, own } => {
                if decision == Decision::Approve
                    && plan.approvers.is_empty()
                    && !approve_any
                    && plan.caller != own
                {
                    return Err(PlanRefusal::OperatorMayOnlyDeny);
                }
            }
        }
        if let (PlanState::Approved(prev), Decision::Approve) = (&plan.state, decision) {
            return Err(PlanRefusal::Decided {
                state: "approved",
                by: prev.clone(),
            });
        }
        let event = match decision {
            Decision::Approve => {
                plan.approved_by = Some(by.to_owned());
                plan.state = PlanState::Approved(by.to_owned());
                super::events::PlanEvent::Approved {
                    id: id.to_owned(),
                    by: by.to_owned(),
                }
            }
            Decision::Deny => {
                plan.state = PlanState::Done(Finished::Denied { by: by.to_owned() });
                super::events::PlanEvent::Denied {
                    id: id.to_owned(),
                    by: by.to_owned(),
                }
            }
        };
        let out = plan.clone();
        self.events.send(event);
        Ok(out)
    }

    /// Ends plan `id`, if it still waits: the run that waited on it asks again with a new one.
    /// Whether it did.
    pub fn supersede(&self, id: &str) -> bool {
        match self.plans.lock().get_mut(id) {
            Some(p) if !matches!(p.state, PlanState::Done(_)) => {
                p.state = PlanState::Done(Finished::Superseded);
                true
            }
            _ => false,
        }
    }

    /// Whether plan `id` has approvers and is not `caller`'s: then `fedgate__approve` from
    /// `caller` is a reviewer's decision.
    pub fn is_review(&self, id: &str, caller: &str) -> bool {
        self.plans
            .lock()
            .get(id)
            .is_some_and(|p| p.caller != caller && !p.approvers.is_empty())
    }

    /// A copy of plan `id` as this replica holds it.
    pub fn get(&self, id: &str) -> Option<PendingPlan> {
        self.plans.lock().get(id).cloned()
    }

    /// Holds `plan` as the shared store has it (a newer state than this replica's).
    pub fn put(&self, plan: PendingPlan) {
        self.plans.lock().insert(plan.id.clone(), plan);
    }

    /// Why plan `id`, as held now, cannot be acted on (after another replica acted first).
    pub fn refusal(&self, id: &str) -> PlanRefusal {
        match self.plans.lock().get(id).map(|p| &p.state) {
            None => PlanRefusal::Unknown,
            Some(PlanState::Done(Finished::Executed)) => PlanRefusal::Used,
            Some(PlanState::Done(Finished::Expired)) => PlanRefusal::Expired,
            Some(PlanState::Done(Finished::Invalidated)) => PlanRefusal::Invalidated,
            Some(PlanState::Done(Finished::Superseded)) => PlanRefusal::Superseded,
            Some(PlanState::Done(Finished::Denied { by })) => {
                PlanRefusal::Denied { by: by.clone() }
            }
            Some(PlanState::Pending | PlanState::Approved(_)) => PlanRefusal::Changed,
        }
    }

    /// Every plan not yet finished (for the admin API), oldest first.
    pub fn pending(&self) -> Vec<PendingPlan> {
        let mut plans = self.plans.lock();
        self.note_expired(sweep(&mut plans, now_ms()));
        let mut out: Vec<PendingPlan> = plans
            .values()
            .filter(|p| !matches!(p.state, PlanState::Done(_)))
            .cloned()
            .collect();
        out.sort_by_key(|p| p.created_ms);
        out
    }

    /// How many plans wait (for the gauge); expires what is due.
    pub fn count_pending(&self) -> usize {
        let mut plans = self.plans.lock();
        self.note_expired(sweep(&mut plans, now_ms()));
        plans
            .values()
            .filter(|p| !matches!(p.state, PlanState::Done(_)))
            .count()
    }
    /// The plan `id` if it exists for this asker and can still be acted on.
    fn live<'a>(
        &self,
        plans: &'a mut HashMap<String, PendingPlan>,
        id: &str,
        now: u64,
        visible: impl FnOnce(&PendingPlan) -> bool,
    ) -> Result<&'a mut PendingPlan, PlanRefusal> {
        let plan = plans
            .get_mut(id)
            .filter(|p| visible(p))
            .ok_or(PlanRefusal::Unknown)?;
        if plan.expires_ms <= now && !matches!(plan.state, PlanState::Done(_)) {
            plan.state = PlanState::Done(Finished::Expired);
            self.note_expired(vec![plan.clone()]);
        }
        match &plan.state {
            PlanState::Done(Finished::Executed) => Err(PlanRefusal::Used),
            PlanState::Done(Finished::Expired) => Err(PlanRefusal::Expired),
            PlanState::Done(Finished::Invalidated) => Err(PlanRefusal::Invalidated),
            PlanState::Done(Finished::Superseded) => Err(PlanRefusal::Superseded),
            PlanState::Done(Finished::Denied { by }) => Err(PlanRefusal::Denied { by: by.clone() }),
            _ => Ok(plan),
        }
    }
}

/// Marks due plans expired and drops finished ones past their expiry; returns the newly expired.
fn sweep(plans: &mut HashMap<String, PendingPlan>, now: u64) -> Vec<PendingPlan> {
    let mut expired = Vec::new();
    plans.retain(|_, p| {
        if p.expires_ms > now {
            return true;
        }
        if !matches!(p.state, PlanState::Done(_)) {
            p.state = PlanState::Done(Finished::Expired);
            expired.push(p.clone());
            // Kept a little longer, so a late approve hears "expired", not "unknown".
            p.expires_ms = now.saturating_add(60_000);
            return true;
        }
        false
    });
    expired
}

/// SHA-256 (hex) of the canonical JSON of `v` (object keys sorted at every level).
pub fn digest(v: &Value) -> String {
    crate::json_digest::sha256_hex(v)
}
