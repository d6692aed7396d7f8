//! Trust tiers (F6): `trust-tiers/<name>.toml`, raw and validated.

use std::{path::Path, time::Duration};

use serde::Deserialize;

use super::{Diagnostic, line_of};
use crate::policy::trust::{Tier, Writes};

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
    #[serde(default)]
    pin_tool_definitions: bool,
    max_response_bytes: Option<usize>,
    #[serde(default)]
    credential_classes: Vec<String>,
    timeouts: RawTimeouts,
    rate_limit: Option<RawRate>,
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
pub fn load(dir: &Path, name: &str) -> Result<Tier, Vec<Diagnostic>> {
    let path = dir.join(format!("{name}.toml"));
    let file = path.display().to_string();
    let diag = |line: usize, message: String| Diagnostic {
        file: file.clone(),
        line,
        message,
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| vec![diag(0, format!("cannot read trust tier `{name}`: {e}"))])?;
    let raw: RawTier = toml::from_str(&text).map_err(|e| {
        let line = e.span().map(|s| line_of(&text, s.start)).unwrap_or(0);
        vec![diag(line, e.message().trim().to_owned())]
    })?;
    let writes = match raw.writes.get_ref().as_str() {
        "always" => Writes::Always,
        "declared" => Writes::Declared,
        "never" => Writes::Never,
        other => {
            return Err(vec![diag(
                line_of(&text, raw.writes.span().start),
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
    Ok(Tier {
        name: name.to_owned(),
        rank: raw.rank,
        writes,
        trust_annotations: raw.trust_annotations,
        approval_for_writes: raw.approval_for_writes,
        pin_tool_definitions: raw.pin_tool_definitions,
        max_response_bytes: raw.max_response_bytes,
        credential_classes: raw.credential_classes,
        read_timeout: Duration::from_millis(t.read_ms),
        write_timeout: Duration::from_millis(t.write_ms),
        long_timeout: Duration::from_millis(t.long_ms),
        rate_limit,
    })
}
