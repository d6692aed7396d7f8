//! What a call passes on to an upstream of this gateway's `_meta` federation keys: a peer
//! gets the hop path, the call's correlation id and a claim naming the original caller;
//! other upstreams get none of them.

use rmcp::model::RequestMetaObject;
use serde_json::Value;

use super::hops::{CALLER_KEY, CORRELATION_KEY, META_PREFIX};
use crate::policy::identity::Identity;

/// The `_meta` a call to an upstream carries: with `peer` (the call's correlation id) the
/// federation keys are added (a peer's own claim passes on; anyone else is named by this
/// gateway); without it every fedgate key is removed.
pub fn to_upstream(
    mut meta: RequestMetaObject,
    peer: Option<String>,
    identity: &Identity,
) -> RequestMetaObject {
    let Some(correlation_id) = peer else {
        meta.retain(|k, _| !k.starts_with(META_PREFIX));
        return meta;
    };
    meta.insert(CORRELATION_KEY.into(), Value::String(correlation_id));
    if !identity.access.is_peer() || !meta.contains_key(CALLER_KEY) {
        meta.insert(CALLER_KEY.into(), Value::String(identity.key()));
    }
    meta
}

/// The federation keys of a call's `_meta` (hop path, caller claim, correlation): what the
/// calls a flow run makes on its behalf carry.
pub fn carried(meta: &RequestMetaObject) -> serde_json::Map<String, Value> {
    meta.iter()
        .filter(|(k, _)| k.starts_with(META_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
