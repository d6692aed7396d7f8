//! One workflow's state machine as loaded (`[stages.NAME]`): which tools each state gates, and
//! which moves are allowed to whom with what. Pure: `crate::stages` keeps the instances and asks this.

use std::collections::BTreeMap;

use globset::GlobSet;

use super::view::compile;

/// A state and the tools a session bound to a workspace in it may see and call.
#[derive(Debug, Clone)]
pub struct State {
    pub description: Option<String>,
    /// Exposed-name globs, as configured (for `stage_status`).
    pub globs: Vec<String>,
    tools: GlobSet,
}

impl State {
    pub fn new(globs: Vec<String>, description: Option<String>) -> Self {
        Self {
            tools: compile(&globs),
            globs,
            description,
        }
    }
}

/// An allowed move.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Transition {
    pub from: String,
    pub to: String,
    pub roles: Vec<String>,
    pub reason: bool,
    pub record: bool,
}

/// Why a move was refused; each says what would be allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("`{to}` is no state of this workflow (states: {})", states.join(", "))]
    UnknownState { to: String, states: Vec<String> },
    #[error(
        "no transition leads from `{from}` to `{to}` (from `{from}`: {})",
        shown(exits)
    )]
    NoTransition {
        from: String,
        to: String,
        exits: Vec<String>,
    },
    #[error("moving from `{from}` to `{to}` needs one of the roles {}", roles.join(", "))]
    NotAllowed {
        from: String,
        to: String,
        roles: Vec<String>,
    },
    #[error("moving from `{from}` to `{to}` needs a reason")]
    NeedsReason { from: String, to: String },
    #[error("moving from `{from}` to `{to}` needs the id of the record that justifies it")]
    NeedsRecord { from: String, to: String },
}

impl Refused {
    /// What the caller can do about it.
    pub fn hint(&self) -> String {
        match self {
            Refused::UnknownState { .. } | Refused::NoTransition { .. } => {
                "call fedgate__stage_status: it lists the moves out of this stage".into()
            }
            Refused::NotAllowed { roles, .. } => format!(
                "ask someone with role {} to make this move",
                roles.join(" or ")
            ),
            Refused::NeedsReason { .. } => "call again with `reason`".into(),
            Refused::NeedsRecord { .. } => {
                "call again with `record_id`: the id of the review record behind the move".into()
            }
        }
    }
}

fn shown(exits: &[String]) -> String {
    if exits.is_empty() {
        "none, it is final".into()
    } else {
        exits.join(", ")
    }
}

/// One workflow (`[stages.NAME]`).
#[derive(Debug, Clone)]
pub struct Machine {
    pub name: String,
    pub initial: String,
    pub states: BTreeMap<String, State>,
    pub transitions: Vec<Transition>,
    /// Every tool some state names: the ones this workflow gates.
    gated: GlobSet,
}

impl Machine {
    pub fn new(
        name: &str,
        initial: String,
        states: BTreeMap<String, State>,
        transitions: Vec<Transition>,
    ) -> Self {
        let all: Vec<String> = states.values().flat_map(|s| s.globs.clone()).collect();
        Self {
            name: name.to_owned(),
            initial,
            gated: compile(&all),
            states,
            transitions,
        }
    }

    /// Whether some state names `tool` (the gateway's own tools never count).
    pub fn gates(&self, tool: &str) -> bool {
        !crate::names::BUILTIN_TOOLS.contains(&tool) && self.gated.is_match(tool)
    }

    /// Whether `tool` may be seen and called in `state`: tools no state names always may.
    pub fn allows(&self, state: &str, tool: &str) -> bool {
        !self.gates(tool)
            || self
                .states
                .get(state)
                .is_some_and(|s| s.tools.is_match(tool))
    }

    /// The moves out of `state`.
    pub fn exits<'a>(&'a self, state: &'a str) -> impl Iterator<Item = &'a Transition> + 'a {
        self.transitions.iter().filter(move |t| t.from == state)
    }

    /// The states in which `tool` may be called (for a refusal that says where it belongs).
    pub fn states_allowing(&self, tool: &str) -> Vec<&str> {
        self.states
            .iter()
            .filter(|(_, s)| s.tools.is_match(tool))
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// Checks a move from `from` to `to` by a caller holding roles (`holds`), with what it
    /// brings; the transition it makes.
    pub fn check<'a>(
        &'a self,
        from: &'a str,
        to: &str,
        holds: impl Fn(&[String]) -> bool,
        reason: Option<&str>,
        record: Option<&str>,
    ) -> Result<&'a Transition, Refused> {
        if !self.states.contains_key(to) {
            return Err(Refused::UnknownState {
                to: crate::names::shown(to),
                states: self.states.keys().cloned().collect(),
            });
        }
        let Some(t) = self.exits(from).find(|t| t.to == to) else {
            return Err(Refused::NoTransition {
                from: from.to_owned(),
                to: to.to_owned(),
                exits: self.exits(from).map(|t| t.to.clone()).collect(),
            });
        };
        let (from, to) = (from.to_owned(), to.to_owned());
        if !holds(&t.roles) {
            return Err(Refused::NotAllowed {
                from,
                to,
                roles: t.roles.clone(),
            });
        }
        if t.reason && reason.is_none_or(|r| r.trim().is_empty()) {
            return Err(Refused::NeedsReason { from, to });
        }
        if t.record && record.is_none_or(|r| r.trim().is_empty()) {
            return Err(Refused::NeedsRecord { from, to });
        }
        Ok(t)
    }
}

/// A workspace id: 1–128 characters of letters, digits and `. _ : -` (it keys stored state
/// and appears in audit records and refusals).
pub fn valid_workspace(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn research() -> Machine {
        let state = |g: &[&str]| State::new(g.iter().map(|s| s.to_string()).collect(), None);
        let t = |from: &str, to: &str, roles: &[&str], reason: bool, record: bool| Transition {
            from: from.into(),
            to: to.into(),
            roles: roles.iter().map(|s| s.to_string()).collect(),
            reason,
            record,
        };
        Machine::new(
            "research",
            "collecting".into(),
            BTreeMap::from([
                ("collecting".into(), state(&["r__collect"])),
                ("verifying".into(), state(&["r__verify", "r__collect"])),
                ("decided".into(), state(&["r__decide"])),
            ]),
            vec![
                t(
                    "collecting",
                    "verifying",
                    &["collector", "reviewer"],
                    false,
                    false,
                ),
                t("verifying", "decided", &["reviewer"], true, true),
            ],
        )
    }

    #[test]
    fn a_state_gates_the_tools_some_state_names_and_no_others() {
        let m = research();
        assert!(m.allows("collecting", "r__collect") && !m.allows("collecting", "r__decide"));
        assert!(m.allows("decided", "r__decide") && !m.allows("decided", "r__verify"));
        assert!(m.allows("collecting", "other__tool"), "ungated");
        assert_eq!(m.states_allowing("r__collect"), ["collecting", "verifying"]);
    }

    #[test]
    fn a_move_needs_a_transition_a_role_a_reason_and_a_record() {
        let m = research();
        let reviewer = |roles: &[String]| roles.iter().any(|r| r == "reviewer");
        let collector = |roles: &[String]| roles.iter().any(|r| r == "collector");
        assert!(matches!(
            m.check("collecting", "decided", reviewer, Some("x"), Some("r1")),
            Err(Refused::NoTransition { .. })
        ));
        assert!(matches!(
            m.check("verifying", "decided", collector, Some("x"), Some("r1")),
            Err(Refused::NotAllowed { .. })
        ));
        assert!(matches!(
            m.check("verifying", "decided", reviewer, Some("  "), Some("r1")),
            Err(Refused::NeedsReason { .. })
        ));
        assert!(matches!(
            m.check("verifying", "decided", reviewer, Some("ok"), None),
            Err(Refused::NeedsRecord { .. })
        ));
        assert!(matches!(
            m.check("verifying", "nowhere", reviewer, None, None),
            Err(Refused::UnknownState { .. })
        ));
        assert_eq!(
            m.check("verifying", "decided", reviewer, Some("ok"), Some("r1"))
                .map(|t| t.to.as_str()),
            Ok("decided")
        );
        let e = m
            .check("decided", "collecting", reviewer, None, None)
            .unwrap_err();
        assert!(e.to_string().contains("none, it is final"), "{e}");
    }

    #[test]
    fn workspace_ids_are_short_and_plain() {
        assert!(valid_workspace("case-42:v1.b_c"));
        assert!(
            !valid_workspace("") && !valid_workspace("a\nb") && !valid_workspace(&"a".repeat(129))
        );
    }
}

/// Where a request stands in the workflows: the machines, and the state of the workspace it
/// works in (if any). What it allows is what every list, search, selection and suggestion
/// offers, as the stage gate decides on calls.
#[derive(Debug, Clone, Default)]
pub struct Standing {
    machines: std::sync::Arc<BTreeMap<String, std::sync::Arc<Machine>>>,
    /// The workspace's workflow and its state.
    at: Option<(String, String)>,
}

impl Standing {
    pub fn new(
        machines: std::sync::Arc<BTreeMap<String, std::sync::Arc<Machine>>>,
        at: Option<(String, String)>,
    ) -> Self {
        Self { machines, at }
    }

    /// Whether `tool` may be called from here: no workflow gates it, or the workspace's
    /// workflow does and its state allows it.
    pub fn allows(&self, tool: &str) -> bool {
        self.machines.iter().all(|(name, m)| match &self.at {
            Some((w, s)) if w == name => m.allows(s, tool),
            _ => !m.gates(tool),
        })
    }
}
