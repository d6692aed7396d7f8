//! Approvals across replicas (`[cluster] redis`): every decision on a plan runs on this
//! replica's `Plans` between an import of the shared copy and an atomic write-back (see
//! `approval::shared`). A lost race answers with the state the other replica left. While Redis
//! does not answer: this replica's plans alone (`fail = "local"`), or a refusal (`closed`).

use crate::{
    approval::{
        PlanRefusal, Plans,
        shared::{Imported, SharedPlans},
    },
    pipeline::CallError,
};

/// Runs `op`, a decision on plan `id`, against the shared copy of the plan.
pub(super) async fn around<T>(
    shared: &SharedPlans,
    plans: &Plans,
    id: &str,
    op: impl FnOnce() -> Result<T, CallError>,
) -> Result<T, CallError> {
    let Ok(imported) = shared.import(plans, id).await else {
        return without_redis(shared, op);
    };
    let out = op();
    match shared.write_back(plans, id, imported).await {
        Ok(true) => out,
        Ok(false) => Err(CallError::Plan(match plans.refusal(id) {
            PlanRefusal::Unknown => PlanRefusal::Changed,
            other => other,
        })),
        // The decision stands on this replica; the shared copy catches up on its next write.
        Err(_) => without_redis(shared, || out),
    }
}

fn without_redis<T>(
    shared: &SharedPlans,
    op: impl FnOnce() -> Result<T, CallError>,
) -> Result<T, CallError> {
    shared
        .redis()
        .fall_back("approvals", "approval plans")
        .map_err(|feature| CallError::StoreUnavailable { feature })?;
    op()
}

/// Shares a plan this replica just made.
pub(super) async fn publish(
    shared: &SharedPlans,
    plans: &Plans,
    id: &str,
) -> Result<(), CallError> {
    match shared.write_back(plans, id, Imported::absent()).await {
        Ok(_) => Ok(()),
        Err(_) => without_redis(shared, || Ok(())),
    }
}

/// Shares a plan given back to its caller (its approved call never started).
pub(super) async fn restored(shared: &SharedPlans, plans: &Plans, id: &str) {
    if let Ok(current) = shared.current(id).await {
        let _ = shared.write_back(plans, id, current).await;
    }
}
