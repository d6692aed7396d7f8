//! What every failure of a call says about itself, whichever module it comes from: which side
//! caused it and whether another attempt can help. The failures themselves are typed where
//! they happen (`pipeline::CallError`, `router::cursor::BadCursor`, …).

/// Which side a failure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Downstream,
    Upstream,
    Internal,
}

/// A failure classified once, where it is defined.
pub trait Classify {
    fn side(&self) -> Side;
    /// Whether another attempt of a call that is safe to repeat may succeed (the failure says
    /// nothing about the call itself: connection lost, upstream down, timeout).
    fn retryable(&self) -> bool;
    /// A stable code for audit records, logs and metric labels.
    fn code(&self) -> &'static str;
}
