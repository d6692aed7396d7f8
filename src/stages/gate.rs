//! The stage gate: a call to a tool some workflow gates runs only from a workspace whose
//! stage allows it; otherwise a `blocked` plan says what the stage is, what it allows and
//! who may move it on.

use futures::future::BoxFuture;

use crate::policy::workflow::Standing;

use super::{Bound, Stages, refusal, status_action, store_down};
use crate::{
    names::{STAGE_STATUS, shown},
    pipeline::{Call, CallError, Exposed, Gate, Op, Place, StageRefusal},
};

impl Gate for Stages {
    fn check<'a>(&'a self, call: &'a Call) -> BoxFuture<'a, Result<(), CallError>> {
        Box::pin(async move { self.decide(call).await.map_err(CallError::Staged) })
    }

    fn standing<'a>(&'a self, place: &'a Place) -> BoxFuture<'a, Standing> {
        Box::pin(async move {
            self.standing(place.session.as_deref(), place.workspace.as_deref())
                .await
                .unwrap_or_else(|_| Standing::new(self.machines.load_full(), None))
        })
    }

    fn workspace(&self, call: &Call) -> Option<String> {
        let b = self.bound_call(call.downstream.as_ref()).ok()??;
        Some(format!("{}/{}", b.workflow, b.workspace))
    }
}

impl Stages {
    async fn decide(&self, call: &Call) -> Result<(), Box<StageRefusal>> {
        // Every call is gated as its workspace stands when it runs: a client's (also approved,
        // or resumed after a sign-in) by its session's, a flow's node (no session of its own)
        // by the workspace of the call that started the run.
        if !matches!(call.op, Op::CallTool(_)) {
            return Ok(());
        }
        let Some(Exposed::Tool(tool)) = call.target.as_ref().map(|t| &t.exposed) else {
            return Ok(());
        };
        let machines = self.machines.load();
        let gating: Vec<&String> = machines
            .iter()
            .filter(|(_, m)| m.gates(tool))
            .map(|(n, _)| n)
            .collect();
        if gating.is_empty() {
            return Ok(());
        }
        let several = machines.len() > 1;
        let bound = match &call.downstream {
            Some(d) => self.bound_call(Some(d))?,
            None => match call.workspace.as_deref() {
                Some(w) => self.bound(None, Some(w))?,
                None => None,
            },
        };
        let Some(b) = bound else {
            self.refused(gating[0], "unbound");
            if call.downstream.is_none() {
                return Err(refusal(
                    "stage_unbound",
                    format!(
                        "`{}` belongs to workflow `{}`: the flow run calling it was started \
                         from no workspace",
                        shown(tool),
                        gating[0]
                    ),
                    format!(
                        "start the flow from a session that works in a workspace (call \
                         {STAGE_STATUS} first, or send the `Fedgate-Workspace` header): its \
                         nodes are gated by that workspace's stage"
                    ),
                ));
            }
            return Err(refusal(
                "stage_unbound",
                format!(
                    "`{}` belongs to workflow `{}`: this session works in no workspace yet",
                    shown(tool),
                    gating[0]
                ),
                format!(
                    "call {STAGE_STATUS} with the workspace your user works in (or send the \
                     `Fedgate-Workspace` header); its stage decides what you may call"
                ),
            ));
        };
        let Some(m) = machines
            .get(&b.workflow)
            .filter(|_| gating.contains(&&b.workflow))
        else {
            self.refused(gating[0], "call");
            return Err(self.located(
                refusal(
                    "stage_blocked",
                    format!(
                        "`{}` belongs to workflow `{}`, not to `{}` of workspace `{}`",
                        shown(tool),
                        gating[0],
                        b.workflow,
                        b.workspace
                    ),
                    format!("work in a workspace of workflow `{}` for it", gating[0]),
                ),
                &b,
                None,
                several,
            ));
        };
        let state = self.instance(&b, m).await.map_err(store_down)?.state;
        if m.allows(&state, tool) {
            return Ok(());
        }
        self.refused(&b.workflow, "call");
        let where_ = m.states_allowing(tool);
        // A stored state a reload removed allows none of the gated tools.
        let here = m.states.get(&state);
        let moves: Vec<String> = m
            .exits(&state)
            .map(|t| {
                format!(
                    "to `{}` by {}{}",
                    t.to,
                    if t.roles.is_empty() {
                        "anyone".to_owned()
                    } else {
                        format!("role {}", t.roles.join(" or "))
                    },
                    match (t.reason, t.record) {
                        (true, true) => " with a reason and a record id",
                        (true, false) => " with a reason",
                        (false, true) => " with a record id",
                        (false, false) => "",
                    }
                )
            })
            .collect();
        Err(self.located(
            refusal(
                "stage_blocked",
                format!(
                    "the current stage of workspace `{}` is `{state}`{}: `{}` is not available \
                     in it (it is in {})",
                    b.workspace,
                    here.and_then(|h| h.description.as_deref())
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default(),
                    shown(tool),
                    if where_.is_empty() {
                        "no stage".to_owned()
                    } else {
                        where_.join(", ")
                    }
                ),
                format!(
                    "this stage allows {}; it moves on {}. Call {STAGE_STATUS} to see the stage, \
                     finish its work, and ask whoever holds the role to move it on",
                    {
                        // The tools it lets this caller call, not its globs: those may name
                        // tools the caller's roles hide.
                        let allowed = self.allowed_here(m, &state, &call.identity.access);
                        if allowed.is_empty() {
                            "none of the workflow's tools you may call".to_owned()
                        } else {
                            allowed.join(", ")
                        }
                    },
                    if moves.is_empty() {
                        "never: it is final".to_owned()
                    } else {
                        moves.join("; ")
                    }
                ),
            ),
            &b,
            Some(state),
            several,
        ))
    }

    /// The gated tools `state` of `m` lets a caller with `access` call.
    fn allowed_here(
        &self,
        m: &crate::policy::workflow::Machine,
        state: &str,
        access: &crate::policy::authz::Access,
    ) -> Vec<String> {
        self.pool
            .catalog()
            .tools
            .iter()
            .map(|t| t.name.to_string())
            .filter(|n| m.gates(n) && m.allows(state, n))
            .filter(|n| crate::pipeline::visible(&self.pool, access, n))
            .collect()
    }

    pub(super) fn refused(&self, workflow: &str, kind: &str) {
        self.metrics.refused(workflow, kind);
    }

    /// `r` about workspace `b` (in `state`), with `stage_status` as the next action.
    pub(super) fn located(
        &self,
        mut r: Box<StageRefusal>,
        b: &Bound,
        state: Option<String>,
        several: bool,
    ) -> Box<StageRefusal> {
        r.workflow = Some(b.workflow.clone());
        r.workspace = Some(b.workspace.clone());
        r.state = state;
        r.next = Some(status_action(b, several));
        r
    }
}
