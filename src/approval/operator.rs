//! The operator as decider of last resort (admin API, console, `fedgate plans`, the terminal of
//! an in-process `fedgate flows run`): one decision on one plan, made on the shared copy when
//! replicas share plans (atomically: of two replicas deciding at once one wins, the other gets
//! the winner's state), counted and audited in the operator's name.

use super::{
    Decider, Decision, PendingPlan, PlanRefusal, Plans, record::plan_record, shared::SharedPlans,
};
use crate::{
    policy::identity::IdentityKind,
    telemetry::{audit::Audit, metrics::Metrics},
};

/// Who the operator is in plans, audit records and logs when it decides through the admin API
/// or the console.
pub const OPERATOR: &str = "admin";

/// What the operator may decide and where it is recorded.
pub struct Operator<'a> {
    /// Who decides: [`OPERATOR`], or `local` at the terminal of an in-process run.
    pub name: &'a str,
    pub plans: &'a Plans,
    pub shared: Option<&'a SharedPlans>,
    /// `[admin] approve_plans`: it may approve plans without approver roles too.
    pub approve_any: bool,
    /// The operator's own caller key (plans of runs it started are its own to approve).
    pub own: &'a str,
    pub metrics: Option<&'a Metrics>,
    pub audit: Option<&'a Audit>,
}

impl Operator<'_> {
    /// Approves or denies plan `id`; the decided plan, or why not.
    pub async fn decide(&self, id: &str, decision: Decision) -> Result<PendingPlan, PlanRefusal> {
        let imported = match self.shared {
            Some(sh) => sh.import(self.plans, id).await.ok(),
            None => None,
        };
        let decider = Decider::Operator {
            approve_any: self.approve_any,
            own: self.own,
        };
        let mut decided = self.plans.decide(id, self.name, decider, decision);
        if let (Some(sh), Some(imported), Ok(_)) = (self.shared, imported, &decided)
            && let Ok(false) = sh.write_back(self.plans, id, imported).await
        {
            decided = Err(self.plans.refusal(id));
        }
        let plan = decided?;
        let (outcome, record) = match decision {
            Decision::Approve => ("approved", "plan_approved"),
            Decision::Deny => ("denied", "plan_denied"),
        };
        if let Some(m) = self.metrics {
            m.plans_ended(outcome, 1);
        }
        tracing::info!(plan = %plan.id, tool = %plan.tool, "plan {outcome} by the operator");
        if let Some(audit) = self.audit {
            audit.record(plan_record(
                self.name,
                IdentityKind::Local.as_str(),
                &crate::telemetry::correlation_id(),
                &plan,
                record,
                Some(self.name.to_owned()),
            ));
        }
        Ok(plan)
    }
}
