//! Approval of writes (F11): a write that needs approval is not run; it becomes a pending plan
//! that names exactly one call — caller, upstream, tool, a digest of the canonical arguments
//! and the policy version it was decided under — and expires. The plan id is unguessable and
//! single-use; the call runs only with the frozen arguments, only for the caller that asked,
//! and only while the policy that required approval is unchanged.
//!
//! Who decides: with no `approvers`, the caller approves its own plan (its agent asks its
//! human). With `approvers = ["role"]`, an identity holding one of those roles (never the
//! caller itself) approves or denies; the caller then runs it. The operator (admin API and
//! console) is the decider of last resort: it may deny any plan, and approve any plan unless
//! `[admin] approve_plans = false` limits it to plans that name approver roles. Every
//! approval wakes whoever waits on the plan (a parked flow run runs it as its caller); a
//! second, equal decision on a decided plan is refused with the plan's state.
//!
//! This module is the lifecycle's one home. A plan is `pending` (held), `approved` (by a
//! reviewer or the operator, not yet run), then `ran`; or `denied`, `expired`, `invalidated`
//! (its policy changed) or `superseded` (a resumed flow run asked again). Every decider goes
//! through [`Plans`] — the caller's `fedgate__approve`, reviewers, the operator
//! ([`operator`]: admin API, console, `fedgate plans`), elicitation and `tasks/update` answers,
//! a peer gateway on its caller's behalf — and so does every executor: the direct caller
//! (`pipeline`'s approval step), a parked flow run (`flows::approval`), any replica (the shared
//! copies in [`shared`]). [`events`] tells whoever waits what became of a plan; [`record`]
//! leaves the audit records and metrics.

pub mod events;
pub mod operator;
pub mod plans;
pub mod record;
pub mod shared;
#[cfg(test)]
mod tests;

pub use plans::*;
