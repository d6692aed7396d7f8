//! What failures share, whichever module they come from: which side caused one, and their
//! text for people. The failures themselves are typed where they happen
//! (`pipeline::CallError`, described in `pipeline::error::describe`).

/// Which side a failure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Downstream,
    Upstream,
    Internal,
}

/// Whether the call reached the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// Nothing happened there: even a write may be tried again, and an approved plan refused
    /// this way is given back.
    No,
    /// It may have: a write's outcome is unknown.
    Maybe,
    /// The upstream answered.
    Yes,
}

/// Whether another attempt may succeed (whether one is *safe* is the tool's class and
/// `Reached`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Again {
    /// The same call fails the same way.
    Never,
    /// Right away: a connection lost, an upstream restarting, a timeout.
    Now,
    /// After a wait the error names (a rate limit, an open breaker, a full queue, a store
    /// that does not answer): worth it for a retry that can wait, not within one call.
    Later,
}

/// Whether another attempt of a failed call may succeed, and whether it is safe for a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub again: Again,
    pub reached: Reached,
}

impl Retry {
    /// A failure that the same call meets again.
    pub const NEVER: Retry = Retry {
        again: Again::Never,
        reached: Reached::Yes,
    };

    /// Another attempt of a call that is safe to repeat (a read) may succeed.
    pub fn for_reads(self) -> bool {
        self.again != Again::Never
    }

    /// Another attempt may succeed and is safe whatever the tool does: the call never got
    /// there.
    pub fn for_writes(self) -> bool {
        self.for_reads() && self.reached == Reached::No
    }
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
