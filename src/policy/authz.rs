//! Authorization (F5): roles grant globs on namespaced tool and prompt names and resource URIs.
//! A call to something the caller may not use is answered exactly like a call to something that
//! does not exist, so refusals do not reveal what exists.

use std::{collections::BTreeMap, sync::Arc};

use globset::{Glob, GlobSet, GlobSetBuilder};

use super::view::Scope;
use crate::guard::SecretAction;

/// What one identity may use.
#[derive(Debug, Clone)]
pub struct Access {
    unrestricted: bool,
    /// Highest tier rank this identity may reach; `None` = any.
    max_rank: Option<u32>,
    tools: GlobSet,
    prompts: GlobSet,
    resources: GlobSet,
    /// The roles this access was granted from (approvers are named by role).
    roles: Vec<String>,
    /// A peer gateway: it sees only exported flows (and what its roles grant).
    peer: bool,
    /// The least a secret in a result gets for this identity (its roles' guardrails).
    results_floor: SecretAction,
    /// The view it comes through (`/mcp/<name>` or its roles' default): narrows all the above.
    scope: Option<Arc<Scope>>,
}

impl Default for Access {
    fn default() -> Self {
        Self {
            unrestricted: false,
            max_rank: None,
            tools: GlobSet::empty(),
            prompts: GlobSet::empty(),
            resources: GlobSet::empty(),
            roles: Vec::new(),
            peer: false,
            results_floor: SecretAction::Off,
            scope: None,
        }
    }
}

impl Access {
    pub fn unrestricted() -> Self {
        Self {
            unrestricted: true,
            ..Self::default()
        }
    }
    /// Granted everything by its identity (a view may still narrow what it lists and calls).
    pub fn is_unrestricted(&self) -> bool {
        self.unrestricted
    }

    /// Lists and calls everything: unrestricted, through no view.
    pub fn sees_all(&self) -> bool {
        self.unrestricted && self.scope.is_none()
    }

    /// The same access through `scope` (replacing its roles' default view).
    pub fn through(mut self, scope: Arc<Scope>) -> Self {
        self.scope = Some(scope);
        self
    }

    /// The view this access comes through.
    pub fn scope(&self) -> Option<&Arc<Scope>> {
        self.scope.as_ref()
    }

    pub fn is_peer(&self) -> bool {
        self.peer
    }

    /// The same access, as a peer gateway's.
    pub fn as_peer(mut self) -> Self {
        self.peer = true;
        self
    }
    /// Whether upstreams of a tier with this rank are within reach.
    pub fn tier(&self, rank: u32) -> bool {
        self.unrestricted || self.max_rank.is_none_or(|max| rank <= max)
    }
    pub fn tool(&self, name: &str) -> bool {
        (self.unrestricted || self.tools.is_match(name) || crate::names::granted_to_all(name))
            && self.scope.as_ref().is_none_or(|s| s.tool(name))
    }
    pub fn prompt(&self, name: &str) -> bool {
        (self.unrestricted || self.prompts.is_match(name))
            && self.scope.as_ref().is_none_or(|s| s.prompt(name))
    }
    pub fn resource(&self, uri: &str) -> bool {
        (self.unrestricted || self.resources.is_match(uri))
            && self.scope.as_ref().is_none_or(|s| s.resource(uri))
    }
    /// Whether the identity holds one of `roles` (an unrestricted identity holds no role: it
    /// may call anything, but approving for a role needs that role).
    /// The roles this access was granted from.
    pub fn roles(&self) -> &[String] {
        &self.roles
    }

    /// How strictly secrets in results are treated for this identity at least.
    pub fn results_floor(&self) -> SecretAction {
        self.results_floor
    }

    pub fn has_any_role(&self, roles: &[String]) -> bool {
        self.roles.iter().any(|r| roles.contains(r))
    }
}

/// One role as configured: glob patterns per kind.
#[derive(Debug, Clone, Default)]
pub struct Role {
    pub tools: Vec<String>,
    pub prompts: Vec<String>,
    pub resources: Vec<String>,
    /// Rank of the role's `max_tier`; `None` = no cap.
    pub max_rank: Option<u32>,
    /// At least this for secrets in results (`None`: the upstream's guardrails decide).
    pub secrets_in_results: Option<SecretAction>,
    /// The view its holders come through at `/mcp` (`None`: no narrowing).
    pub view: Option<Arc<Scope>>,
}

/// All roles by name.
#[derive(Debug, Clone, Default)]
pub struct Roles(pub BTreeMap<String, Role>);

impl Roles {
    /// The union of what the named roles grant; unknown names grant nothing.
    pub fn access(&self, names: &[String]) -> Access {
        let mut t = GlobSetBuilder::new();
        let mut p = GlobSetBuilder::new();
        let mut r = GlobSetBuilder::new();
        // The most permissive role wins: uncapped if any role is uncapped.
        let mut max_rank = Some(0);
        // The most permissive role wins here too: a role without a floor has none.
        let mut floor: Option<SecretAction> = None;
        // A default view narrows only when every role has one (a role without one sees all
        // it grants); several views make their union.
        let mut views: Option<Vec<Arc<Scope>>> = Some(Vec::new());
        for role in names.iter().filter_map(|n| self.0.get(n)) {
            match (&mut views, &role.view) {
                (Some(vs), Some(v)) if !vs.iter().any(|x| x.name == v.name) => vs.push(v.clone()),
                (_, None) => views = None,
                _ => {}
            }
            let f = role.secrets_in_results.unwrap_or(SecretAction::Off);
            floor = Some(floor.map_or(f, |g| g.min(f)));
            add(&mut t, &role.tools);
            add(&mut p, &role.prompts);
            add(&mut r, &role.resources);
            max_rank = match (max_rank, role.max_rank) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
        }
        let scope = match views.as_deref() {
            None | Some([]) => None,
            Some([one]) => Some(one.clone()),
            Some(many) => Some(Arc::new(Scope::union(many))),
        };
        Access {
            scope,
            unrestricted: false,
            max_rank,
            tools: t.build().unwrap_or_else(|_| GlobSet::empty()),
            prompts: p.build().unwrap_or_else(|_| GlobSet::empty()),
            resources: r.build().unwrap_or_else(|_| GlobSet::empty()),
            peer: false,
            results_floor: floor.unwrap_or(SecretAction::Off),
            roles: names
                .iter()
                .filter(|n| self.0.contains_key(*n))
                .cloned()
                .collect(),
        }
    }
}

fn add(b: &mut GlobSetBuilder, globs: &[String]) {
    // Patterns were validated at config load; a bad one here grants nothing.
    for g in globs {
        if let Ok(glob) = Glob::new(g) {
            b.add(glob);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_union_and_unknown_roles_grant_nothing() {
        let mut roles = Roles::default();
        roles.0.insert(
            "reader".into(),
            Role {
                tools: vec!["*.echo".into()],
                ..Default::default()
            },
        );
        roles.0.insert(
            "notes".into(),
            Role {
                tools: vec!["notes.*".into()],
                resources: vec!["notes://*".into()],
                ..Default::default()
            },
        );
        let a = roles.access(&["reader".into(), "notes".into()]);
        assert!(a.tool("demo.echo") && a.tool("notes.save") && !a.tool("demo.crash"));
        assert!(a.resource("notes://readme") && !a.resource("demo://readme"));
        let none = roles.access(&["nope".into()]);
        assert!(!none.tool("demo.echo") && !none.prompt("x"));
        assert!(Access::unrestricted().tool("anything"));
    }
}
