//! A build without the `redis` feature has no shared store: `Redis` cannot be made (the config
//! refuses `[cluster] redis`, and `open` says why), so the paths that would use one are
//! unreachable, and their types say so.

use crate::config::cluster::{ClusterSettings, FailMode};
use crate::telemetry::cluster_metrics::ClusterMetrics;

/// Why a store operation gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreDown;

/// Never made in this build.
#[derive(Debug, Clone)]
pub struct Redis {
    never: std::convert::Infallible,
    pub fail: FailMode,
}

impl Redis {
    pub fn open(
        _url: &str,
        _settings: &ClusterSettings,
        _metrics: ClusterMetrics,
    ) -> Result<Self, super::ClusterError> {
        Err(super::ClusterError::Redis(
            crate::config::cluster::without_feature("redis"),
        ))
    }

    pub(super) fn count_fallback(&self, _feature: &'static str, _mode: &'static str) {
        self.never()
    }

    /// What a path holding a `Redis` does in this build: it cannot be reached.
    pub fn never(&self) -> ! {
        match self.never {}
    }
}
