//! Approvals against the plan store (`approval::shared::PlanStore`): every decision on a plan
//! runs on this replica's `Plans` between an import of the store's copy and an atomic
//! write-back. A lost race answers with the state the other replica left. While Redis does
//! not answer: this replica's plans alone (`fail = "local"`), or a refusal (`closed`) — decided
//! by `stores::Store`.

use crate::{
    approval::{
        PlanRefusal, Plans,
        shared::{Imported, PlanStore},
    },
    pipeline::CallError,
    stores::{Store, Unavailable},
};

fn unavailable(u: Unavailable) -> CallError {
    CallError::StoreUnavailable { feature: u.0 }
}

/// Runs `op`, a decision on plan `id`, against the store's copy of the plan.
pub(super) async fn around<T>(
    store: &Store<dyn PlanStore>,
    plans: &Plans,
    id: &str,
    op: impl FnOnce() -> Result<T, CallError>,
) -> Result<T, CallError> {
    let (imported, fell_back) = store
        .run_noting(|s| s.import(plans, id))
        .await
        .map_err(unavailable)?;
    let out = op();
    // Fallen back to this replica's plans: they hold the decision; the shared copy catches
    // up on the plan's next write.
    if fell_back {
        return out;
    }
    let written = store
        .run(|s| s.write_back(plans, id, imported.clone()))
        .await
        .map_err(unavailable)?;
    if written {
        out
    } else {
        Err(CallError::Plan(match plans.refusal(id) {
            PlanRefusal::Unknown => PlanRefusal::Changed,
            other => other,
        }))
    }
}

/// Shares a plan this replica just made.
pub(super) async fn publish(
    store: &Store<dyn PlanStore>,
    plans: &Plans,
    id: &str,
) -> Result<(), CallError> {
    store
        .run(|s| s.write_back(plans, id, Imported::absent()))
        .await
        .map(|_| ())
        .map_err(unavailable)
}

/// Shares a plan given back to its caller (its approved call never started).
pub(super) async fn restored(store: &Store<dyn PlanStore>, plans: &Plans, id: &str) {
    if let Some(shared) = store.shared_store()
        && let Ok(current) = shared.current(id).await
    {
        let _ = shared.write_back(plans, id, current).await;
    }
}
