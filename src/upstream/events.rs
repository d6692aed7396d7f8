//! What the pool tells downstream sessions: which merged lists changed, and resource updates.
//! The server's session hub implements [`Downstreams`]; the pool never needs to know it.

use rmcp::model::ResourceUpdatedNotificationParam;

/// Which lists changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changed {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
}

impl Changed {
    pub const ALL: Changed = Changed {
        tools: true,
        prompts: true,
        resources: true,
    };
    pub fn any(self) -> bool {
        self.tools || self.prompts || self.resources
    }
}

/// Where upstream changes go: called synchronously; implementations must not block.
pub trait Downstreams: Send + Sync + std::fmt::Debug {
    /// The merged catalog was rebuilt; these lists changed.
    fn lists_changed(&self, changed: Changed);
    /// An upstream reported that a resource changed.
    fn resource_updated(&self, update: ResourceUpdatedNotificationParam);
}

/// For one-shot commands (`fedgate tools`, `fedgate call`) that have no sessions to tell.
#[derive(Debug, Default)]
pub struct NoDownstreams;

impl Downstreams for NoDownstreams {
    fn lists_changed(&self, _: Changed) {}
    fn resource_updated(&self, _: ResourceUpdatedNotificationParam) {}
}
