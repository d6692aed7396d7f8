//! Exposed names: `upstream<sep>name` encoding and MCP's tool-name rules (SEP-986).

/// SEP-986: tool names are 1–128 characters.
pub const MAX_TOOL_NAME_CHARS: usize = 128;

/// The gateway's own tool that approves held calls (F11). Own tools keep one portable name
/// whatever the separator, so plans, the envelope rule text and the console name one tool.
pub const APPROVE_TOOL: &str = "fedgate__approve";

/// The approve tool's name before names were portable; config still accepts it (with a warning).
pub const LEGACY_APPROVE_TOOL: &str = "fedgate.approve";

/// Tool search (`[gateway] tool_listing = "search"`): ranked search over what the caller may
/// call, the session's working set, and a call by name for clients that cannot list it.
pub const FIND_TOOLS: &str = "fedgate__find_tools";
pub const SELECT_TOOLS: &str = "fedgate__select_tools";
pub const RESET_TOOLS: &str = "fedgate__reset_tools";
pub const CALL_TOOL: &str = "fedgate__call_tool";

/// Stages (`[stages.NAME]`): a workspace's stage, and a move to another one.
pub const STAGE_STATUS: &str = "fedgate__stage_status";
pub const STAGE_ADVANCE: &str = "fedgate__stage_advance";

/// Per-user credentials: a person forgets their own connected accounts.
pub const DISCONNECT_TOOL: &str = "fedgate__disconnect";
/// Per-user credentials: a person connects their account for an upstream by name.
pub const CONNECT_TOOL: &str = "fedgate__connect";

/// The search tools: granted to every caller while they are served (they reveal and run only
/// what the caller's roles and view allow).
pub const SEARCH_TOOLS: &[&str] = &[FIND_TOOLS, SELECT_TOOLS, RESET_TOOLS, CALL_TOOL];

/// Tools every caller may call while they are served: the search tools, the stage tools (a
/// move checks the workflow's roles itself), disconnect (it touches only the caller's own) and
/// approve (deciding follows from holding a plan or being its approver, which the plans check;
/// so a held call's next action is always one its caller can call).
pub fn granted_to_all(name: &str) -> bool {
    SEARCH_TOOLS.contains(&name)
        || name == APPROVE_TOOL
        || name == STAGE_STATUS
        || name == STAGE_ADVANCE
        || name == DISCONNECT_TOOL
        || name == CONNECT_TOOL
}

/// The gateway's built-in tools: a view passes them whatever its globs (they reveal nothing a
/// caller may not use, and without them approvals and search would be cut off).
pub const BUILTIN_TOOLS: &[&str] = &[
    APPROVE_TOOL,
    FIND_TOOLS,
    SELECT_TOOLS,
    RESET_TOOLS,
    CALL_TOOL,
    STAGE_STATUS,
    STAGE_ADVANCE,
    DISCONNECT_TOOL,
    CONNECT_TOOL,
];

/// The namespace of the gateway's own tools (`fedgate__approve`, …); no upstream may take it.
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

/// Which names the gateway may expose (`[gateway] names`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NameRule {
    /// `^[a-zA-Z0-9_-]{1,64}$`: what the function-calling APIs of OpenAI and Anthropic accept,
    /// and so what desktop clients that check every tool name accept.
    #[default]
    Portable,
    /// MCP's own rules (SEP-986): 1-128 characters of A-Z a-z 0-9 _ - .
    Mcp,
}

impl NameRule {
    /// The separator when the config names none.
    pub fn default_separator(self) -> &'static str {
        match self {
            NameRule::Portable => "__",
            NameRule::Mcp => ".",
        }
    }
}

/// How exposed names are made: the rule and the namespace separator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Naming {
    pub rule: NameRule,
    pub separator: String,
}

impl Naming {
    pub fn new(rule: NameRule, separator: impl Into<String>) -> Self {
        Self {
            rule,
            separator: separator.into(),
        }
    }

    /// The name a client sees for `name` of `upstream`, and the name it would have had without
    /// the portable rule when that rule changed it.
    pub fn expose(
        &self,
        upstream: &str,
        prefix: PrefixMode,
        name: &str,
    ) -> (String, Option<String>) {
        let raw = expose(upstream, &self.separator, prefix, name);
        match self.rule {
            NameRule::Portable if unportable(&raw).is_some() => (portable_form(&raw), Some(raw)),
            _ => (raw, None),
        }
    }

    /// The exposed form of a config reference to a tool or prompt: the canonical
    /// `upstream/name` (globs allowed in `name`) becomes `upstream<sep>name`; any other text is
    /// taken as already exposed (today's form).
    pub fn reference(&self, r: &str) -> Reference {
        if let Some((upstream, name)) = r.split_once('/') {
            // Own tools keep `__` whatever the separator (see APPROVE_TOOL).
            let sep = if upstream == OWN_NAMESPACE {
                "__"
            } else {
                self.separator.as_str()
            };
            return Reference::Canonical(format!("{upstream}{sep}{name}"));
        }
        if r == LEGACY_APPROVE_TOOL {
            return Reference::Legacy {
                exposed: APPROVE_TOOL.to_owned(),
                canonical: "fedgate/approve".to_owned(),
            };
        }
        match r.split_once(self.separator.as_str()) {
            Some((upstream, name)) => Reference::Legacy {
                exposed: r.to_owned(),
                canonical: format!("{upstream}/{name}"),
            },
            None => Reference::Bare(r.to_owned()),
        }
    }
}

/// A config reference to a tool or prompt, read by [`Naming::reference`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// `upstream/name`: the exposed form.
    Canonical(String),
    /// `upstream<sep>name`, still accepted; `canonical` is how to write it.
    Legacy { exposed: String, canonical: String },
    /// No upstream part (a glob like `*`, or a name exposed without prefix).
    Bare(String),
}

impl Reference {
    pub fn exposed(&self) -> &str {
        match self {
            Reference::Canonical(e) | Reference::Legacy { exposed: e, .. } | Reference::Bare(e) => {
                e
            }
        }
    }
}

/// Room kept for the hash suffix of a shortened name (`-` and 8 hex digits).
const HASH_SUFFIX_CHARS: usize = 9;

/// The portable form of a name outside `^[a-zA-Z0-9_-]{1,64}$`: every other character becomes
/// `_`, the result is cut to fit, and a hash of the whole original name is appended so two
/// names that map to the same text stay apart. Deterministic: the same name always gets the same
/// form, on every replica and after every restart.
pub fn portable_form(name: &str) -> String {
    use sha2::{Digest, Sha256};
    let mapped: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(PORTABLE_NAME_CHARS - HASH_SUFFIX_CHARS)
        .collect();
    let digest = Sha256::digest(name.as_bytes());
    format!("{mapped}-{}", hex::encode(&digest[..4]))
}

/// How an upstream's names are exposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
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

/// How a tool name breaks SEP-986; the words complete "exposed name `x` ...".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadToolName {
    #[error("is {0} characters long; MCP tool names are 1-{MAX_TOOL_NAME_CHARS}")]
    Length(usize),
    #[error("contains `{0}`; MCP tool names use only A-Z a-z 0-9 _ - .")]
    Char(char),
}

/// Checks an exposed tool name against SEP-986.
pub fn check_tool_name(name: &str) -> Result<(), BadToolName> {
    let len = name.chars().count();
    if len == 0 || len > MAX_TOOL_NAME_CHARS {
        return Err(BadToolName::Length(len));
    }
    if let Some(bad) = name.chars().find(|c| !is_name_char(*c)) {
        return Err(BadToolName::Char(bad));
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
    strsim::levenshtein(a, b)
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
    fn portable_forms_fit_and_stay_apart() {
        let n = Naming::new(NameRule::Portable, "__");
        assert_eq!(
            n.expose("gh", PrefixMode::Always, "x"),
            ("gh__x".into(), None)
        );
        let (dotted, original) = n.expose("gh", PrefixMode::Always, "files.read");
        assert_eq!(original.as_deref(), Some("gh__files.read"));
        assert!(
            unportable(&dotted).is_none() && dotted.starts_with("gh__files_read-"),
            "{dotted}"
        );
        let (underscored, _) = n.expose("gh", PrefixMode::Always, "files_read");
        assert_ne!(dotted, underscored);
        let long = "a".repeat(100);
        let (short, _) = n.expose("gh", PrefixMode::Always, &long);
        assert!(unportable(&short).is_none(), "{short}");
        assert_eq!(
            short,
            n.expose("gh", PrefixMode::Always, &long).0,
            "deterministic"
        );
        let (other, _) = n.expose("gh", PrefixMode::Always, &"a".repeat(101));
        assert_ne!(short, other, "names that share the kept prefix stay apart");
        let mcp = Naming::new(NameRule::Mcp, ".");
        assert_eq!(
            mcp.expose("gh", PrefixMode::Always, "files.read").0,
            "gh.files.read"
        );
        assert!(unportable(APPROVE_TOOL).is_none());
    }

    #[test]
    fn references_are_canonical_or_today_s_form() {
        let n = Naming::new(NameRule::Portable, "__");
        assert_eq!(
            n.reference("demo/echo"),
            Reference::Canonical("demo__echo".into())
        );
        assert_eq!(n.reference("demo/*").exposed(), "demo__*");
        assert_eq!(
            n.reference("demo__echo"),
            Reference::Legacy {
                exposed: "demo__echo".into(),
                canonical: "demo/echo".into()
            }
        );
        assert_eq!(
            n.reference("demo.echo"),
            Reference::Bare("demo.echo".into())
        );
        assert_eq!(n.reference("fedgate.approve").exposed(), APPROVE_TOOL);
        let mcp = Naming::new(NameRule::Mcp, ".");
        assert_eq!(mcp.reference("fedgate/approve").exposed(), APPROVE_TOOL);
        assert_eq!(mcp.reference("demo/echo").exposed(), "demo.echo");
        assert_eq!(n.reference("*"), Reference::Bare("*".into()));
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
