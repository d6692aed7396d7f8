//! Views (`[views.NAME]`): named subsets of the catalog, served at `/mcp/<name>` and attachable
//! as a role's default. A view narrows what is listed and callable through it; it never grants.

use std::{collections::BTreeMap, collections::HashMap, sync::Arc};

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::names::BUILTIN_TOOLS;

/// The globs of a view (exposed names and URIs), compiled; what [`super::authz::Access`] checks.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The view's name (`a+b` for the union of several roles' default views).
    pub name: Arc<str>,
    globs: [Vec<String>; 3],
    tools: GlobSet,
    prompts: GlobSet,
    resources: GlobSet,
}

pub(crate) fn compile(globs: &[String]) -> GlobSet {
    let mut b = GlobSetBuilder::new();
    // Patterns were validated at config load; a bad one here selects nothing.
    for g in globs {
        if let Ok(glob) = Glob::new(g) {
            b.add(glob);
        }
    }
    b.build().unwrap_or_else(|_| GlobSet::empty())
}

impl Scope {
    /// A scope of tool, prompt and resource globs; an empty list selects nothing of that kind.
    pub fn new(
        name: &str,
        tools: Vec<String>,
        prompts: Vec<String>,
        resources: Vec<String>,
    ) -> Self {
        Self {
            name: name.into(),
            tools: compile(&tools),
            prompts: compile(&prompts),
            resources: compile(&resources),
            globs: [tools, prompts, resources],
        }
    }

    /// What any of `scopes` selects (a caller whose roles name several default views).
    pub fn union(scopes: &[Arc<Scope>]) -> Self {
        let name = scopes
            .iter()
            .map(|s| s.name.as_ref())
            .collect::<Vec<_>>()
            .join("+");
        let all = |k: usize| scopes.iter().flat_map(|s| s.globs[k].clone()).collect();
        Self::new(&name, all(0), all(1), all(2))
    }

    /// The tool, prompt and resource globs, as configured.
    pub fn globs(&self) -> &[Vec<String>; 3] {
        &self.globs
    }

    pub fn tool(&self, name: &str) -> bool {
        BUILTIN_TOOLS.contains(&name) || self.tools.is_match(name)
    }
    pub fn prompt(&self, name: &str) -> bool {
        self.prompts.is_match(name)
    }
    pub fn resource(&self, uri: &str) -> bool {
        self.resources.is_match(uri)
    }
}

/// How a session's `tools/list` is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Listing {
    /// Every tool the caller may call.
    #[default]
    All,
    /// Past the threshold: the pinned tools, the session's selection and the search tools.
    Search,
}

/// One view as loaded.
#[derive(Debug, Clone)]
pub struct View {
    pub scope: Arc<Scope>,
    /// Tools listed whatever the session selected (exposed-name globs), compiled and as written.
    pub pinned: GlobSet,
    pub pinned_globs: Vec<String>,
    /// Descriptions the view shows instead of the upstream's, by exposed name.
    pub descriptions: HashMap<String, String>,
    /// `None`: `[gateway] tool_listing`.
    pub listing: Option<Listing>,
}

impl View {
    pub fn pinned(globs: &[String]) -> GlobSet {
        compile(globs)
    }
}

/// How sessions list tools when the catalog is large (`[gateway] tool_listing` and friends).
#[derive(Debug, Clone)]
pub struct ListingSettings {
    pub listing: Listing,
    /// With `search`: above this many callable tools a session starts small.
    pub threshold: usize,
    /// Most tools `select_tools` may put in a session's working set.
    pub max_selected: usize,
    /// Tools listed in every session whatever it selected (outside views), compiled and as
    /// written.
    pub pinned: GlobSet,
    pub pinned_globs: Vec<String>,
}

impl Default for ListingSettings {
    fn default() -> Self {
        Self {
            listing: Listing::All,
            threshold: DEFAULT_THRESHOLD,
            max_selected: DEFAULT_MAX_SELECTED,
            pinned: GlobSet::empty(),
            pinned_globs: Vec::new(),
        }
    }
}

/// `[gateway] tool_listing_threshold` when unset.
pub const DEFAULT_THRESHOLD: usize = 100;
/// `[gateway] max_selected_tools` when unset.
pub const DEFAULT_MAX_SELECTED: usize = 64;

/// Every view, by name, and the gateway's listing settings.
#[derive(Debug, Clone, Default)]
pub struct Views {
    pub views: BTreeMap<String, Arc<View>>,
    pub settings: ListingSettings,
}

impl Views {
    pub fn get(&self, name: &str) -> Option<&Arc<View>> {
        self.views.get(name)
    }

    /// The names, for a refusal that lists them.
    pub fn names(&self) -> Vec<&str> {
        self.views.keys().map(String::as_str).collect()
    }

    /// Whether any session can list in search mode (the search tools are served then).
    pub fn searching(&self) -> bool {
        self.settings.listing == Listing::Search
            || self
                .views
                .values()
                .any(|v| v.listing == Some(Listing::Search))
    }

    /// The listing mode through `view` (or outside any).
    pub fn listing(&self, view: Option<&View>) -> Listing {
        view.and_then(|v| v.listing)
            .unwrap_or(self.settings.listing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_selects_by_glob_and_always_passes_the_builtin_tools() {
        let s = Scope::new(
            "gh",
            vec!["github__*".into()],
            vec![],
            vec!["notes://*".into()],
        );
        assert!(s.tool("github__create_issue") && !s.tool("jira__create_issue"));
        assert!(s.tool(crate::names::APPROVE_TOOL) && s.tool(crate::names::FIND_TOOLS));
        assert!(!s.prompt("github__review"), "no prompt globs: no prompts");
        assert!(s.resource("notes://a") && !s.resource("demo://a"));
        let both = Scope::union(&[
            Arc::new(s),
            Arc::new(Scope::new("jira", vec!["jira__*".into()], vec![], vec![])),
        ]);
        assert_eq!(&*both.name, "gh+jira");
        assert!(both.tool("jira__x") && both.tool("github__y") && !both.tool("demo__z"));
    }
}
