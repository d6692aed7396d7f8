//! The gateway's own tools (`fedgate.<name>`): listed with the upstreams' tools, filtered by
//! roles like any other, and called through the same stack — only their terminal differs.

use std::{collections::HashMap, fmt::Debug, sync::Arc};

use rmcp::model::Tool;

use super::{Call, CallFuture};
use crate::policy::trust::CallClass;

/// One tool the gateway answers itself.
pub trait OwnTool: Send + Sync + Debug {
    /// The definition callers see; its name is already namespaced (`fedgate.<name>`).
    fn definition(&self) -> Tool;
    /// Read, write or long: the class the trust step records (own tools have no tier).
    fn class(&self) -> CallClass {
        CallClass::Read
    }
    /// Answers a call that passed every policy of the inner stack.
    fn call(&self, call: Call) -> CallFuture;
}

/// The gateway's own tools by exposed name.
#[derive(Debug, Clone, Default)]
pub struct OwnTools(Arc<HashMap<String, Arc<dyn OwnTool>>>);

impl OwnTools {
    pub fn new(tools: Vec<Arc<dyn OwnTool>>) -> Self {
        Self(Arc::new(
            tools
                .into_iter()
                .map(|t| (t.definition().name.to_string(), t))
                .collect(),
        ))
    }

    /// What the catalog lists.
    pub fn definitions(&self) -> Vec<Tool> {
        self.0.values().map(|t| t.definition()).collect()
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn OwnTool>> {
        self.0.get(name).cloned()
    }
}
