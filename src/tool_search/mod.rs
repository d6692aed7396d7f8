//! Tool search and working sets (`[gateway] tool_listing = "search"`): a session with more
//! tools than the threshold starts with its pinned tools and the search tools; it finds tools
//! with `fedgate__find_tools` and puts them in its list with `fedgate__select_tools`, so the
//! client calls the real tools with their own schemas.

mod index;
mod tools;

use std::{borrow::Cow, collections::HashSet, sync::Arc};

use arc_swap::ArcSwap;
use dashmap::DashMap;
use rmcp::model::Tool;

pub use index::{Index, Words};

use crate::{
    names::{BUILTIN_TOOLS, SEARCH_TOOLS},
    policy::{
        authz::Access,
        view::{Listing, View, Views},
    },
    telemetry::search_metrics::SearchMetrics,
    upstream::pool::Pool,
};

/// The search index, the views and every session's working set.
#[derive(Debug)]
pub struct ToolSearch {
    pool: Arc<Pool>,
    views: Arc<ArcSwap<Views>>,
    /// Built on the first search after the catalog changed.
    index: parking_lot::Mutex<Option<Arc<Index>>>,
    /// Exposed names each session selected, by session key; bounded by `max_selected_tools`
    /// per session and pruned with the sessions.
    sets: DashMap<String, Vec<String>>,
    metrics: SearchMetrics,
    /// The workflows' stage gate: search finds and selects only what a stage allows.
    gate: Option<Arc<dyn crate::pipeline::Gate>>,
}

impl ToolSearch {
    pub fn new(
        pool: Arc<Pool>,
        views: Arc<ArcSwap<Views>>,
        metrics: SearchMetrics,
        gate: Option<Arc<dyn crate::pipeline::Gate>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            pool,
            views,
            index: Default::default(),
            sets: DashMap::new(),
            metrics,
            gate,
        })
    }

    /// Where `call` stands in the workflows, when there are any.
    async fn standing(
        &self,
        call: &crate::pipeline::Call,
    ) -> Option<crate::policy::workflow::Standing> {
        match &self.gate {
            Some(g) => Some(g.standing(&crate::pipeline::Place::of(call)).await),
            None => None,
        }
    }

    /// The search tools, served while some listing is `search`.
    pub fn own_tools(self: &Arc<Self>) -> Vec<Arc<dyn crate::pipeline::OwnTool>> {
        tools::all(self)
    }

    /// The index of the current catalog.
    pub fn index(&self) -> Arc<Index> {
        let catalog = self.pool.catalog();
        let mut slot = self.index.lock();
        match &*slot {
            Some(i) if Arc::ptr_eq(&i.catalog, &catalog) => i.clone(),
            _ => {
                let built = Arc::new(Index::build(catalog));
                *slot = Some(built.clone());
                built
            }
        }
    }

    /// The view an access comes through, as configured (a union of roles' views has no
    /// settings of its own: the gateway's apply).
    fn view<'a>(views: &'a Views, access: &Access) -> Option<&'a Arc<View>> {
        access.scope().and_then(|s| views.get(&s.name))
    }

    /// What a session lists of the `items` it may call: everything, or — in search mode past
    /// the threshold — the pinned tools, its working set and the built-in tools; with the
    /// view's descriptions.
    pub fn listed<'a>(
        &self,
        access: &Access,
        session: Option<&str>,
        items: Cow<'a, [Tool]>,
    ) -> Cow<'a, [Tool]> {
        let views = self.views.load();
        let view = Self::view(&views, access);
        let mut items = items;
        let searching = views.listing(view.map(|v| &**v)) == Listing::Search;
        if !searching && views.searching() {
            // Served for the sessions that search; this one lists everything anyway.
            items = Cow::Owned(
                items
                    .iter()
                    .filter(|t| !SEARCH_TOOLS.contains(&t.name.as_ref()))
                    .cloned()
                    .collect(),
            );
        } else if searching && items.len() > views.settings.threshold {
            let selected: HashSet<String> = session
                .and_then(|s| self.sets.get(s))
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default();
            let keep = |name: &str| {
                BUILTIN_TOOLS.contains(&name)
                    || selected.contains(name)
                    || views.settings.pinned.is_match(name)
                    || view.is_some_and(|v| v.pinned.is_match(name))
            };
            items = Cow::Owned(items.iter().filter(|t| keep(&t.name)).cloned().collect());
        }
        match view {
            Some(v) if !v.descriptions.is_empty() => {
                Cow::Owned(items.iter().map(|t| described(t.clone(), v)).collect())
            }
            _ => items,
        }
    }

    /// Forgets the working sets of sessions that are gone.
    pub fn retain(&self, open: impl Fn(&str) -> bool) {
        self.sets.retain(|k, _| open(k));
    }

    /// How many sessions hold a working set.
    pub fn sessions(&self) -> usize {
        self.sets.len()
    }
}

/// `t` with the view's description, if it has one for it.
fn described(mut t: Tool, view: &View) -> Tool {
    if let Some(d) = view.descriptions.get(t.name.as_ref()) {
        t.description = Some(d.clone().into());
    }
    t
}
