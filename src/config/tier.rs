//! Trust tiers (F6): `trust-tiers/<name>.toml`, raw and validated.

use std::{path::Path, time::Duration};

use serde::Deserialize;

use super::{Diagnostic, line_of};
use crate::policy::trust::{Approval, Tier, Writes};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTier {
    /// Default 0: a custom tier without a rank is the least trusted.
    #[serde(default)]
    rank: u32,
    writes: toml::Spanned<String>,
    #[serde(default = "yes")]
    trust_annotations: bool,
    #[serde(default)]
    approval_for_writes: bool,
    /// `plan` (default) or `elicit`.
    approval: Option<Approval>,
    #[serde(default)]
    approvers: Vec<String>,
    #[serde(default)]
    pin_tool_definitions: bool,
    max_response_bytes: Option<usize>,
    #[serde(default)]
    credential_classes: Vec<String>,
    timeouts: RawTimeouts,
    rate_limit: Option<RawRate>,
    /// What happens to secrets in arguments and results (default: recorded only).
    #[serde(default)]
    guardrails: crate::guard::RawPolicy,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    read_ms: u64,
    write_ms: u64,
    long_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRate {
    per_second: u32,
    burst: Option<u32>,
}

/// Loads and validates `<dir>/<name>.toml`.
/// The shipped tiers, built into the binary: a config copied away from this repository still
/// finds them; a file of the same name in the tiers folder takes precedence.
pub const BUILT_IN: [(&str, &str); 3] = [
    ("high", include_str!("../../trust-tiers/high.toml")),
    ("medium", include_str!("../../trust-tiers/medium.toml")),
    ("low", include_str!("../../trust-tiers/low.toml")),
];

pub fn load(dir: &Path, name: &str) -> Result<Tier, Vec<Diagnostic>> {
    let path = dir.join(format!("{name}.toml"));
    let built_in = BUILT_IN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t);
    let (file, text) = match (std::fs::read_to_string(&path), built_in) {
        (Ok(text), _) => (path.display().to_string(), text),
        (Err(e), Some(text)) if e.kind() == std::io::ErrorKind::NotFound => {
            (format!("(built-in tier `{name}`)"), text.to_owned())
        }
        (Err(e), _) => {
            return Err(vec![Diagnostic {
                file: path.display().to_string(),
                line: 0,
                message: format!("cannot read trust tier `{name}`: {e}"),
            }]);
        }
    };
    parse(&file, name, &text)
}

/// Parses and validates one tier's text (`file` names it in diagnostics).
pub fn parse(file: &str, name: &str, text: &str) -> Result<Tier, Vec<Diagnostic>> {
    let diag = |line: usize, message: String| Diagnostic {
        file: file.to_owned(),
        line,
        message,
    };
    let raw: RawTier = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(0);
        vec![diag(line, e.message().trim().to_owned())]
    })?;
    let writes = match raw.writes.get_ref().as_str() {
        "always" => Writes::Always,
        "declared" => Writes::Declared,
        "never" => Writes::Never,
        other => {
            return Err(vec![diag(
                line_of(text, raw.writes.span().start),
                format!("writes: `{other}` is not one of always, declared, never"),
            )]);
        }
    };
    let t = &raw.timeouts;
    if t.read_ms == 0 || t.write_ms == 0 || t.long_ms == 0 {
        return Err(vec![diag(0, "timeouts must be greater than 0".into())]);
    }
    let rate_limit = match raw.rate_limit {
        Some(r) if r.per_second == 0 => {
            return Err(vec![diag(
                0,
                "rate_limit.per_second must be greater than 0".into(),
            )]);
        }
        Some(r) => Some((r.per_second, r.burst.unwrap_or(r.per_second).max(1))),
        None => None,
    };
    let guardrails = raw
        .guardrails
        .over(&crate::guard::Policy::untiered())
        .map_err(|e| {
            let line = text
                .lines()
                .position(|l| l.trim_start().starts_with("[guardrails"))
                .map_or(0, |i| i + 1);
            vec![diag(line, format!("guardrails: {e}"))]
        })?;
    Ok(Tier {
        name: name.to_owned(),
        rank: raw.rank,
        writes,
        trust_annotations: raw.trust_annotations,
        approval_for_writes: raw.approval_for_writes,
        approval: match raw.approval {
            None | Some(Approval::None) => Approval::Plan,
            Some(a) => a,
        },
        approvers: raw.approvers,
        pin_tool_definitions: raw.pin_tool_definitions,
        max_response_bytes: raw.max_response_bytes,
        credential_classes: raw.credential_classes,
        read_timeout: Duration::from_millis(t.read_ms),
        write_timeout: Duration::from_millis(t.write_ms),
        long_timeout: Duration::from_millis(t.long_ms),
        rate_limit,
        guardrails,
        guardrail_hooks: raw.guardrails.hooks.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_tiers_are_built_in_and_files_override_them() {
        let empty = tempfile::tempdir().unwrap();
        for name in ["high", "medium", "low"] {
            let t = load(empty.path(), name).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(t.name, name);
        }
        assert_eq!(
            load(empty.path(), "medium").unwrap().writes,
            Writes::Declared
        );
        let err = load(empty.path(), "custom").unwrap_err();
        assert!(
            err[0].message.contains("cannot read trust tier `custom`"),
            "{err:?}"
        );
        std::fs::write(
            empty.path().join("high.toml"),
            "rank = 9\nwrites = \"never\"\n[timeouts]\nread_ms = 1\nwrite_ms = 1\nlong_ms = 1\n",
        )
        .unwrap();
        let own = load(empty.path(), "high").unwrap();
        assert_eq!((own.rank, own.writes), (9, Writes::Never), "the file wins");
        assert_eq!(own.guardrails, crate::guard::Policy::untiered());
        use crate::guard::SecretAction::*;
        let low = load(empty.path(), "low").unwrap().guardrails;
        assert_eq!((low.arguments, low.results), (Block, Redact));
        let medium = load(empty.path(), "medium").unwrap().guardrails;
        assert_eq!((medium.arguments, medium.results), (Redact, Redact));
        use crate::guard::DefinitionAction::{Hold, Warn};
        assert_eq!((low.definitions, medium.definitions), (Hold, Hold));
        let high = load(tempfile::tempdir().unwrap().path(), "high").unwrap();
        assert_eq!(high.guardrails.definitions, Warn);
        use crate::guard::InjectionAction::{Audit as Reported, Mark, Off as Trusted};
        assert_eq!(
            (
                low.injections,
                medium.injections,
                high.guardrails.injections
            ),
            (Mark, Reported, Trusted)
        );
    }
}
