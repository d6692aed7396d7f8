//! Tool-definition admission in the catalog: a pinned definition that changed, or one the
//! guardrails flag, is held back (a conflict with its fingerprint, accepted by an operator) or
//! — flagged under `tool_definitions = "warn"` — listed with a warning.

use rmcp::model::Tool;

use super::catalog::{Catalog, Conflict};
use crate::{
    config::UpstreamSpec,
    guard::definition_hooks::{self as hooks, Verdicts},
    guard::{
        DefinitionAction,
        definitions::{self, Flag, OtherTools},
    },
    policy::pinning::{Pins, Verdict, fingerprint},
};

/// The flags of `definitions` hooks on this definition: a deny's reason, or — not answered
/// yet — a hold while the hook fails closed; asking is left to the caller of the build.
fn hook_flags<T>(
    c: &mut Catalog<T>,
    up: &UpstreamSpec,
    tool: &Tool,
    fp: &str,
    verdicts: &Verdicts,
) -> Vec<Flag> {
    let mut flags = Vec::new();
    for hook in up
        .guardrail_hooks
        .iter()
        .filter(|h| h.phases.contains(&crate::guard::hook::Phase::Definitions))
    {
        let detail = match verdicts.get(&hook.name, fp) {
            Some(hooks::Verdict::Pass) => continue,
            Some(hooks::Verdict::Held(why)) => format!("guardrail `{}`: {why}", hook.name),
            None => {
                c.unscreened.push(hooks::Pending {
                    hook: hook.clone(),
                    upstream: up.name.clone(),
                    tool: tool.clone(),
                    fingerprint: fp.to_owned(),
                });
                if hook.fail_open {
                    continue;
                }
                format!("guardrail `{}` has not screened it yet", hook.name)
            }
        };
        flags.push(Flag {
            kind: "hook",
            at: "definition".into(),
            detail,
        });
    }
    flags
}

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

/// Whether one definition is listed: a pinned tier holds a changed definition back until an
/// operator accepts it, and the guardrails screen every definition, changed or new — so a rug
/// pull (a definition that turns into an instruction) is held with both reasons, and accepting
/// it means accepting its flags too. Returns true if the definition is held back. A definition
/// an operator accepted (by fingerprint) passes both.
pub(super) fn held<T>(
    c: &mut Catalog<T>,
    up: &UpstreamSpec,
    tool: &Tool,
    others: &OtherTools,
    (pins, verdicts): (&Pins, &Verdicts),
) -> bool {
    let changed = match up.tier.pin_tool_definitions {
        true => match pins.check(&up.name, tool) {
            Verdict::Changed { accepted, now } => Some((accepted, now)),
            Verdict::Accepted => None,
        },
        false => None,
    };
    let action = up.guardrails.definitions;
    let mut flags = match action {
        DefinitionAction::Off => Vec::new(),
        _ => definitions::screen(tool, &up.name, others),
    };
    let fp = fingerprint(tool);
    // A hook's deny (or a fail-closed hook not yet answered) holds whatever the action.
    let hooked = hook_flags(c, up, tool, &fp, verdicts);
    let action = match hooked.is_empty() {
        true => action,
        false => DefinitionAction::Hold,
    };
    flags.extend(hooked);
    if changed.is_none() && flags.is_empty() {
        return false;
    }
    if pins.vouched(&up.name, &tool.name, &fp) {
        return false;
    }
    let reasons = definitions::describe(&flags);
    let accept = format!(
        "an operator who has read it accepts it with POST /admin/pins/accept{} or `pins = {{ {} = \"{fp}\" }}`",
        if flags.is_empty() {
            ""
        } else {
            " (with \"accept_flags\": true)"
        },
        tool.name
    );
    let reason = match (&changed, flags.is_empty()) {
        (Some((accepted, now)), true) => {
            format!("definition changed (accepted {accepted}, now {now}); held back until {accept}")
        }
        (Some((accepted, now)), false) => format!(
            "definition changed (accepted {accepted}, now {now}) and the new one is flagged by \
             the guardrails: {reasons}; held back until {accept}"
        ),
        (None, _) if action == DefinitionAction::Hold => {
            format!("held back by the guardrails: {reasons}; {accept}")
        }
        (None, _) => {
            if pins.first_report(&up.name, &tool.name, &fp) {
                tracing::warn!(upstream = %up.name, tool = %tool.name, "tool definition flagged by the guardrails, listed (its tier warns): {reasons}");
            }
            c.screened.push(Screened {
                upstream: up.name.clone(),
                tool: tool.name.to_string(),
                fingerprint: fp,
                flags,
                held: false,
            });
            return false;
        }
    };
    c.conflicts.push(Conflict {
        upstream: up.name.clone(),
        item: tool.name.to_string(),
        reason,
        fingerprint: Some(fp.clone()),
        flags: flags.clone(),
    });
    if !flags.is_empty() {
        c.screened.push(Screened {
            upstream: up.name.clone(),
            tool: tool.name.to_string(),
            fingerprint: fp,
            flags,
            held: true,
        });
    }
    true
}
