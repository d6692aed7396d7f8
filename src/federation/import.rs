//! Tools imported from a peer gateway: exposed as `<peer><separator><its name>` like any
//! upstream's, and tagged with the peer they came from so clients (and the catalog) can tell.

use rmcp::model::Tool;
use serde_json::Value;

use super::hops::IMPORTED_META_KEY;

/// Tags a tool as imported from the peer `peer`.
pub fn mark(tool: &mut Tool, peer: &str) {
    tool.meta
        .get_or_insert_with(Default::default)
        .0
        .insert(IMPORTED_META_KEY.into(), Value::String(peer.to_owned()));
}

/// What to add to a refused exposed name of a peer's tool: how a peer's names are formed and
/// the two ways out.
pub fn name_hint(peer: &str, separator: &str) -> String {
    format!(
        "; a peer's names are `{peer}{separator}<its name>`: give the peer a shorter name, or `rename` the tool"
    )
}
