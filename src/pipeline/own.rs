//! The gateway's own tools (`fedgate.<name>`): listed with the upstreams' tools, filtered by
//! roles like any other, and called through the same stack — only their terminal differs.

use std::{collections::HashMap, fmt::Debug, sync::Arc};

use arc_swap::ArcSwap;
use rmcp::model::Tool;

use super::{Call, CallFuture};
use crate::policy::{arguments::ArgCheck, trust::CallClass};

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

/// One own tool and its compiled input schema.
#[derive(Debug)]
struct Entry {
    tool: Arc<dyn OwnTool>,
    check: Option<Arc<ArgCheck>>,
}

/// The gateway's own tools by exposed name; clones share the set, which a reload may replace
/// (flows come and go).
#[derive(Debug, Clone, Default)]
pub struct OwnTools(Arc<ArcSwap<HashMap<String, Entry>>>);

fn entries(tools: Vec<Arc<dyn OwnTool>>) -> HashMap<String, Entry> {
    tools
        .into_iter()
        .map(|tool| {
            let def = tool.definition();
            let schema = serde_json::Value::Object((*def.input_schema).clone());
            let check = ArgCheck::compile(&schema).ok().map(Arc::new);
            (def.name.to_string(), Entry { tool, check })
        })
        .collect()
}

impl OwnTools {
    pub fn new(tools: Vec<Arc<dyn OwnTool>>) -> Self {
        Self(Arc::new(ArcSwap::from_pointee(entries(tools))))
    }

    /// What the catalog lists.
    pub fn definitions(&self) -> Vec<Tool> {
        self.0
            .load()
            .values()
            .map(|e| e.tool.definition())
            .collect()
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn OwnTool>> {
        self.0.load().get(name).map(|e| e.tool.clone())
    }

    /// The compiled input schema of an own tool.
    pub fn check(&self, name: &str) -> Option<Arc<ArgCheck>> {
        self.0.load().get(name).and_then(|e| e.check.clone())
    }

    /// Adds tools (the gateway's built-in ones join those a caller supplied).
    pub fn with(self, more: Vec<Arc<dyn OwnTool>>) -> Self {
        let mut all = self.tools();
        all.extend(more);
        Self::new(all)
    }

    /// Every tool.
    pub fn tools(&self) -> Vec<Arc<dyn OwnTool>> {
        self.0.load().values().map(|e| e.tool.clone()).collect()
    }

    /// Replaces the set for every clone.
    pub fn replace(&self, tools: Vec<Arc<dyn OwnTool>>) {
        self.0.store(Arc::new(entries(tools)));
    }
}
