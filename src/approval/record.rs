//! What plan events leave behind: audit records, the approval metrics, and the sweeper that
//! reports plans which expired while nobody asked about them.

use std::{sync::Arc, time::Duration};

use super::{PendingPlan, Plans};
use crate::{
    policy::identity::IdentityKind,
    telemetry::{
        audit::{Audit, Record},
        metrics::Metrics,
    },
};

/// How often plans that expired unseen are counted and audited.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// Starts the task that counts and audits plans that expire while nobody asks about them; it
/// ends with the plan store.
pub fn start_sweeper(plans: &Arc<Plans>, metrics: Arc<Metrics>, audit: Option<Audit>) {
    let plans = Arc::downgrade(plans);
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

/// Brings the plan metrics up to date; plans that expired are counted and audited (decision
/// `plan_expired`, in the name of their caller). Runs after every plan event and at scrape time.
pub fn sync_metrics(plans: &Plans, metrics: &Metrics, audit: Option<&Audit>) {
    let expired = plans.take_expired();
    if !expired.is_empty() {
        metrics.plans_ended("expired", expired.len() as u64);
    }
    if let Some(audit) = audit {
        for plan in &expired {
            let (kind, name) = plan.caller.split_once(':').unwrap_or(("", &plan.caller));
            audit.record(plan_record(
                name,
                IdentityKind::from_str_or_local(kind).as_str(),
                &crate::telemetry::correlation_id(),
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
        on_behalf_of: None,
        guardrails: None,
        cut: None,
    }
}
