//! Operators' own guardrail rules, per tier and upstream: how many findings a message records,
//! what is allowed through (a field, a detector in a field, a value by its SHA-256), their own
//! detectors (a name, a pattern, the fields it reads) and the optional PII detectors. Compiled
//! once at load; a pattern that does not compile or could match empty text is a config error.

use std::{collections::HashSet, sync::LazyLock};

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{pii::Pii, secrets::Hit};

/// One allowlist entry: a field (JSON pointer, `*` one segment, a final `**` any depth), a
/// detector in it, or a value by its SHA-256 (hex) wherever it is.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RawAllow {
    pub field: Option<String>,
    pub detector: Option<String>,
    pub sha256: Option<String>,
}

/// One operator's detector.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RawDetector {
    pub name: String,
    pub pattern: String,
    /// The fields it reads (JSON pointers as in `allow`); every field when absent.
    pub fields: Option<Vec<String>>,
}

/// The rules as configured (the source of the compiled [`Rules`]).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct RawRules {
    pub max_findings: u16,
    pub pii: Vec<Pii>,
    pub allow: Vec<RawAllow>,
    pub detectors: Vec<RawDetector>,
}

struct Custom {
    name: &'static str,
    re: Regex,
    fields: Vec<String>,
}

/// Compiled rules of one tier or upstream.
pub struct Rules {
    pub raw: RawRules,
    custom: Vec<Custom>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.raw.fmt(f)
    }
}

impl PartialEq for Rules {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl Eq for Rules {}

impl Serialize for Rules {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

/// Largest compiled pattern of an operator's detector.
const MAX_PATTERN_BYTES: usize = 1 << 20;

static STANDARD: LazyLock<Rules> = LazyLock::new(|| Rules::bound_only(super::MAX_FINDINGS));

impl Rules {
    /// Rules that only bound the findings.
    pub fn bound_only(max_findings: u16) -> Rules {
        Rules {
            raw: RawRules {
                max_findings,
                ..RawRules::default()
            },
            custom: Vec::new(),
        }
    }

    /// No rules of an operator's: the default bound only.
    pub fn standard() -> &'static Rules {
        &STANDARD
    }

    /// Whether there is anything beyond the bound to apply (the fast path skips it all).
    fn any(&self) -> bool {
        !self.raw.pii.is_empty() || !self.raw.allow.is_empty() || !self.custom.is_empty()
    }

    /// Compiles `raw`; every problem names the entry.
    pub fn compile(raw: RawRules) -> Result<Rules, RuleError> {
        let mut custom = Vec::new();
        let builtin: HashSet<&str> = super::secrets::detector_names()
            .chain(Pii::ALL.iter().map(|p| p.name()))
            .collect();
        for d in &raw.detectors {
            custom.push(compile_detector(d, &builtin)?);
        }
        for a in &raw.allow {
            check_allow(a, &builtin, &raw.detectors)?;
        }
        Ok(Rules { raw, custom })
    }

    /// The operator's detectors and PII detectors on `text` at `pointer`, added to `hits`;
    /// then every hit the allowlist lets through removed.
    pub(super) fn apply(&self, text: &str, pointer: &str, hits: &mut Vec<Hit>) {
        if !self.any() {
            return;
        }
        let before = hits.len();
        for c in &self.custom {
            if c.fields.is_empty() || c.fields.iter().any(|f| pointer_matches(f, pointer)) {
                hits.extend(c.re.find_iter(text).map(|m| Hit {
                    detector: c.name,
                    range: m.range(),
                }));
            }
        }
        for p in &self.raw.pii {
            p.scan(text, hits);
        }
        if hits.len() != before {
            super::secrets::settle(hits);
        }
        hits.retain(|h| !self.allowed(text, pointer, h));
    }

    fn allowed(&self, text: &str, pointer: &str, h: &Hit) -> bool {
        self.raw.allow.iter().any(|a| {
            let field = a
                .field
                .as_deref()
                .is_none_or(|f| pointer_matches(f, pointer));
            let detector = a.detector.as_deref().is_none_or(|d| d == h.detector);
            let value = a.sha256.as_deref().is_none_or(|want| {
                let got = hex::encode(Sha256::digest(text.get(h.range.clone()).unwrap_or("")));
                got == want
            });
            field && detector && value
        })
    }
}

/// Why an operator's guardrail rules do not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("detector `{0}`: a name is 1 to 40 of a-z, 0-9 and _, starting with a letter")]
    BadName(String),
    #[error("detector `{0}`: a built-in detector has that name")]
    BuiltinName(String),
    #[error("detector `{name}`: its pattern does not compile: {why}")]
    Pattern { name: String, why: String },
    #[error(
        "detector `{0}`: its pattern can match empty text; make it match at least one character"
    )]
    MatchesEmpty(String),
    #[error("detector `{name}`: field `{field}` is not a JSON pointer (`/path`)")]
    DetectorField { name: String, field: String },
    #[error("allow: an entry names a `field`, a `sha256`, or both")]
    AllowNothing,
    #[error("allow: field `{0}` is not a JSON pointer (`/path`)")]
    AllowField(String),
    #[error("allow: unknown detector `{0}`")]
    AllowDetector(String),
    #[error("allow: sha256 is 64 lower-case hex digits (`printf %s VALUE | sha256sum`)")]
    AllowHash,
}

fn compile_detector(d: &RawDetector, builtin: &HashSet<&str>) -> Result<Custom, RuleError> {
    let valid = d.name.len() <= 40
        && d.name.starts_with(|c: char| c.is_ascii_lowercase())
        && d.name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !valid {
        return Err(RuleError::BadName(d.name.clone()));
    }
    if builtin.contains(d.name.as_str()) {
        return Err(RuleError::BuiltinName(d.name.clone()));
    }
    let re = RegexBuilder::new(&super::secrets::ascii_boundaries(&d.pattern))
        .size_limit(MAX_PATTERN_BYTES)
        .build()
        .map_err(|e| RuleError::Pattern {
            name: d.name.clone(),
            why: e.to_string(),
        })?;
    // A pattern that matches empty text would "find" a secret between every two characters.
    let empty = Regex::new(&format!("^(?:{})$", d.pattern)).map_or(true, |r| r.is_match(""));
    if empty {
        return Err(RuleError::MatchesEmpty(d.name.clone()));
    }
    let fields = d.fields.clone().unwrap_or_default();
    if let Some(f) = fields.iter().find(|f| !f.starts_with('/')) {
        return Err(RuleError::DetectorField {
            name: d.name.clone(),
            field: f.clone(),
        });
    }
    Ok(Custom {
        name: intern(&d.name),
        re,
        fields,
    })
}

fn check_allow(
    a: &RawAllow,
    builtin: &HashSet<&str>,
    custom: &[RawDetector],
) -> Result<(), RuleError> {
    if a.field.is_none() && a.sha256.is_none() {
        return Err(RuleError::AllowNothing);
    }
    if let Some(f) = a.field.as_deref().filter(|f| !f.starts_with('/')) {
        return Err(RuleError::AllowField(f.to_owned()));
    }
    if let Some(d) = &a.detector
        && !builtin.contains(d.as_str())
        && !custom.iter().any(|c| &c.name == d)
    {
        return Err(RuleError::AllowDetector(d.clone()));
    }
    if let Some(h) = &a.sha256
        && (h.len() != 64
            || !h
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    {
        return Err(RuleError::AllowHash);
    }
    Ok(())
}

/// Whether JSON pointer `pointer` is matched by `pattern` (`*` one segment, a final `**` the
/// rest, however deep).
fn pointer_matches(pattern: &str, pointer: &str) -> bool {
    let mut want = pattern.split('/');
    let mut got = pointer.split('/');
    loop {
        match (want.next(), got.next()) {
            (Some("**"), _) => return true,
            (Some(w), Some(g)) if w == "*" || w == g => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// A detector's name for the life of the process: findings name detectors by `&'static str`,
/// and operators' names come from config. Each distinct name is kept once, so reloads with the
/// same names keep nothing more.
fn intern(name: &str) -> &'static str {
    static NAMES: LazyLock<parking_lot::Mutex<HashSet<&'static str>>> =
        LazyLock::new(Default::default);
    let mut names = NAMES.lock();
    if let Some(n) = names.get(name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(n);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(raw: RawRules) -> Result<Rules, RuleError> {
        Rules::compile(raw)
    }

    #[test]
    fn pointers_match_by_segment() {
        assert!(pointer_matches("/a/*/c", "/a/7/c"));
        assert!(pointer_matches("/a/**", "/a/b/c"));
        assert!(!pointer_matches("/a/*", "/a/b/c"));
        assert!(!pointer_matches("/a", "/ab"));
    }

    #[test]
    fn bad_rules_are_clear_errors() {
        let detector = |name: &str, pattern: &str| RawRules {
            detectors: vec![RawDetector {
                name: name.into(),
                pattern: pattern.into(),
                fields: None,
            }],
            ..RawRules::default()
        };
        for (raw, says) in [
            (detector("acme", "acme_[a-z"), "does not compile"),
            (detector("acme", "x*"), "can match empty text"),
            (detector("acme", "(?:)|a"), "can match empty text"),
            (detector("jwt", "acme_[a-z]+"), "built-in"),
            (detector("Acme!", "a"), "a name is"),
            (
                RawRules {
                    allow: vec![RawAllow {
                        field: Some("/x".into()),
                        detector: Some("nope".into()),
                        sha256: None,
                    }],
                    ..RawRules::default()
                },
                "unknown detector `nope`",
            ),
            (
                RawRules {
                    allow: vec![RawAllow::default()],
                    ..RawRules::default()
                },
                "names a `field`",
            ),
        ] {
            let e = rules(raw).expect_err(says);
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn custom_detectors_fire_in_their_fields_and_allowlists_let_values_through() {
        let r = rules(RawRules {
            max_findings: 100,
            detectors: vec![RawDetector {
                name: "acme_token".into(),
                pattern: r"\bacme_[a-z0-9]{16}\b".into(),
                fields: Some(vec!["/config/**".into()]),
            }],
            allow: vec![
                RawAllow {
                    field: Some("/fixtures/*".into()),
                    detector: None,
                    sha256: None,
                },
                RawAllow {
                    field: None,
                    detector: None,
                    sha256: Some(hex::encode(Sha256::digest("AKIAIOSFODNN7EXAMPLE"))),
                },
            ],
            ..RawRules::default()
        })
        .unwrap();
        let mut hits = Vec::new();
        r.apply("key acme_0123456789abcdef", "/config/a", &mut hits);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].detector, "acme_token");
        let mut hits = Vec::new();
        r.apply("key acme_0123456789abcdef", "/note", &mut hits);
        assert!(hits.is_empty(), "not its field");
        let text = "AKIAIOSFODNN7EXAMPLE";
        let mut hits = super::super::secrets::scan(text, "");
        r.apply(text, "/note", &mut hits);
        assert!(hits.is_empty(), "allowed by its hash");
        let mut hits = super::super::secrets::scan("AKIAIOSFODNN7EXAMPLF", "");
        r.apply("AKIAIOSFODNN7EXAMPLF", "/fixtures/0", &mut hits);
        assert!(hits.is_empty(), "allowed field");
    }
}
