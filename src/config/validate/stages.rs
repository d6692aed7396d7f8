//! `[stages.NAME]`: states, their tool globs and the transitions, checked once and compiled
//! into state machines.

use std::{collections::BTreeMap, sync::Arc};

use super::{Ctx, auth::globs};
use crate::{
    config::stages::RawStages,
    names::{Naming, shown},
    policy::workflow::{Machine, State, Transition},
};

fn url_safe(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
}

pub(super) fn validate_stages(
    cx: &mut Ctx<'_>,
    raw: &BTreeMap<String, RawStages>,
    roles: &[String],
    naming: &Naming,
) -> BTreeMap<String, Arc<Machine>> {
    let mut out = BTreeMap::new();
    for (name, w) in raw {
        let owner = format!("stages `{}`", shown(name));
        if !url_safe(name) {
            cx.err_at(
                w.initial.span().start,
                format!("{owner}: a workflow name is 1-64 characters of A-Z a-z 0-9 _ -"),
            );
            continue;
        }
        let mut states = BTreeMap::new();
        for (state, s) in &w.states {
            if !url_safe(state) {
                cx.err_at(
                    s.span().start,
                    format!(
                        "{owner}: state `{}`: a state name is 1-64 characters of A-Z a-z 0-9 _ -",
                        shown(state)
                    ),
                );
                continue;
            }
            let tools = globs(
                cx,
                &format!("{owner} state `{state}`"),
                &s.get_ref().tools,
                Some(naming),
            );
            states.insert(
                state.clone(),
                State::new(tools, s.get_ref().description.clone()),
            );
        }
        let listed = states.keys().cloned().collect::<Vec<_>>().join(", ");
        let known = |cx: &mut Ctx<'_>, s: &toml::Spanned<String>, what: &str| {
            let ok = states.contains_key(s.get_ref());
            if !ok {
                cx.err_at(
                    s.span().start,
                    format!(
                        "{owner}: {what} `{}` is no state (states: {listed})",
                        shown(s.get_ref())
                    ),
                );
            }
            ok
        };
        let initial_ok = known(cx, &w.initial, "initial");
        let mut transitions = Vec::new();
        for t in &w.transitions {
            let at = t.span().start;
            let t = t.get_ref();
            let (from_ok, to_ok) = (known(cx, &t.from, "from"), known(cx, &t.to, "to"));
            for r in &t.roles {
                if !roles.contains(r.get_ref()) {
                    cx.err_at(
                        r.span().start,
                        format!(
                            "{owner}: transition to `{}`: unknown role `{}` (roles: {})",
                            t.to.get_ref(),
                            shown(r.get_ref()),
                            roles.join(", ")
                        ),
                    );
                }
            }
            if t.from.get_ref() == t.to.get_ref() {
                cx.err_at(
                    at,
                    format!(
                        "{owner}: a transition from `{}` to itself",
                        t.from.get_ref()
                    ),
                );
            }
            if from_ok && to_ok {
                transitions.push(Transition {
                    from: t.from.get_ref().clone(),
                    to: t.to.get_ref().clone(),
                    roles: t.roles.iter().map(|r| r.get_ref().clone()).collect(),
                    reason: t.reason,
                    record: t.record,
                });
            }
        }
        if initial_ok {
            out.insert(
                name.clone(),
                Arc::new(Machine::new(
                    name,
                    w.initial.get_ref().clone(),
                    states,
                    transitions,
                )),
            );
        }
    }
    out
}

/// Flows that declare the stages they may start in (`stage = { workflow, states }`): each
/// such flow's tool joins those states' tools, so the workflow gates it like any tool; a
/// flow naming a workflow or state that does not exist does not load (its problem says why).
pub(super) fn flow_stages(
    set: &mut crate::config::flows::FlowSet,
    machines: &mut BTreeMap<String, Arc<Machine>>,
    naming: &Naming,
) {
    let mut added: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    set.flows.retain(|f| {
        let Some(need) = &f.stage else { return true };
        let workflow = match &need.workflow {
            Some(w) => Some(w.clone()),
            None if machines.len() == 1 => machines.keys().next().cloned(),
            None => None,
        };
        let problem = match workflow.as_ref().and_then(|w| machines.get(w)) {
            None => Some(format!(
                "flow `{}`: stage: {} (workflows: {})",
                f.id,
                match &need.workflow {
                    Some(w) => format!("`{}` is no workflow", shown(w)),
                    None => "name the workflow".to_owned(),
                },
                machines.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
            Some(m) => need
                .states
                .iter()
                .find(|s| !m.states.contains_key(*s))
                .map(|s| {
                    format!(
                        "flow `{}`: stage: `{}` is no state of workflow `{}`",
                        f.id,
                        shown(s),
                        m.name
                    )
                })
                .or_else(|| {
                    need.states
                        .is_empty()
                        .then(|| format!("flow `{}`: stage: name at least one state", f.id))
                }),
        };
        if let Some(message) = problem {
            problems.push(crate::config::snapshot::Diagnostic {
                file: f.file.clone(),
                line: f.line,
                message,
            });
            return false;
        }
        let tool = naming
            .expose(
                crate::config::flows::FLOWS_NAMESPACE,
                crate::names::PrefixMode::Always,
                &f.id,
            )
            .0;
        for s in &need.states {
            added
                .entry((workflow.clone().unwrap_or_default(), s.clone()))
                .or_default()
                .push(tool.clone());
        }
        true
    });
    set.problems.extend(problems);
    for (name, m) in machines.iter_mut() {
        if !added.keys().any(|(w, _)| w == name) {
            continue;
        }
        let states = m
            .states
            .iter()
            .map(|(s, st)| {
                let mut globs = st.globs.clone();
                if let Some(tools) = added.get(&(name.clone(), s.clone())) {
                    globs.extend(tools.iter().cloned());
                }
                (s.clone(), State::new(globs, st.description.clone()))
            })
            .collect();
        *m = Arc::new(Machine::new(
            name,
            m.initial.clone(),
            states,
            m.transitions.clone(),
        ));
    }
    gated_nodes(set, machines);
}

/// A node calling a tool some workflow gates runs only while the run's workspace is at a stage
/// allowing it (the gate decides on each node when it runs): said for each stage the flow may
/// start in that does not, or for a flow that declares none.
fn gated_nodes(set: &mut crate::config::flows::FlowSet, machines: &BTreeMap<String, Arc<Machine>>) {
    let mut warnings = Vec::new();
    for f in &set.flows {
        for n in &f.nodes {
            for m in machines.values().filter(|m| m.gates(&n.tool)) {
                let declared = f
                    .stage
                    .as_ref()
                    .filter(|st| st.workflow.as_deref().is_none_or(|w| w == m.name));
                let message = match declared {
                    Some(st) => {
                        let refused: Vec<&str> = st
                            .states
                            .iter()
                            .filter(|s| !m.allows(s, &n.tool))
                            .map(String::as_str)
                            .collect();
                        if refused.is_empty() {
                            continue;
                        }
                        format!(
                            "flow `{}`: node `{}` calls `{}`, which workflow `{}` does not allow \
                             in {}, where the flow may start: there the node is refused",
                            f.id,
                            n.id,
                            shown(&n.tool),
                            m.name,
                            refused.join(", ")
                        )
                    }
                    None => format!(
                        "flow `{}`: node `{}` calls `{}`, which workflow `{}` gates: it runs only \
                         while the run's workspace is at a stage allowing it ({}); declare \
                         `stage = {{ workflow = \"{}\", states = [...] }}` to start the flow only \
                         there",
                        f.id,
                        n.id,
                        shown(&n.tool),
                        m.name,
                        m.states_allowing(&n.tool).join(", "),
                        m.name
                    ),
                };
                warnings.push(crate::config::snapshot::Diagnostic {
                    file: f.file.clone(),
                    line: n.line,
                    message,
                });
            }
        }
    }
    set.warnings.extend(warnings);
}
