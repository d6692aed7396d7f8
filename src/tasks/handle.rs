//! Task handles: the task ids a caller sees are gateway handles, not the upstreams' ids.
//!
//! A handle is sealed (HMAC, `[gateway] state_key`) and names the upstream, the exposed tool
//! the task came from and the upstream's task id; it is bound to the caller's identity (as
//! associated data, so it is not even readable as valid by anyone else). Any replica with the
//! same key can route `tasks/get`, `tasks/update` and `tasks/cancel` from the handle alone,
//! without shared state. Signed, not encrypted: the caller can read which upstream and which
//! upstream id its own handle names. A handle does not expire by itself; the upstream's
//! `ttlMs` decides how long its task exists (and an expired task is an unknown one).

use std::sync::Arc;

use rmcp::model::{RequestStateCodec, SealOptions};
use serde::{Deserialize, Serialize};

/// Prefix of every handle: tells a handle from an upstream's raw id at a glance, and leaves
/// room for another format (the flows' own tasks) later.
const PREFIX: &str = "fgt1.";

/// What a handle names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRoute {
    /// The upstream running the task.
    #[serde(rename = "u")]
    pub upstream: String,
    /// The tool as the caller named it (authorization is checked against it on every use).
    #[serde(rename = "t")]
    pub tool: String,
    /// The upstream's own task id.
    #[serde(rename = "i")]
    pub task_id: String,
}

/// A handle this gateway did not issue to this caller (forged, edited, another caller's, or
/// sealed with another key). Deliberately one case: the caller learns nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown task")]
pub struct UnknownTask;

/// Issues and opens task handles.
#[derive(Debug, Clone)]
pub struct TaskHandles {
    codec: Arc<RequestStateCodec>,
}

impl TaskHandles {
    pub fn new(codec: Arc<RequestStateCodec>) -> Self {
        Self { codec }
    }

    /// The handle of `route` for `caller`.
    pub fn seal(&self, caller: &str, route: &TaskRoute) -> String {
        let ad = associated(caller);
        // Serializing three strings cannot fail; an empty handle would be refused when used.
        let sealed = self
            .codec
            .seal_json_with(route, &SealOptions::new().associated_data(&ad))
            .unwrap_or_default();
        format!("{PREFIX}{sealed}")
    }

    /// What `handle` names, if this gateway issued it to `caller`.
    pub fn open(&self, caller: &str, handle: &str) -> Result<TaskRoute, UnknownTask> {
        let sealed = handle.strip_prefix(PREFIX).ok_or(UnknownTask)?;
        self.codec
            .open_json_with(sealed, &associated(caller))
            .map_err(|_| UnknownTask)
    }
}

fn associated(caller: &str) -> Vec<u8> {
    format!("fedgate-task\0{caller}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handles(key: u8) -> TaskHandles {
        TaskHandles::new(Arc::new(RequestStateCodec::try_new(vec![key; 32]).unwrap()))
    }

    fn route() -> TaskRoute {
        TaskRoute {
            upstream: "fx".into(),
            tool: "fx.slow_compute".into(),
            task_id: "7c2e".into(),
        }
    }

    #[test]
    fn a_handle_opens_for_its_caller_only() {
        let h = handles(7);
        let handle = h.seal("ann", &route());
        assert!(handle.starts_with(PREFIX));
        assert_eq!(h.open("ann", &handle), Ok(route()));
        assert_eq!(h.open("bob", &handle), Err(UnknownTask));
        // Another key (another gateway, or a rotated key) does not open it.
        assert_eq!(handles(8).open("ann", &handle), Err(UnknownTask));
    }

    #[test]
    fn edited_forged_and_raw_ids_are_unknown() {
        let h = handles(7);
        let handle = h.seal("ann", &route());
        let mut edited = handle.clone().into_bytes();
        let last = edited.len() - 3;
        edited[last] = if edited[last] == b'A' { b'B' } else { b'A' };
        let edited = String::from_utf8(edited).unwrap();
        for bad in [
            edited.as_str(),
            "7c2e",
            "fgt1.",
            "fgt1.e30",
            &handle[PREFIX.len()..],
            "",
        ] {
            assert_eq!(h.open("ann", bad), Err(UnknownTask), "{bad}");
        }
    }
}
