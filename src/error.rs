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

/// An error's text for people: the Rust type names some library errors embed
/// (`Transport [fedgate::upstream::tap::Tap<…>] error: Broken pipe`) are dropped, and what
/// looks like a secret is masked (an upstream's error text may quote one).
pub fn plain(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']').map(|c| open + c) else {
            break;
        };
        out.push_str(&rest[..open]);
        let inside = &rest[open + 1..close];
        if !inside.contains("::") {
            out.push_str(&rest[open..=close]);
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    let out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::guard::masked(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn type_names_are_dropped_from_error_text() {
        let e =
            "Transport [fedgate::upstream::tap::Tap<rmcp::transport::X<A, B>>] error: Broken pipe";
        assert_eq!(super::plain(&e), "Transport error: Broken pipe");
        assert_eq!(super::plain(&"list [a, b] is fine"), "list [a, b] is fine");
        assert_eq!(super::plain(&"unclosed [x::y"), "unclosed [x::y");
    }
}
