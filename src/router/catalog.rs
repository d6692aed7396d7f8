//! The merged view of every ready upstream: exposed names, routes back, resource URI rules.
//!
//! Resource URI routing rule (documented in README): URIs are never rewritten. A `resources/read`
//! or `resources/subscribe` goes to (1) the upstream that lists that exact URI, else (2) the
//! upstream with a matching resource template, the template with the longest literal prefix
//! winning. When two upstreams list the same URI, or two templates match with equal literal
//! prefixes, the first upstream in config order keeps it and the other is reported as a
//! conflict in the logs and in `/readyz` — never silently shadowed.

use std::{collections::HashMap, sync::Arc};

use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};

use super::screening;
pub use super::screening::Screened;
use crate::{
    config::UpstreamSpec,
    guard::definitions::OtherTools,
    names::{self as namespace, Naming, OWN_NAMESPACE, PrefixMode},
    policy::{arguments::ArgCheck, pinning::Pins},
};

/// The lists an upstream served at its last refresh.
#[derive(Debug, Default, Clone)]
pub struct Lists {
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    /// Set by [`Lists::indexed`]: the upstream's own tool name -> its place in `tools`.
    by_name: HashMap<String, usize>,
    /// Set by [`Lists::indexed`]: the compiled input schema of each tool whose schema compiles.
    checks: HashMap<String, Arc<ArgCheck>>,
    /// Set by [`Lists::indexed`]: tools whose input schema does not compile, and why (they are
    /// served unchecked).
    pub broken_schemas: Vec<(String, String)>,
}

impl Lists {
    /// Indexes the tools by name and compiles their input schemas — once per stored list, so
    /// calls never compile a schema.
    pub fn indexed(mut self) -> Self {
        self.by_name.clear();
        self.checks.clear();
        self.broken_schemas.clear();
        for (i, t) in self.tools.iter().enumerate() {
            self.by_name.insert(t.name.to_string(), i);
            let schema = serde_json::Value::Object((*t.input_schema).clone());
            match ArgCheck::compile(&schema) {
                Ok(c) => {
                    self.checks.insert(t.name.to_string(), Arc::new(c));
                }
                Err(e) => self.broken_schemas.push((t.name.to_string(), e.0)),
            }
        }
        self
    }

    /// A tool by the upstream's own name.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.by_name.get(name).and_then(|&i| self.tools.get(i))
    }

    /// The compiled input schema of a tool (`None` when it does not compile).
    pub fn check(&self, name: &str) -> Option<&Arc<ArgCheck>> {
        self.checks.get(name)
    }
}

/// One ready upstream as the catalog sees it: the handle its routes lead to (whatever the
/// caller routes with), its spec and the lists it served last.
#[derive(Debug)]
pub struct Member<T> {
    pub handle: T,
    pub spec: Arc<UpstreamSpec>,
    pub lists: Arc<Lists>,
}

/// Where an exposed name leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub owner: Owner,
    /// The owner's own name for the tool or prompt.
    pub name: String,
}

/// Who answers an exposed name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The member (upstream) at this index of the catalog.
    Member(usize),
    /// The gateway itself (its own tools, in the reserved namespace [`OWN_NAMESPACE`]).
    Gateway,
}

impl Route {
    /// The member index, for routes to an upstream.
    pub fn member(&self) -> Option<usize> {
        match self.owner {
            Owner::Member(i) => Some(i),
            Owner::Gateway => None,
        }
    }
}

/// An item that could not be exposed, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Conflict {
    pub upstream: String,
    pub item: String,
    pub reason: String,
    /// For a held-back tool definition: the fingerprint that would accept it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// Its screening flags, which accepting it accepts too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<crate::guard::definitions::Flag>,
}

/// Immutable merged lists; rebuilt whenever an upstream's lists change.
#[derive(Debug)]
pub struct Catalog<T> {
    pub tools: Vec<Tool>,
    tool_routes: HashMap<String, Route>,
    pub prompts: Vec<Prompt>,
    prompt_routes: HashMap<String, Route>,
    pub resources: Vec<Resource>,
    resource_routes: HashMap<String, usize>,
    pub templates: Vec<ResourceTemplate>,
    template_routes: Vec<(UriTemplate, usize)>,
    pub conflicts: Vec<Conflict>,
    /// Tool definitions the guardrails flagged (the held ones are in `conflicts` too).
    pub screened: Vec<Screened>,
    /// Definitions a `definitions` hook has still to answer about.
    pub unscreened: Vec<crate::guard::definition_hooks::Pending>,
    /// Names the portable rule changed: (the name without it, the exposed portable form).
    pub portable_forms: Vec<(String, String)>,
    /// Serves resource URIs that nothing lists or matches (see `[gateway] resource_default`).
    resource_fallback: Option<usize>,
    /// The handles of the members this catalog was built from; route indexes point into it,
    /// so a call resolved on one catalog reaches the right upstream even if a reload replaced
    /// the set.
    members: Vec<T>,
}

impl<T> Default for Catalog<T> {
    fn default() -> Self {
        Self {
            tools: Vec::new(),
            tool_routes: HashMap::new(),
            prompts: Vec::new(),
            prompt_routes: HashMap::new(),
            resources: Vec::new(),
            resource_routes: HashMap::new(),
            templates: Vec::new(),
            template_routes: Vec::new(),
            conflicts: Vec::new(),
            screened: Vec::new(),
            unscreened: Vec::new(),
            portable_forms: Vec::new(),
            resource_fallback: None,
            members: Vec::new(),
        }
    }
}

impl<T> Catalog<T> {
    /// The member a route index points at.
    pub fn upstream(&self, idx: usize) -> Option<&T> {
        self.members.get(idx)
    }

    /// The route index of the first member that `is` picks.
    pub fn member_index(&self, is: impl Fn(&T) -> bool) -> Option<usize> {
        self.members.iter().position(is)
    }

    /// Builds the merged view from the gateway's own tools (`own`, named as exposed) and the
    /// ready upstreams' last lists, in config order. `configured` names every configured
    /// upstream (ready or not), whose namespaces bare names may not enter.
    pub fn build(
        own: &[Tool],
        members: Vec<Member<T>>,
        configured: &[String],
        naming: &Naming,
        pins: &Pins,
        verdicts: &crate::guard::definition_hooks::Verdicts,
    ) -> Self {
        let separator = naming.separator.as_str();
        let names = configured;
        let mut c = Catalog::default();
        // name -> owner, for collision messages
        let mut owners: HashMap<String, String> = HashMap::new();
        for tool in own {
            owners.insert(tool.name.to_string(), OWN_NAMESPACE.to_owned());
            c.tool_routes.insert(
                tool.name.to_string(),
                Route {
                    owner: Owner::Gateway,
                    name: tool.name.to_string(),
                },
            );
            c.tools.push(tool.clone());
        }
        let mut specs = Vec::with_capacity(members.len());
        let others = OtherTools::new(
            names.iter().cloned().chain([OWN_NAMESPACE.to_owned()]),
            separator,
        )
        .with_bare_names(members.iter().flat_map(|m| {
            m.lists
                .tools
                .iter()
                .map(|t| (t.name.to_string(), m.spec.name.clone()))
        }));
        for (idx, m) in members.into_iter().enumerate() {
            let Member {
                handle,
                spec,
                lists,
            } = m;
            c.members.push(handle);
            specs.push(spec.name.clone());
            let up = &*spec;
            for tool in &lists.tools {
                if !spec.exposes(&tool.name) {
                    continue;
                }
                if screening::held(&mut c, up, tool, &others, (pins, verdicts)) {
                    continue;
                }
                let alias = spec
                    .rename
                    .get(tool.name.as_ref())
                    .map(String::as_str)
                    .unwrap_or(&tool.name);
                let (exposed, original) = naming.expose(&spec.name, spec.prefix, alias);
                if let Err(why) = namespace::check_tool_name(&exposed) {
                    let hint = if spec.peer {
                        crate::federation::import::name_hint(&spec.name, separator)
                    } else {
                        String::new()
                    };
                    c.conflict(up, &exposed, format!("exposed name {why}{hint}"));
                    continue;
                }
                if let Some(reason) =
                    collision(&exposed, up, spec.prefix, separator, names, &owners)
                {
                    c.conflict(up, &exposed, reason);
                    continue;
                }
                owners.insert(exposed.clone(), spec.name.clone());
                if let Some(original) = original {
                    c.portable_forms.push((original, exposed.clone()));
                }
                let mut t = tool.clone();
                t.name = exposed.clone().into();
                if spec.peer {
                    crate::federation::import::mark(&mut t, &spec.name);
                }
                if let Some(d) = spec.descriptions.get(tool.name.as_ref()) {
                    t.description = Some(d.clone().into());
                }
                c.tool_routes.insert(
                    exposed,
                    Route {
                        owner: Owner::Member(idx),
                        name: tool.name.to_string(),
                    },
                );
                c.tools.push(t);
            }
            for prompt in &lists.prompts {
                let (exposed, original) = naming.expose(&spec.name, spec.prefix, &prompt.name);
                if let Some(original) = original {
                    c.portable_forms.push((original, exposed.clone()));
                }
                if c.prompt_routes.contains_key(&exposed) {
                    c.conflict(
                        up,
                        &exposed,
                        "prompt name already taken by another upstream".into(),
                    );
                    continue;
                }
                let mut p = prompt.clone();
                p.name = exposed.clone();
                c.prompt_routes.insert(
                    exposed,
                    Route {
                        owner: Owner::Member(idx),
                        name: prompt.name.clone(),
                    },
                );
                c.prompts.push(p);
            }
            for r in &lists.resources {
                if let Some(first) = c.resource_routes.get(&r.uri) {
                    let first = specs.get(*first).cloned().unwrap_or_default();
                    c.conflict(
                        up,
                        &r.uri,
                        format!("resource URI also served by upstream `{first}`, which keeps it"),
                    );
                    continue;
                }
                c.resource_routes.insert(r.uri.clone(), idx);
                c.resources.push(r.clone());
            }
            for t in &lists.templates {
                let parsed = UriTemplate::parse(&t.uri_template);
                if let Some((_, first)) = c
                    .template_routes
                    .iter()
                    .find(|(p, _)| p.source == parsed.source)
                {
                    let first = specs.get(*first).cloned().unwrap_or_default();
                    c.conflict(
                        up,
                        &t.uri_template,
                        format!(
                            "resource template also served by upstream `{first}`, which keeps it"
                        ),
                    );
                    continue;
                }
                c.template_routes.push((parsed, idx));
                c.templates.push(t.clone());
            }
        }
        c.tools.sort_by(|a, b| a.name.cmp(&b.name));
        c.prompts.sort_by(|a, b| a.name.cmp(&b.name));
        // Every list is sorted by its key: deterministic, and what cursors resume after.
        c.resources.sort_by(|a, b| a.uri.cmp(&b.uri));
        c.templates
            .sort_by(|a, b| a.uri_template.cmp(&b.uri_template));
        // Once per reason: a rebuild (any upstream's list change) repeats every conflict.
        for k in &c.conflicts {
            if pins.first_conflict(&k.upstream, &k.item, &k.reason) {
                tracing::warn!(upstream = %k.upstream, item = %k.item, "held back: {}", k.reason);
            }
        }
        c
    }

    fn conflict(&mut self, up: &UpstreamSpec, item: &str, reason: String) {
        self.conflicts.push(Conflict {
            upstream: up.name.clone(),
            item: item.to_owned(),
            reason,
            fingerprint: None,
            flags: Vec::new(),
        });
    }

    /// The exposed definition of a tool (the list is sorted by name).
    pub fn tool_def(&self, exposed: &str) -> Option<&Tool> {
        self.tools
            .binary_search_by(|t| t.name.as_ref().cmp(exposed))
            .ok()
            .and_then(|i| self.tools.get(i))
    }

    pub fn tool(&self, exposed: &str) -> Option<&Route> {
        self.tool_routes.get(exposed)
    }

    pub fn prompt(&self, exposed: &str) -> Option<&Route> {
        self.prompt_routes.get(exposed)
    }

    /// The upstream a resource URI routes to (see the module doc for the rule).
    pub fn resource(&self, uri: &str) -> Option<usize> {
        self.routed_resource(uri).or(self.resource_fallback)
    }

    /// The upstream that lists `uri` or whose template matches it best.
    fn routed_resource(&self, uri: &str) -> Option<usize> {
        if let Some(idx) = self.resource_routes.get(uri) {
            return Some(*idx);
        }
        self.template_routes
            .iter()
            .filter(|(t, _)| t.matches(uri))
            .max_by_key(|(t, idx)| (t.literal_prefix_len(), std::cmp::Reverse(*idx)))
            .map(|(_, idx)| *idx)
    }

    /// Sends the URIs nothing lists or matches to the member at `idx`.
    pub fn with_resource_fallback(mut self, idx: Option<usize>) -> Self {
        self.resource_fallback = idx.filter(|i| *i < self.members.len());
        self
    }

    /// A bounded name for a resource URI (metric labels): the URI itself when an upstream
    /// lists it, else the template that routes it.
    pub fn resource_label(&self, uri: &str) -> Option<&str> {
        if let Some((listed, _)) = self.resource_routes.get_key_value(uri) {
            return Some(listed);
        }
        self.template_routes
            .iter()
            .filter(|(t, _)| t.matches(uri))
            .max_by_key(|(t, idx)| (t.literal_prefix_len(), std::cmp::Reverse(*idx)))
            .map(|(t, _)| t.source.as_str())
            .or(self.resource_fallback.map(|_| "_unlisted"))
    }

    /// The upstream serving a resource template, by its exact template string.
    pub fn template(&self, uri_template: &str) -> Option<usize> {
        self.template_routes
            .iter()
            .find(|(t, _)| t.source == uri_template)
            .map(|(_, idx)| *idx)
            .or_else(|| self.routed_resource(uri_template))
    }

    /// Exposed tool names closest to `name`, for "did you mean" hints: the same tool name in
    /// another namespace first (`read_file` → `filesystem<sep>read_file`), then by edit distance.
    pub fn closest_tools(
        &self,
        name: &str,
        sep: &str,
        n: usize,
        visible: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        // Bounded work before any rate limit applies: a name longer than any valid tool name
        // gets no suggestions, and at most `MAX_COMPARED` candidates are compared.
        const MAX_COMPARED: usize = 2_000;
        if name.chars().count() > namespace::MAX_TOOL_NAME_CHARS {
            return Vec::new();
        }
        let local = if sep.is_empty() {
            name
        } else {
            name.rsplit(sep).next().unwrap_or(name)
        };
        let mut scored: Vec<(bool, usize, &str)> = self
            .tools
            .iter()
            .filter(|t| visible(&t.name))
            .take(MAX_COMPARED)
            .map(|t| {
                let other = t.name.rsplit(sep).next().unwrap_or(&t.name);
                let same_tool = !sep.is_empty() && other == local;
                (
                    !same_tool,
                    namespace::edit_distance(name, &t.name),
                    t.name.as_ref(),
                )
            })
            .collect();
        scored.sort();
        scored
            .into_iter()
            .take(n)
            .map(|(_, _, s)| s.to_owned())
            .collect()
    }
}

/// Why `exposed` cannot be added, if it collides with an existing name or namespace.
fn collision(
    exposed: &str,
    up: &UpstreamSpec,
    prefix: PrefixMode,
    separator: &str,
    names: &[String],
    owners: &HashMap<String, String>,
) -> Option<String> {
    if let Some(owner) = owners.get(exposed) {
        return Some(if owner == OWN_NAMESPACE {
            "name is one of the gateway's own tools".to_owned()
        } else {
            format!("name already exposed by upstream `{owner}`")
        });
    }
    if prefix == PrefixMode::Never
        && let Some(owner) = namespace::namespace_owner(exposed, separator, names)
        && owner != up.name
    {
        return Some(format!(
            "bare name lies in the namespace of upstream `{owner}`"
        ));
    }
    None
}

/// A resource template reduced to what routing needs: literal pieces between expressions.
#[derive(Debug, Clone)]
struct UriTemplate {
    source: String,
    literals: Vec<String>,
}

impl UriTemplate {
    fn parse(t: &str) -> Self {
        let mut literals = vec![String::new()];
        let mut in_expr = false;
        for ch in t.chars() {
            match (in_expr, ch) {
                (false, '{') => in_expr = true,
                (true, '}') => {
                    in_expr = false;
                    literals.push(String::new());
                }
                (false, c) => {
                    if let Some(last) = literals.last_mut() {
                        last.push(c);
                    }
                }
                (true, _) => {}
            }
        }
        Self {
            source: t.to_owned(),
            literals,
        }
    }

    fn literal_prefix_len(&self) -> usize {
        self.literals.first().map_or(0, String::len)
    }

    /// Literals in order, each expression matching one or more characters.
    fn matches(&self, uri: &str) -> bool {
        let Some((first, rest)) = self.literals.split_first() else {
            return false;
        };
        let Some(mut tail) = uri.strip_prefix(first.as_str()) else {
            return false;
        };
        for (i, lit) in rest.iter().enumerate() {
            let last = i + 1 == rest.len();
            if last {
                if lit.is_empty() {
                    return !tail.is_empty();
                }
                return tail.len() > lit.len() && tail.ends_with(lit.as_str());
            }
            if lit.is_empty() {
                continue;
            }
            match tail.get(1..).and_then(|t| t.find(lit.as_str())) {
                Some(pos) => tail = &tail[1 + pos + lit.len()..],
                None => return false,
            }
        }
        // A template without expressions matches only itself.
        tail.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_by_literals() {
        let t = UriTemplate::parse("test://template/{id}/data");
        assert!(t.matches("test://template/42/data"));
        assert!(!t.matches("test://template//data"));
        assert!(!t.matches("test://template/42/other"));
        assert!(!t.matches("file:///x"));
        let t = UriTemplate::parse("notes://{name}");
        assert!(t.matches("notes://a"));
        assert!(!t.matches("notes://"));
        assert_eq!(t.literal_prefix_len(), "notes://".len());
    }
}
