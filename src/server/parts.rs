//! What each face of the server is handed: small sets of shared handles that `Core` builds
//! once, so a handler holds what it answers with, not the whole gateway.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::sessions::Hub;
use crate::{
    policy::identity::Authenticator, router::cursor::Cursors, stages::Stages, tasks::TaskHandles,
    tool_search::ToolSearch, upstream::pool::Pool,
};

/// The MCP handler's: the catalog it lists and routes from, sessions and their
/// subscriptions, who callers are, tool search, stages, cursors, task handles and flows.
#[derive(Debug, Clone)]
pub struct McpParts {
    pub pool: Arc<Pool>,
    pub hub: Arc<Hub>,
    pub auth: Arc<ArcSwap<Authenticator>>,
    pub search: Arc<ToolSearch>,
    pub stages: Option<Arc<Stages>>,
    pub cursors: Cursors,
    pub tasks: TaskHandles,
    /// Flow runs are tasks too (`[flows]`).
    pub flows: Option<Arc<crate::flows::Engine>>,
}
