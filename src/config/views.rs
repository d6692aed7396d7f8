//! `[views.NAME]` as written: globs on canonical names (`upstream/name`) and URIs.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// `[views.NAME]`: what `/mcp/NAME` lists and lets through (an absent kind: none of it).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawView {
    #[serde(default)]
    pub tools: Vec<Spanned<String>>,
    #[serde(default)]
    pub prompts: Vec<Spanned<String>>,
    #[serde(default)]
    pub resources: Vec<Spanned<String>>,
    /// Tools always listed, whatever a session selected (globs; within `tools`).
    #[serde(default)]
    pub pinned: Vec<Spanned<String>>,
    /// Descriptions shown instead of the upstream's, by canonical tool name.
    #[serde(default)]
    pub descriptions: BTreeMap<Spanned<String>, String>,
    /// `all` or `search` (default: `[gateway] tool_listing`).
    pub tool_listing: Option<crate::policy::view::Listing>,
}
