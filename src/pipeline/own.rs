//! The gateway's own tools (`fedgate__<name>`): listed with the upstreams' tools, filtered by
//! roles like any other, and called through the same stack — only their terminal differs.

use std::{collections::HashMap, fmt::Debug, sync::Arc};

use arc_swap::ArcSwap;
use rmcp::model::Tool;

use rmcp::model::{CallToolResult, ServerResult};
use serde_json::Value;

use super::{Call, CallFuture, Op, done};
use crate::policy::{arguments::ArgCheck, trust::CallClass};

/// An own tool's definition from its name, description and input schema.
pub fn definition(name: &str, description: &str, schema: Value) -> Tool {
    Tool::new(
        name.to_owned(),
        description.to_owned(),
        Arc::new(schema.as_object().cloned().unwrap_or_default()),
    )
}

/// A call's arguments (none: empty).
pub fn arguments(call: &Call) -> serde_json::Map<String, Value> {
    match &call.op {
        Op::CallTool(p) => p.arguments.clone().unwrap_or_default(),
        _ => Default::default(),
    }
}

/// A structured answer, or a structured tool error.
pub fn answer(value: Value, error: bool) -> CallFuture {
    let r = if error {
        CallToolResult::structured_error(value)
    } else {
        CallToolResult::structured(value)
    };
    done(Ok(ServerResult::CallToolResult(r)))
}

/// Tells the caller its tool list changed, on the stream of its call.
pub async fn list_changed(call: &Call) {
    if let Some(d) = &call.downstream
        && !d.modern
    {
        let _ = d.client.tools_changed().await;
    }
}

/// One tool the gateway answers itself.
pub trait OwnTool: Send + Sync + Debug {
    /// The definition callers see; its name is already namespaced (`fedgate__<name>`).
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
