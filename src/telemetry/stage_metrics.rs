//! Stage metrics (`[stages.NAME]`): moves by workflow and states, refusals by workflow and
//! kind. Labels are configured names and fixed words: bounded by the config.

use prometheus::{IntCounterVec, Opts, Registry};

#[derive(Debug, Clone)]
pub struct StageMetrics {
    /// Moves made: `workflow`, `from`, `to`.
    pub transitions: IntCounterVec,
    /// Refusals: `workflow`, `kind` (`call`: a tool of another stage; `advance`: a move the
    /// workflow does not allow to this caller; `unbound`: a gated tool without a workspace).
    pub refusals: IntCounterVec,
}

impl StageMetrics {
    /// A workspace of `workflow` moved from stage `from` to `to`.
    pub fn moved(&self, workflow: &str, from: &str, to: &str) {
        self.transitions
            .with_label_values(&[workflow, from, to])
            .inc();
    }

    /// A call refused by `workflow`'s stage gate (`kind`: why).
    pub fn refused(&self, workflow: &str, kind: &str) {
        self.refusals.with_label_values(&[workflow, kind]).inc();
    }

    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let transitions = IntCounterVec::new(
            Opts::new(
                "fedgate_stage_transitions_total",
                "Stage moves of workspaces, by workflow and states",
            ),
            &["workflow", "from", "to"],
        )?;
        let refusals = IntCounterVec::new(
            Opts::new(
                "fedgate_stage_refusals_total",
                "Calls and moves a workspace's stage refused, by workflow and kind (call, advance, unbound)",
            ),
            &["workflow", "kind"],
        )?;
        registry.register(Box::new(transitions.clone()))?;
        registry.register(Box::new(refusals.clone()))?;
        Ok(Self {
            transitions,
            refusals,
        })
    }
}
