//! Wall-clock time for state that outlives a process (sealed cursors, session ids, parked-call
//! tickets): Unix milliseconds, read in one place so tests can pass their own instant instead.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the system clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
