//! `[views.NAME]` and the `[gateway]` listing keys: globs checked once, compiled into views.

use std::{collections::BTreeMap, sync::Arc};

use toml::Spanned;

use super::{Ctx, auth::globs};
use crate::{
    config::{RawGateway, views::RawView},
    names::Naming,
    policy::view::{DEFAULT_MAX_SELECTED, DEFAULT_THRESHOLD, ListingSettings, Scope, View, Views},
};

/// Most tools a working set may be bounded to (`max_selected_tools`).
const MAX_SELECTED_CAP: usize = 1000;

pub(super) fn validate_views(
    cx: &mut Ctx<'_>,
    raw: &BTreeMap<String, Spanned<RawView>>,
    g: &RawGateway,
    naming: &Naming,
) -> Views {
    let mut views = BTreeMap::new();
    for (name, v) in raw {
        let at = v.span().start;
        let v = v.get_ref();
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        {
            cx.err_at(
                at,
                format!(
                    "view `{}`: a view name is 1-64 characters of A-Z a-z 0-9 _ - (it is a URL \
                     path: /mcp/NAME)",
                    crate::names::shown(name)
                ),
            );
            continue;
        }
        let owner = format!("view `{name}`");
        let tools = globs(cx, &owner, &v.tools, Some(naming));
        let prompts = globs(cx, &owner, &v.prompts, Some(naming));
        let resources = globs(cx, &owner, &v.resources, None);
        let pinned = globs(cx, &owner, &v.pinned, Some(naming));
        let scope = Arc::new(Scope::new(name, tools, prompts, resources));
        let mut descriptions = std::collections::HashMap::new();
        for (tool, text) in &v.descriptions {
            let exposed = naming.reference(tool.get_ref()).exposed().to_owned();
            if !scope.tool(&exposed) {
                cx.err_at(
                    tool.span().start,
                    format!(
                        "{owner}: description for `{}`, which the view's tools do not select",
                        tool.get_ref()
                    ),
                );
            }
            descriptions.insert(exposed, text.clone());
        }
        views.insert(
            name.clone(),
            Arc::new(View {
                scope,
                pinned: View::pinned(&pinned),
                pinned_globs: pinned,
                descriptions,
                listing: v.tool_listing,
            }),
        );
    }
    let pinned = globs(cx, "[gateway] pinned_tools", &g.pinned_tools, Some(naming));
    let max_selected = match &g.max_selected_tools {
        Some(m) if *m.get_ref() == 0 || *m.get_ref() > MAX_SELECTED_CAP => {
            cx.err_at(
                m.span().start,
                format!(
                    "[gateway] max_selected_tools = {}: use 1-{MAX_SELECTED_CAP}",
                    m.get_ref()
                ),
            );
            DEFAULT_MAX_SELECTED
        }
        Some(m) => *m.get_ref(),
        None => DEFAULT_MAX_SELECTED,
    };
    Views {
        views,
        settings: ListingSettings {
            listing: g.tool_listing.unwrap_or_default(),
            threshold: g.tool_listing_threshold.unwrap_or(DEFAULT_THRESHOLD),
            max_selected,
            pinned: View::pinned(&pinned),
            pinned_globs: pinned,
        },
    }
}
