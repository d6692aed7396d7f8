//! Tool-definition screening in the catalog: a definition the guardrails flag is held back
//! like an unpinned change (a conflict with its fingerprint, accepted by an operator) or listed
//! with a warning, by its upstream's `tool_definitions`.

use rmcp::model::Tool;

use super::catalog::{Catalog, Conflict};
use crate::{
    config::UpstreamSpec,
    guard::{
        DefinitionAction,
        definitions::{self, Flag, OtherTools},
    },
    policy::pinning::{Pins, fingerprint},
};

/// A tool definition the guardrails flagged: held back (its tier holds) or listed with a
/// warning.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Screened {
    pub upstream: String,
    pub tool: String,
    pub fingerprint: String,
    pub flags: Vec<Flag>,
    pub held: bool,
}

/// Screens one definition under its upstream's guardrails; true if it is held back. A
/// definition an operator accepted (by fingerprint) passes.
pub(super) fn screen<T>(
    c: &mut Catalog<T>,
    up: &UpstreamSpec,
    tool: &Tool,
    others: &OtherTools,
    pins: &Pins,
) -> bool {
    let action = up.guardrails.definitions;
    if action == DefinitionAction::Off {
        return false;
    }
    let flags = definitions::screen(tool, &up.name, others);
    if flags.is_empty() {
        return false;
    }
    let fp = fingerprint(tool);
    if pins.vouched(&up.name, &tool.name, &fp) {
        return false;
    }
    let reasons = definitions::describe(&flags);
    let held = action == DefinitionAction::Hold;
    if held {
        c.conflicts.push(Conflict {
            upstream: up.name.clone(),
            item: tool.name.to_string(),
            reason: format!(
                "held back by the guardrails: {reasons}; an operator who has read it accepts \
                 it with POST /admin/pins/accept or `pins = {{ {} = \"{fp}\" }}`",
                tool.name
            ),
            fingerprint: Some(fp.clone()),
        });
    } else if pins.first_report(&up.name, &tool.name, &fp) {
        tracing::warn!(upstream = %up.name, tool = %tool.name, "tool definition flagged by the guardrails, listed (its tier warns): {reasons}");
    }
    c.screened.push(Screened {
        upstream: up.name.clone(),
        tool: tool.name.to_string(),
        fingerprint: fp,
        flags,
        held,
    });
    held
}
