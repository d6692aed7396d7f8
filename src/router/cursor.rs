//! Downstream pagination cursors: the gateway's own, never an upstream's.
//!
//! A cursor names the last item of the page it follows (lists are sorted by name or URI), so
//! paging stays correct while upstreams add or remove items: nothing still listed is skipped
//! or repeated. It is sealed (HMAC, `[gateway] state_key`) together with the list it belongs
//! to, the caller it was issued to and an expiry; anything else — edited, expired, another
//! list's or another caller's — is refused with -32602.

use std::time::Duration;

use rmcp::model::{RequestStateCodec, SealOptions};
use serde::{Deserialize, Serialize};

use crate::clock::now_ms;

/// A cursor that is not one this gateway issued to this caller for this list, or has expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor")]
pub struct BadCursor;

/// What a cursor holds (authenticated, not secret: it names an item the caller has seen).
#[derive(Debug, Serialize, Deserialize)]
struct Position {
    /// The last item of the previous page.
    after: String,
    /// Unix milliseconds after which the cursor is refused.
    expires: u64,
}

/// Issues and checks cursors.
#[derive(Debug, Clone)]
pub struct Cursors {
    codec: std::sync::Arc<RequestStateCodec>,
    ttl: Duration,
}

impl Cursors {
    pub fn new(codec: std::sync::Arc<RequestStateCodec>, ttl: Duration) -> Self {
        Self { codec, ttl }
    }

    /// One page of `items` (sorted by `key`) after `cursor`, and the cursor of the next page.
    pub fn page<T: Clone>(
        &self,
        list: &str,
        caller: &str,
        items: &[T],
        key: impl Fn(&T) -> &str,
        cursor: Option<&str>,
        size: usize,
    ) -> Result<(Vec<T>, Option<String>), BadCursor> {
        self.page_at(list, caller, items, key, cursor, size, now_ms())
    }

    #[allow(clippy::too_many_arguments)]
    fn page_at<T: Clone>(
        &self,
        list: &str,
        caller: &str,
        items: &[T],
        key: impl Fn(&T) -> &str,
        cursor: Option<&str>,
        size: usize,
        now: u64,
    ) -> Result<(Vec<T>, Option<String>), BadCursor> {
        let start = match cursor {
            Some(c) => {
                let after = self.open(list, caller, c, now)?;
                items.partition_point(|x| key(x) <= after.as_str())
            }
            None => 0,
        };
        let end = start.saturating_add(size.max(1)).min(items.len());
        let page = items.get(start..end).unwrap_or_default().to_vec();
        let next = match (end < items.len(), page.last()) {
            (true, Some(last)) => Some(self.seal(list, caller, key(last), now)),
            _ => None,
        };
        Ok((page, next))
    }

    fn seal(&self, list: &str, caller: &str, after: &str, now: u64) -> String {
        let pos = Position {
            after: after.to_owned(),
            expires: now.saturating_add(self.ttl.as_millis() as u64),
        };
        let ad = associated(list, caller);
        // Serializing two strings and a number cannot fail; an empty cursor would be refused.
        self.codec
            .seal_json_with(&pos, &SealOptions::new().associated_data(&ad))
            .unwrap_or_default()
    }

    fn open(&self, list: &str, caller: &str, cursor: &str, now: u64) -> Result<String, BadCursor> {
        let ad = associated(list, caller);
        let pos: Position = self
            .codec
            .open_json_with(cursor, &ad)
            .map_err(|_| BadCursor)?;
        if pos.expires < now {
            return Err(BadCursor);
        }
        Ok(pos.after)
    }
}

fn associated(list: &str, caller: &str) -> Vec<u8> {
    format!("fedgate-cursor\0{list}\0{caller}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursors() -> Cursors {
        Cursors::new(
            std::sync::Arc::new(RequestStateCodec::try_new(vec![7u8; 32]).unwrap()),
            Duration::from_secs(60),
        )
    }

    #[allow(clippy::ptr_arg)] // the key function of a list of Strings
    fn k(s: &String) -> &str {
        s
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn pages_cover_everything_once_and_survive_list_changes() {
        let c = cursors();
        let items = names(&["a", "b", "c", "d", "e", "f", "g"]);
        let (p1, next) = c.page("tools", "ann", &items, k, None, 3).unwrap();
        assert_eq!(p1, names(&["a", "b", "c"]));
        // Between pages an upstream drops `b` and `d` and adds `bb` and `ee`.
        let changed = names(&["a", "bb", "c", "e", "ee", "f", "g"]);
        let (p2, next) = c
            .page("tools", "ann", &changed, k, next.as_deref(), 3)
            .unwrap();
        assert_eq!(p2, names(&["e", "ee", "f"]), "continues after `c`");
        let (p3, next) = c
            .page("tools", "ann", &changed, k, next.as_deref(), 3)
            .unwrap();
        assert_eq!(p3, names(&["g"]));
        assert!(next.is_none());
    }

    #[test]
    fn tampered_foreign_and_expired_cursors_are_refused() {
        let c = cursors();
        let items = names(&["a", "b", "c"]);
        let (_, next) = c
            .page_at("tools", "ann", &items, k, None, 1, 1_000)
            .unwrap();
        let good = next.unwrap();
        assert!(
            c.page_at("tools", "ann", &items, k, Some(&good), 1, 1_000)
                .is_ok()
        );
        // Edited by one character.
        let mut bytes = good.clone().into_bytes();
        let i = bytes.len() / 2;
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        let edited = String::from_utf8(bytes).unwrap();
        assert!(matches!(
            c.page_at("tools", "ann", &items, k, Some(&edited), 1, 1_000),
            Err(BadCursor)
        ));
        // Another list's, another caller's, or signed with another key.
        for (list, caller) in [("prompts", "ann"), ("tools", "bob")] {
            assert!(matches!(
                c.page_at(list, caller, &items, k, Some(&good), 1, 1_000),
                Err(BadCursor)
            ));
        }
        let other = Cursors::new(
            std::sync::Arc::new(RequestStateCodec::try_new(vec![8u8; 32]).unwrap()),
            Duration::from_secs(60),
        );
        assert!(
            other
                .page_at("tools", "ann", &items, k, Some(&good), 1, 1_000)
                .is_err()
        );
        // Past its expiry.
        assert!(matches!(
            c.page_at("tools", "ann", &items, k, Some(&good), 1, 1_000 + 60_001),
            Err(BadCursor)
        ));
        assert!(
            c.page_at("tools", "ann", &items, k, Some("garbage"), 1, 1_000)
                .is_err()
        );
    }
}
