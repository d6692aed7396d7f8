//! Downstream pagination cursors: the gateway's own, never an upstream's.
//!
//! Merged lists are served from the catalog, so a cursor is an offset into the merged list.
//! (Signing cursors against tampering arrives with the protocol-fidelity work; until then a
//! cursor that does not parse is refused with -32602 and an out-of-range one yields an empty
//! page.)

use crate::error::CallError;

const PREFIX: &str = "fg1.";

pub fn encode(offset: usize) -> String {
    format!("{PREFIX}{offset}")
}

pub fn decode(cursor: &str) -> Result<usize, CallError> {
    cursor
        .strip_prefix(PREFIX)
        .and_then(|n| n.parse().ok())
        .ok_or(CallError::BadCursor)
}

/// One page of `items` starting at `cursor`, and the cursor of the next page if any.
pub fn page<T: Clone>(
    items: &[T],
    cursor: Option<&str>,
    size: usize,
) -> Result<(Vec<T>, Option<String>), CallError> {
    let start = match cursor {
        Some(c) => decode(c)?,
        None => 0,
    };
    let start = start.min(items.len());
    let end = start.saturating_add(size).min(items.len());
    let next = (end < items.len()).then(|| encode(end));
    Ok((items[start..end].to_vec(), next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_everything_once() {
        let items: Vec<u32> = (0..7).collect();
        let (a, c) = page(&items, None, 3).unwrap();
        let (b, c) = page(&items, c.as_deref(), 3).unwrap();
        let (d, c) = page(&items, c.as_deref(), 3).unwrap();
        assert_eq!([a, b, d].concat(), items);
        assert!(c.is_none());
        assert!(matches!(
            page(&items, Some("garbage"), 3),
            Err(CallError::BadCursor)
        ));
    }
}
