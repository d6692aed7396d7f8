//! Hop paths and caller claims: the path of gateway ids a request has passed, and the
//! claim of who the original caller was, both in the request's `_meta`. A gateway refuses a
//! request whose path already holds its own id (a loop) or is as long as its hop limit, and
//! adds its id before passing a request on to a peer. The caller claim is recorded (audit,
//! "peer X on behalf of caller Y"), never trusted for authorization: the peer's own identity
//! is what the receiving gateway authorizes.

use rmcp::model::RequestMetaObject;
use serde_json::Value;

/// `_meta` key of the path: the ids of the gateways the request passed, oldest first.
pub const PATH_KEY: &str = "io.fedgate/path";
/// `_meta` key of the claim naming the original caller (`kind:name` at the first gateway).
pub const CALLER_KEY: &str = "io.fedgate/caller";
/// `_meta` key of the correlation id of the call a peer makes this request for: the receiving
/// gateway records its call under the same id (when no trace context says otherwise).
pub const CORRELATION_KEY: &str = "io.fedgate/correlation_id";
/// Tool `_meta` key of a flow exported to peer gateways (`export = true`).
pub const EXPORT_META_KEY: &str = "io.fedgate/exported";
/// Tool `_meta` key naming the peer a tool was imported from.
pub const IMPORTED_META_KEY: &str = "io.fedgate/imported_from";
/// Prefix of every fedgate `_meta` key: passed to peers, stripped for other upstreams.
pub const META_PREFIX: &str = "io.fedgate/";
/// Gateways a request may pass unless `[gateway] max_hops` says otherwise.
pub const DEFAULT_MAX_HOPS: usize = 4;
/// Longest path read from a request (a longer one is refused as over the limit anyway).
const MAX_PATH_READ: usize = 64;

/// Why a request may not pass this gateway.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HopRefusal {
    #[error("the request already passed this gateway (`{id}`): path {}", path.join(" -> "))]
    Loop { id: String, path: Vec<String> },
    #[error("a request may pass at most {max} gateways (the limit of `{id}`): path {}", path.join(" -> "))]
    TooFar {
        id: String,
        max: usize,
        path: Vec<String>,
    },
}

impl HopRefusal {
    pub fn path(&self) -> &[String] {
        match self {
            HopRefusal::Loop { path, .. } | HopRefusal::TooFar { path, .. } => path,
        }
    }
}

/// The path a request arrived with (strings only, at most `MAX_PATH_READ`).
pub fn path(meta: &RequestMetaObject) -> Vec<String> {
    meta.get(PATH_KEY)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .take(MAX_PATH_READ)
                .map(|v| crate::names::shown(v.as_str().unwrap_or("?")))
                .collect()
        })
        .unwrap_or_default()
}

/// Checks a request entering this gateway and adds this gateway's id to its path.
pub fn enter(meta: &mut RequestMetaObject, id: &str, max_hops: usize) -> Result<(), HopRefusal> {
    let mut path = path(meta);
    if path.iter().any(|p| p == id) {
        path.push(id.to_owned());
        return Err(HopRefusal::Loop {
            id: id.to_owned(),
            path,
        });
    }
    if path.len() >= max_hops {
        path.push(id.to_owned());
        return Err(HopRefusal::TooFar {
            id: id.to_owned(),
            max: max_hops,
            path,
        });
    }
    path.push(id.to_owned());
    meta.insert(
        PATH_KEY.into(),
        Value::Array(path.into_iter().map(Value::String).collect()),
    );
    Ok(())
}

/// The correlation id a peer's request carries, when it looks like one (32 hex digits).
pub fn correlation(meta: &RequestMetaObject) -> Option<String> {
    meta.get(CORRELATION_KEY)
        .and_then(Value::as_str)
        .filter(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_owned)
}

/// The caller claim a request carries (what a peer said its caller was).
pub fn caller_claim(meta: &RequestMetaObject) -> Option<String> {
    meta.get(CALLER_KEY)
        .and_then(Value::as_str)
        .map(crate::names::shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_grows_by_one_gateway_and_refuses_loops_and_long_chains() {
        let mut meta = RequestMetaObject::default();
        enter(&mut meta, "a", 3).unwrap();
        enter(&mut meta, "b", 3).unwrap();
        assert_eq!(path(&meta), ["a", "b"]);
        let mut looped = meta.clone();
        assert_eq!(
            enter(&mut looped, "a", 3).unwrap_err().to_string(),
            "the request already passed this gateway (`a`): path a -> b -> a"
        );
        enter(&mut meta, "c", 3).unwrap();
        assert!(matches!(
            enter(&mut meta, "d", 3),
            Err(HopRefusal::TooFar { max: 3, .. })
        ));
    }
}
