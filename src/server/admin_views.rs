//! `GET /admin/views`: the views, what each selects and lists, and the gateway's listing
//! settings with how many sessions hold a working set.

use serde_json::{Value, json};

use super::parts::AdminParts;

pub(super) fn views(admin: &AdminParts) -> Value {
    let views = admin.views.load();
    let catalog = admin.pool.catalog();
    let s = &views.settings;
    let list: Vec<Value> = views
        .views
        .iter()
        .map(|(name, v)| {
            let [tools, prompts, resources] = v.scope.globs();
            let selected = catalog
                .tools
                .iter()
                .filter(|t| {
                    !crate::names::BUILTIN_TOOLS.contains(&t.name.as_ref()) && v.scope.tool(&t.name)
                })
                .count();
            json!({
                "name": name,
                "path": format!("{}/{name}", super::http::MCP_PATH),
                "tools": tools,
                "prompts": prompts,
                "resources": resources,
                "pinned": v.pinned_globs,
                "descriptions": v.descriptions.len(),
                "listing": views.listing(Some(v)),
                "tools_selected": selected,
            })
        })
        .collect();
    json!({
        "listing": s.listing,
        "threshold": s.threshold,
        "max_selected": s.max_selected,
        "pinned": s.pinned_globs,
        "searching": views.searching(),
        "working_sets": admin.search.sessions(),
        "views": list,
    })
}
