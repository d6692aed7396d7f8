//! `[guardrail_hooks.NAME]`: external guardrail services (README, "Guardrails").

use serde::Deserialize;
use toml::Spanned;

use crate::guard::hook::Phase;

/// One external guardrail service.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHook {
    /// Where decisions are asked (`http://` or `https://`), one JSON `POST` per phase.
    pub url: Spanned<String>,
    /// How long an answer may take (default 2,000 ms, at most 60,000).
    pub timeout_ms: Option<Spanned<u64>>,
    /// `closed` (default: a hook that fails refuses the call) or `open` (it is skipped).
    pub failure: Option<Spanned<String>>,
    /// When it is asked (default both): `request`, `response`.
    pub phases: Option<Vec<Phase>>,
    /// `env:NAME` or `file:PATH`, sent as `Authorization: Bearer …`.
    pub token: Option<Spanned<String>>,
}
