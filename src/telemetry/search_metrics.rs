//! Tool search metrics (views and working sets): searches by outcome, working-set changes by
//! kind and outcome. Labels are fixed words: bounded.

use prometheus::{IntCounterVec, Opts, Registry};

#[derive(Debug, Clone)]
pub struct SearchMetrics {
    /// `fedgate__find_tools` calls: `found` or `none`.
    pub searches: IntCounterVec,
    /// `select`/`reset` of a session's working set: `ok` or `refused`.
    pub selections: IntCounterVec,
}

impl SearchMetrics {
    /// A search answered (`outcome`: `found`, `none`).
    pub fn searched(&self, outcome: &str) {
        self.searches.with_label_values(&[outcome]).inc();
    }

    /// A working-set change (`kind`: `select`, `reset`; `outcome`: `ok`, `refused`).
    pub fn working_set(&self, kind: &str, outcome: &str) {
        self.selections.with_label_values(&[kind, outcome]).inc();
    }

    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let searches = IntCounterVec::new(
            Opts::new(
                "fedgate_tool_searches_total",
                "fedgate__find_tools searches, by outcome (found, none)",
            ),
            &["outcome"],
        )?;
        let selections = IntCounterVec::new(
            Opts::new(
                "fedgate_tool_selections_total",
                "Changes of a session's working set (select, reset), by outcome (ok, refused)",
            ),
            &["kind", "outcome"],
        )?;
        for o in ["found", "none"] {
            searches.with_label_values(&[o]);
        }
        for k in ["select", "reset"] {
            for o in ["ok", "refused"] {
                selections.with_label_values(&[k, o]);
            }
        }
        registry.register(Box::new(searches.clone()))?;
        registry.register(Box::new(selections.clone()))?;
        Ok(Self {
            searches,
            selections,
        })
    }
}
