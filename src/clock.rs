//! Wall-clock time for state that outlives a process (sealed cursors, session ids, parked-call
//! tickets): Unix milliseconds, read in one place so tests can pass their own instant instead.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the system clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Serializes a duration as whole milliseconds (config dumps name such fields `*_ms`).
pub fn serialize_millis<S: serde::Serializer>(
    d: &std::time::Duration,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// [`serialize_millis`] of an optional duration.
pub fn serialize_millis_opt<S: serde::Serializer>(
    d: &Option<std::time::Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => serialize_millis(d, s),
        None => s.serialize_none(),
    }
}
