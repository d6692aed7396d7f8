//! The checks of a flow that need the upstreams' tool lists: a node's tool exists, its tier
//! lets it run, and its literal params can satisfy the tool's input schema (a required
//! parameter missing, a literal of the wrong type). Run when the catalog settles (start,
//! reload) and by `fedgate flows check`; each problem with the node's `file:line`. A node whose
//! upstream is not ready is not judged.

use serde_json::Value;

use crate::{
    config::{
        Diagnostic,
        flows::{FlowDef, template::Template},
    },
    policy::arguments::ArgCheck,
    router::catalog::Owner,
    upstream::pool::Pool,
};

pub fn against_catalog(flow: &FlowDef, pool: &Pool) -> Vec<Diagnostic> {
    let catalog = pool.catalog();
    let mut out = Vec::new();
    for n in &flow.nodes {
        let at = |message: String| Diagnostic {
            file: flow.file.clone(),
            line: n.line,
            message: format!("flow `{}`, node `{}`: {message}", flow.id, n.id),
        };
        let Some(route) = catalog.tool(&n.tool) else {
            if pool
                .namespace_owner(&n.tool)
                .is_some_and(|u| u.connection().is_some())
            {
                let hint = crate::names::did_you_mean(
                    &n.tool,
                    catalog.tools.iter().map(|t| t.name.as_ref()),
                );
                out.push(at(format!("no tool `{}`{hint}", n.tool)));
            }
            continue;
        };
        let Owner::Member(idx) = route.owner else {
            out.push(at(format!(
                "`{}` is one of the gateway's own tools",
                n.tool
            )));
            continue;
        };
        if let Some(up) = catalog.upstream(idx) {
            let spec = up.spec();
            let lists = up.lists();
            let def = lists.tool(&route.name);
            if let Err(refusal) =
                crate::policy::trust::decide(&spec.tier, spec.declared(), def, &route.name)
            {
                out.push(at(format!(
                    "`{}` writes, and trust tier `{}` refuses it ({})",
                    n.tool,
                    spec.tier.name,
                    refusal.code()
                )));
            }
        }
        if let Some(def) = catalog.tool_def(&n.tool) {
            let schema = Value::Object((*def.input_schema).clone());
            out.extend(params(&n.params, &schema).into_iter().map(at));
        }
    }
    out
}

/// What literal params say against the schema: missing required parameters (a template may
/// supply any other), and literals the property's schema refuses.
fn params(params: &Template, schema: &Value) -> Vec<String> {
    let Template::Object(fields) = params else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for required in schema["required"].as_array().into_iter().flatten() {
        if let Some(name) = required.as_str()
            && !fields.iter().any(|(k, _)| k == name)
        {
            out.push(format!("missing required parameter `{name}`"));
        }
    }
    for (name, t) in fields {
        let (Some(value), Some(prop)) = (t.literal(), schema["properties"].get(name)) else {
            continue;
        };
        if let Ok(check) = ArgCheck::compile(prop) {
            for p in check.check(value) {
                out.push(format!("parameter `{name}`: {}", p.message));
            }
        }
    }
    out
}
