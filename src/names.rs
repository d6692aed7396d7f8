//! Exposed names: `upstream<sep>name` encoding and MCP's tool-name rules (SEP-986).

/// SEP-986: tool names are 1–128 characters.
pub const MAX_TOOL_NAME_CHARS: usize = 128;

/// The gateway's own tool that approves held calls (F11).
pub const APPROVE_TOOL: &str = "fedgate.approve";

/// The namespace of the gateway's own tools (`fedgate.approve`, …); no upstream may take it.
pub const OWN_NAMESPACE: &str = "fedgate";

/// The most characters of a caller-supplied name or URI that errors, logs and audit records
/// repeat.
pub const MAX_SHOWN_CHARS: usize = 200;

/// A caller-supplied name or URI as errors, logs and audit records show it: control characters
/// escaped (a newline cannot forge a log line) and at most [`MAX_SHOWN_CHARS`] characters (a
/// name of megabytes is not echoed back).
pub fn shown(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == MAX_SHOWN_CHARS {
            out.push_str(&format!("…({} characters)", s.chars().count()));
            return out;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The longest tool name the common function-calling APIs accept.
pub const PORTABLE_NAME_CHARS: usize = 64;

/// Why a valid MCP tool name would be refused by the function-calling APIs many clients pass
/// tool names to unchanged (OpenAI's and Anthropic's accept only `^[a-zA-Z0-9_-]{1,64}$`);
/// `None` when it is accepted everywhere.
pub fn unportable(name: &str) -> Option<String> {
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-')))
    {
        return Some(format!("contains `{c}`"));
    }
    let len = name.chars().count();
    (len > PORTABLE_NAME_CHARS).then(|| format!("is {len} characters long"))
}

/// How an upstream's names are exposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixMode {
    /// `upstream<sep>name`
    Always,
    /// The upstream's own name, allowed only while unique.
    Never,
}

/// Characters SEP-986 allows in a tool name.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// Checks an exposed tool name against SEP-986; the error completes "exposed name `x` ...".
pub fn check_tool_name(name: &str) -> Result<(), String> {
    let len = name.chars().count();
    if len == 0 || len > MAX_TOOL_NAME_CHARS {
        return Err(format!(
            "is {len} characters long; MCP tool names are 1-{MAX_TOOL_NAME_CHARS}"
        ));
    }
    if let Some(bad) = name.chars().find(|c| !is_name_char(*c)) {
        return Err(format!(
            "contains `{bad}`; MCP tool names use only A-Z a-z 0-9 _ - ."
        ));
    }
    Ok(())
}

/// The name a client sees for `name` of `upstream`.
pub fn expose(upstream: &str, separator: &str, prefix: PrefixMode, name: &str) -> String {
    match prefix {
        PrefixMode::Always => format!("{upstream}{separator}{name}"),
        PrefixMode::Never => name.to_owned(),
    }
}

/// The upstream whose namespace `exposed` falls in (`github.x` -> `github`), if any.
pub fn namespace_owner<'a>(
    exposed: &str,
    separator: &str,
    upstreams: &'a [String],
) -> Option<&'a str> {
    let (head, _) = exposed.split_once(separator)?;
    upstreams
        .iter()
        .find(|u| u.as_str() == head)
        .map(String::as_str)
}

/// "; did you mean `c`?" when one candidate is a likely misspelling of `word` (at most a third
/// of its letters differ), else nothing.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let closest = candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .min();
    match closest {
        Some((d, c)) if d > 0 && d <= word.chars().count().div_ceil(3) => {
            format!("; did you mean `{c}`?")
        }
        _ => String::new(),
    }
}

/// Levenshtein distance, for "did you mean" hints.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance() {
        assert_eq!(edit_distance("echo", "echo"), 0);
        assert_eq!(edit_distance("demo.ecoh", "demo.echo"), 2);
    }

    #[test]
    fn names_follow_sep_986() {
        assert!(check_tool_name("github.create_issue").is_ok());
        assert!(check_tool_name("").is_err());
        assert!(check_tool_name("a b").is_err());
        assert!(check_tool_name("a,b").is_err());
        assert!(check_tool_name(&"x".repeat(128)).is_ok());
        assert!(check_tool_name(&"x".repeat(129)).is_err());
    }

    #[test]
    fn expose_and_owner() {
        assert_eq!(expose("gh", ".", PrefixMode::Always, "x"), "gh.x");
        assert_eq!(expose("gh", "__", PrefixMode::Never, "x"), "x");
        let ups = vec!["gh".to_owned(), "db".to_owned()];
        assert_eq!(namespace_owner("gh.x", ".", &ups), Some("gh"));
        assert_eq!(namespace_owner("ghx", ".", &ups), None);
        assert_eq!(namespace_owner("zz.x", ".", &ups), None);
    }

    #[test]
    fn shown_names_are_bounded_and_escaped() {
        assert_eq!(shown("demo.echo"), "demo.echo");
        assert_eq!(shown("a\nb\u{1b}"), "a\\nb\\u{1b}");
        let long = shown(&"x".repeat(5000));
        assert!(
            long.ends_with("…(5000 characters)") && long.chars().count() < 230,
            "{long}"
        );
    }
}
