//! A flow's graph checks: node ids, `depends_on`, cycles (named), tool namespaces, and that
//! every template references the inputs or an ancestor of the node that uses it.

use crate::config::Invalid;
use std::collections::{BTreeSet, HashMap, HashSet};

use super::{
    FlowDef, NodeDef,
    template::{Root, Template},
};
use crate::{
    config::Diagnostic,
    names::{Naming, Reference},
};

/// A node as parsed, with the lines of its `depends_on` entries.
pub(super) struct Node {
    pub def: NodeDef,
    pub depends_lines: Vec<usize>,
}

/// A node's `tool`: the exposed name it refers to, and a warning when it is written in today's
/// form (`upstream<sep>tool`) rather than the canonical `upstream/tool`.
pub(super) fn tool_reference(
    tool: &str,
    upstreams: &[String],
    naming: &Naming,
) -> Result<(String, Option<String>), Invalid> {
    let known = |ns: &str| upstreams.iter().any(|u| u == ns);
    let shown = crate::names::shown(tool);
    let list = upstreams.join(", ");
    match naming.reference(tool) {
        Reference::Canonical(exposed) => {
            let ns = tool.split('/').next().unwrap_or_default();
            if known(ns) {
                Ok((exposed, None))
            } else {
                Err(Invalid(format!(
                    "tool `{shown}`: `{}` is no configured upstream (upstreams: {list})",
                    crate::names::shown(ns)
                )))
            }
        }
        Reference::Legacy { exposed, canonical } => {
            let ns = canonical.split('/').next().unwrap_or_default();
            if known(ns) {
                Ok((
                    exposed,
                    Some(format!(
                        "write tool `{shown}` as `{}`: that form names the tool whatever the \
                         separator",
                        crate::names::shown(&canonical)
                    )),
                ))
            } else {
                Err(Invalid(format!(
                    "tool `{shown}` is in no configured upstream's namespace (upstreams: {list})"
                )))
            }
        }
        Reference::Bare(_) => {
            let sep = &naming.separator;
            // Today's form written with another separator (`filesystem.write_file` under `__`).
            let other = upstreams.iter().find_map(|u| {
                let rest = tool.strip_prefix(u.as_str())?;
                let name = rest.trim_start_matches(['.', '_', '-', ':']);
                (name.len() < rest.len() && !name.is_empty()).then(|| format!("{u}/{name}"))
            });
            Err(Invalid(match other {
                Some(canonical) => format!(
                    "tool `{shown}`: the separator is `{sep}`, so that name is in no upstream's \
                     namespace; write `{}` (the canonical form, whatever the separator)",
                    crate::names::shown(&canonical)
                ),
                None => format!(
                    "tool `{shown}` is in no configured upstream's namespace (upstreams: {list}); \
                     write it as `upstream/tool`"
                ),
            }))
        }
    }
}

/// Checks the graph; returns the nodes in topological order (config order among peers).
pub(super) fn graph(
    at: &dyn Fn(usize, String) -> Diagnostic,
    flow_line: usize,
    nodes: Vec<Node>,
    outputs: &[(String, Template)],
    problems: &mut Vec<Diagnostic>,
) -> Vec<NodeDef> {
    if nodes.is_empty() {
        problems.push(at(flow_line, "a flow needs at least one node".into()));
        return Vec::new();
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let id = n.def.id.as_str();
        if !super::is_identifier(id) || id == "inputs" {
            problems.push(at(
                n.def.line,
                format!(
                    "node id `{}`: use letters, digits, `_` and `-` (and not `inputs`)",
                    crate::names::shown(id)
                ),
            ));
        }
        if index.insert(id, i).is_some() {
            problems.push(at(n.def.line, format!("node id `{id}` is used twice")));
        }
        for (dep, line) in n.def.depends_on.iter().zip(&n.depends_lines) {
            if !nodes.iter().any(|m| &m.def.id == dep) {
                problems.push(at(
                    *line,
                    format!(
                        "node `{id}` depends on unknown node `{}`",
                        crate::names::shown(dep)
                    ),
                ));
            }
        }
    }
    let order = match topological(&nodes, &index) {
        Ok(order) => order,
        Err(cycle) => {
            let line = nodes[index[cycle[0].as_str()]].def.line;
            problems.push(at(
                line,
                format!("cycle: {} (each depends on the next)", cycle.join(" -> ")),
            ));
            return Vec::new();
        }
    };
    let ancestors = ancestors(&nodes, &order, &index);
    for n in &nodes {
        let mine = &ancestors[&n.def.id];
        for r in n.def.params.refs() {
            if let Root::Node(target) = &r.root
                && !mine.contains(target)
            {
                problems.push(at(
                    n.def.line,
                    not_ancestor(&n.def.id, target, &r.text, &index),
                ));
            }
        }
    }
    for (name, t) in outputs {
        for r in t.refs() {
            if let Root::Node(target) = &r.root
                && !index.contains_key(target.as_str())
            {
                problems.push(at(
                    flow_line,
                    format!(
                        "output `{name}` references unknown node `{target}` (`{{{{{}}}}}`)",
                        r.text
                    ),
                ));
            }
        }
    }
    let mut slots: Vec<Option<NodeDef>> = nodes.into_iter().map(|n| Some(n.def)).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

fn not_ancestor(node: &str, target: &str, text: &str, index: &HashMap<&str, usize>) -> String {
    if index.contains_key(target) {
        format!(
            "node `{node}` uses `{{{{{text}}}}}`, but `{target}` is not among its dependencies (add it to depends_on)"
        )
    } else {
        format!("node `{node}` uses `{{{{{text}}}}}`: there is no node `{target}`")
    }
}

/// Kahn's algorithm; on a cycle, the node ids of one cycle in order, first repeated last.
fn topological(nodes: &[Node], index: &HashMap<&str, usize>) -> Result<Vec<usize>, Vec<String>> {
    let deps: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            n.def
                .depends_on
                .iter()
                .filter_map(|d| index.get(d.as_str()).copied())
                .collect()
        })
        .collect();
    let mut indegree: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut order = Vec::with_capacity(nodes.len());
    let mut ready: BTreeSet<usize> = (0..nodes.len()).filter(|i| indegree[*i] == 0).collect();
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for (j, d) in deps.iter().enumerate() {
            for _ in d.iter().filter(|x| **x == i) {
                indegree[j] -= 1;
                if indegree[j] == 0 {
                    ready.insert(j);
                }
            }
        }
    }
    if order.len() == nodes.len() {
        return Ok(order);
    }
    // Walk dependencies from a node left over until one repeats: that is a cycle.
    let done: HashSet<usize> = order.into_iter().collect();
    let mut at = (0..nodes.len()).find(|i| !done.contains(i)).unwrap_or(0);
    let mut path: Vec<usize> = Vec::new();
    loop {
        if let Some(pos) = path.iter().position(|p| *p == at) {
            let mut cycle: Vec<String> = path[pos..]
                .iter()
                .map(|i| nodes[*i].def.id.clone())
                .collect();
            cycle.push(cycle[0].clone());
            return Err(cycle);
        }
        path.push(at);
        match deps[at].iter().find(|d| !done.contains(d)) {
            Some(next) => at = *next,
            None => return Err(vec![nodes[at].def.id.clone()]),
        }
    }
}

/// Each node's transitive dependencies.
fn ancestors(
    nodes: &[Node],
    order: &[usize],
    index: &HashMap<&str, usize>,
) -> HashMap<String, HashSet<String>> {
    let mut out: HashMap<String, HashSet<String>> = HashMap::new();
    for &i in order {
        let mut mine = HashSet::new();
        for d in &nodes[i].def.depends_on {
            if index.contains_key(d.as_str()) {
                mine.insert(d.clone());
                if let Some(theirs) = out.get(d) {
                    mine.extend(theirs.iter().cloned());
                }
            }
        }
        out.insert(nodes[i].def.id.clone(), mine);
    }
    out
}

/// `node` and every node that depends on it, directly or not (what a rerun re-derives).
pub fn downstream_of(flow: &FlowDef, node: &str) -> HashSet<String> {
    let mut out: HashSet<String> = HashSet::new();
    out.insert(node.to_owned());
    for n in &flow.nodes {
        if n.depends_on.iter().any(|d| out.contains(d)) {
            out.insert(n.id.clone());
        }
    }
    out
}
