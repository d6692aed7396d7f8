//! Breakers per tool (F8): a tool whose calls keep ending in the server's internal errors is
//! failed fast on its own, while the upstream's other tools keep answering — its transport
//! works, so the upstream is not unhealthy. A tool gets a breaker at its first counted failure
//! (most tools never need one), at most [`MAX_TOOL_BREAKERS`] per upstream.

use std::{collections::BTreeMap, sync::Arc};

use dashmap::DashMap;
use tokio::time::Instant;

use super::breaker::{Breaker, BreakerConfig, BreakerStatus, Outcome};

/// Most tools of one upstream with a breaker of their own; past it, a new tool's failures
/// are not tracked (its neighbours' breakers still are).
pub const MAX_TOOL_BREAKERS: usize = 4096;

/// The tool breakers of one upstream.
#[derive(Debug, Default)]
pub struct ToolBreakers {
    by_tool: DashMap<String, Arc<Breaker>>,
}

impl ToolBreakers {
    /// Lets a call of `tool` through, or says how long until its breaker tries again.
    pub fn admit(&self, tool: &str, now: Instant) -> Result<(), std::time::Duration> {
        match self.by_tool.get(tool) {
            Some(b) => b.admit(now),
            None => Ok(()),
        }
    }

    /// Records the outcome of a call of `tool` (a failure creates its breaker).
    pub fn record(&self, cfg: &BreakerConfig, tool: &str, now: Instant, outcome: Outcome) {
        if let Some(b) = self.by_tool.get(tool) {
            b.record(now, outcome);
            return;
        }
        if outcome == Outcome::Failure && self.by_tool.len() < MAX_TOOL_BREAKERS {
            let b = self
                .by_tool
                .entry(tool.to_owned())
                .or_insert_with(|| Arc::new(Breaker::new(cfg.clone())))
                .clone();
            b.record(now, outcome);
        }
    }

    /// The breakers that are not closed, by tool (what `/readyz` shows).
    pub fn tripped(&self, now: Instant) -> BTreeMap<String, BreakerStatus> {
        self.by_tool
            .iter()
            .map(|e| (e.key().clone(), e.value().status(now)))
            .filter(|(_, s)| s.state != "closed")
            .collect()
    }

    /// Every tool breaker's state, for the metrics.
    pub fn states(&self, now: Instant) -> Vec<(String, BreakerStatus)> {
        self.by_tool
            .iter()
            .map(|e| (e.key().clone(), e.value().status(now)))
            .collect()
    }

    pub fn reset(&self) {
        self.by_tool.clear();
    }
}
