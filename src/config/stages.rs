//! `[stages.NAME]` as written: a workflow's states, the tools each state lets a bound session
//! see and call, and the transitions, with who may make them and what they need.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// `[stages.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStages {
    /// The state a new workspace starts in.
    pub initial: Spanned<String>,
    /// `[stages.NAME.states.STATE]`.
    pub states: BTreeMap<String, Spanned<RawState>>,
    /// `[[stages.NAME.transitions]]`.
    #[serde(default)]
    pub transitions: Vec<Spanned<RawTransition>>,
}

/// One state: the tools (globs on canonical names) visible and callable in it. Tools no state
/// names are not gated by this workflow.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawState {
    #[serde(default)]
    pub tools: Vec<Spanned<String>>,
    /// What the state is for, shown in `stage_status` and refusals.
    pub description: Option<String>,
}

/// One allowed move.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTransition {
    pub from: Spanned<String>,
    pub to: Spanned<String>,
    /// Roles that may make it (none: nobody but the admin API).
    #[serde(default)]
    pub roles: Vec<Spanned<String>>,
    /// The move needs a reason.
    #[serde(default)]
    pub reason: bool,
    /// The move needs a linked record id (a review record).
    #[serde(default)]
    pub record: bool,
}
