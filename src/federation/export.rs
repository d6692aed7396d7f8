//! What a peer gateway sees of this one: the flows marked `export = true`, each tagged in its
//! tool `_meta` so the decision travels with the tool definition through catalog rebuilds.

use rmcp::model::Tool;
use serde_json::Value;

use super::hops::EXPORT_META_KEY;

/// Tags a flow's tool as exported to peer gateways.
pub fn mark(tool: &mut Tool) {
    tool.meta
        .get_or_insert_with(Default::default)
        .0
        .insert(EXPORT_META_KEY.into(), Value::Bool(true));
}

/// Whether a peer gateway may see (and call) this gateway-owned tool.
pub fn is_exported(tool: &Tool) -> bool {
    tool.meta.as_ref().and_then(|m| m.0.get(EXPORT_META_KEY)) == Some(&Value::Bool(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_marked_tool_is_exported() {
        let mut tool = Tool::new("flow", "a flow", std::sync::Arc::new(Default::default()));
        assert!(!is_exported(&tool));
        tool.meta = Some(Default::default());
        tool.meta
            .get_or_insert_with(Default::default)
            .0
            .insert(EXPORT_META_KEY.into(), Value::String("true".into()));
        assert!(!is_exported(&tool), "only the boolean true exports");
        mark(&mut tool);
        assert!(is_exported(&tool));
    }
}
