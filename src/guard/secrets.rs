//! Secret detectors: credentials recognisable by their shape (cloud keys, forge and chat
//! tokens, private keys, JWTs, bearer tokens, URLs with a password) and high-entropy values in
//! fields whose name says they hold a secret.
//!
//! Matching is linear in the text: the `regex` crate runs finite automata, never backtracking,
//! so no input can make a pattern slow.

use std::{ops::Range, sync::LazyLock};

use regex::Regex;

/// One detector: its stable name (in plans, audit records and metric labels) and pattern. A
/// pattern with a capture group names the secret by that group (the value, not its key).
const DETECTORS: [(&str, &str); 12] = [
    ("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    (
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
    ),
    ("gitlab_token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("stripe_key", r"\b(?:sk|rk)_live_[A-Za-z0-9]{20,}\b"),
    ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    (
        "private_key",
        r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY(?: BLOCK)?-----",
    ),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ),
    ("bearer_token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{20,}=*"),
    (
        "url_password",
        r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@]+:[^\s:/@]+@[^\s/]",
    ),
    (
        "basic_auth",
        r"(?i)\bauthorization:\s*basic\s+[A-Za-z0-9+/]{12,}=*",
    ),
    // `DB_PASSWORD=…` in an env file, `"api_key": "…"` in JSON text, `token: …` in YAML. It
    // starts at the keyword, so the keywords are what the matcher looks for first.
    (
        ASSIGNMENT,
        r#"(?i:secret|token|passw(?:or)?d|api[_-]?key|private[_-]?key|credential)[a-z0-9_.-]{0,40}["']?\s{0,8}[=:]\s{0,8}["']?([^\s"'*<>{}$,;]{8,})"#,
    ),
];

/// Detector of a secret-named key assigned a value in text.
const ASSIGNMENT: &str = "secret_assignment";
/// An assigned value is taken up to this many bytes. The patterns repeat classes without an
/// upper bound and cut afterwards: a bounded repetition of a Unicode class compiles into that
/// many copies of its automaton (`{8,512}` and the URL's two `{1,256}` took 6 MiB of memory,
/// built on the first call a guard scanned).
const MAX_ASSIGNED: usize = 512;
/// Below this spread an assigned value is a word or a number, not a secret.
const MIN_ASSIGNED_ENTROPY: f64 = 2.5;

/// Field names that say their value is a secret (matched against the last path segment).
static SECRET_FIELD: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:secret|token|passw(?:or)?d|api[_-]?key|private[_-]?key|credential|auth)")
        .ok()
});

/// Each detector on its own: one pass each, but every pass starts from the literals its
/// pattern begins with (`AKIA`, `ghp_`, `-----BEGIN`, …), which the matcher finds with SIMD
/// search, so ordinary text is skimmed rather than run through an automaton. Word boundaries
/// are ASCII (`\b` in the patterns is made so at compile time): a Unicode one would make the
/// automaton give up on the first non-ASCII byte and fall back to a much slower engine.
static COMPILED: LazyLock<Option<Vec<Regex>>> = LazyLock::new(|| {
    DETECTORS
        .iter()
        .map(|(_, p)| Regex::new(&ascii_boundaries(p)))
        .collect::<Result<_, _>>()
        .ok()
});

/// `pattern` with every `\b` an ASCII word boundary.
pub(super) fn ascii_boundaries(pattern: &str) -> String {
    pattern.replace(r"\b", r"(?-u:\b)")
}

/// A value shorter than this in a secret-looking field is not a secret (a flag, a short id).
const MIN_FIELD_SECRET: usize = 16;
/// Bits of entropy per character a random token has at least (hex is 4, base64 6; prose ~2.5).
const MIN_ENTROPY: f64 = 3.5;

/// Where in a string a detector matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub detector: &'static str,
    pub range: Range<usize>,
}

/// The detectors' names, for the metrics' label values.
pub fn detector_names() -> impl Iterator<Item = &'static str> {
    DETECTORS
        .iter()
        .map(|(n, _)| *n)
        .chain(std::iter::once("secret_field"))
}

/// Every secret in `text`, in order, not overlapping. `field` is the name of the JSON field
/// holding it (empty when none): a long random value there is a secret whatever its shape.
pub fn scan(text: &str, field: &str) -> Vec<Hit> {
    let mut hits = Vec::new();
    for (re, (name, _)) in COMPILED.iter().flatten().zip(DETECTORS.iter()) {
        if re.captures_len() == 1 {
            hits.extend(re.find_iter(text).map(|m| Hit {
                detector: name,
                range: m.range(),
            }));
            continue;
        }
        for caps in re.captures_iter(text) {
            let Some(m) = caps.get(1).or_else(|| caps.get(0)) else {
                continue;
            };
            let mut range = m.range();
            if *name == ASSIGNMENT {
                let mut end = range.end.min(range.start + MAX_ASSIGNED);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                range.end = end;
                if !plausible_value(&text[range.clone()]) {
                    continue;
                }
            }
            hits.push(Hit {
                detector: name,
                range,
            });
        }
    }
    if hits.is_empty() && secret_field(field) && looks_random(text) {
        hits.push(Hit {
            detector: "secret_field",
            range: 0..text.len(),
        });
    }
    hits.sort_by_key(|h| h.range.start);
    // Overlapping hits (a bearer token that is also a JWT) are one secret: the first wins.
    let mut end = 0;
    hits.retain(|h| {
        let keep = h.range.start >= end;
        if keep {
            end = h.range.end;
        }
        keep
    });
    hits
}

fn secret_field(field: &str) -> bool {
    !field.is_empty() && SECRET_FIELD.as_ref().is_some_and(|re| re.is_match(field))
}

/// An assigned value that may be a password: not a number (`max_tokens: 100000000`), not one
/// character repeated.
fn plausible_value(v: &str) -> bool {
    !v.bytes().all(|b| b.is_ascii_digit()) && entropy(v) >= MIN_ASSIGNED_ENTROPY
}

/// A value of one token (no spaces) whose characters are spread like a random key's.
fn looks_random(text: &str) -> bool {
    let t = text.trim();
    if t.len() < MIN_FIELD_SECRET || t.len() > 4096 || t.contains(char::is_whitespace) {
        return false;
    }
    entropy(t) >= MIN_ENTROPY
}

/// Shannon entropy of `t`'s bytes, in bits per byte.
fn entropy(t: &str) -> f64 {
    let mut counts = [0u32; 256];
    for b in t.bytes() {
        counts[b as usize] += 1;
    }
    let n = t.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

/// `text` with every hit replaced by `[REDACTED:<detector>]`.
pub fn redact(text: &str, hits: &[Hit]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for h in hits {
        let (Some(before), true) = (text.get(at..h.range.start), h.range.end <= text.len()) else {
            continue;
        };
        out.push_str(before);
        out.push_str("[REDACTED:");
        out.push_str(h.detector);
        out.push(']');
        at = h.range.end;
    }
    out.push_str(text.get(at..).unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<&'static str> {
        scan(text, "").iter().map(|h| h.detector).collect()
    }

    #[test]
    fn every_pattern_compiles() {
        assert!(COMPILED.is_some());
        assert!(SECRET_FIELD.is_some());
    }

    #[test]
    fn each_detector_finds_its_secret() {
        let cases = [
            ("key AKIAIOSFODNN7EXAMPLE here", "aws_access_key"),
            (
                "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 ok",
                "github_token",
            ),
            (
                "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
                "github_token",
            ),
            ("glpat-abcdefghij0123456789", "gitlab_token"),
            ("xoxb-1234567890-abcdefghij", "slack_token"),
            ("sk_live_abcdefghijklmnopqrstuvwx", "stripe_key"),
            ("AIzaSyA1234567890abcdefghijklmnopqrstuv", "google_api_key"),
            ("-----BEGIN RSA PRIVATE KEY-----\nMIIE", "private_key"),
            ("-----BEGIN OPENSSH PRIVATE KEY-----", "private_key"),
            (
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
                "jwt",
            ),
            (
                "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345",
                "bearer_token",
            ),
            (
                "postgres://app:s3cr3t-pass@db.internal:5432/app",
                "url_password",
            ),
            ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "basic_auth"),
            ("DB_PASSWORD=hunter2-prod", ASSIGNMENT),
            (r#"{"api_key": "q8Zr2LkP0vXw"}"#, ASSIGNMENT),
            ("client_secret: 'Zr2LkP0vXw7N'", ASSIGNMENT),
        ];
        for (text, detector) in cases {
            assert_eq!(found(text), [detector], "{text}");
        }
    }

    #[test]
    fn ordinary_text_is_no_secret() {
        for text in [
            "the quick brown fox jumps over the lazy dog",
            "AKIA is a prefix; AKIA123 is too short",
            "ghp_short",
            "https://example.com/path?q=1",
            "https://user@example.com/no-password",
            "-----BEGIN PUBLIC KEY-----",
            "eyJ alone is not a token",
            "bearer of good news",
            "SELECT * FROM users WHERE id = 42",
            r#"{"input_tokens": 123456789, "max_tokens": 4096}"#,
            "password: ********",
            "API_KEY=${API_KEY}",
            "token=<your-token-here>",
            "password=aaaaaaaaaaaa",
        ] {
            assert!(found(text).is_empty(), "{text}: {:?}", found(text));
        }
    }

    #[test]
    fn random_values_in_secret_fields_are_secrets_and_words_are_not() {
        let random = "q8Zr2LkP0vXw7NcY4tBm";
        assert_eq!(scan(random, "api_key")[0].detector, "secret_field");
        assert_eq!(scan(random, "clientSecret")[0].detector, "secret_field");
        assert!(scan(random, "title").is_empty(), "not a secret field");
        assert!(
            scan("aaaaaaaaaaaaaaaaaaaa", "token").is_empty(),
            "low entropy"
        );
        assert!(scan("short", "password").is_empty(), "too short");
        assert!(
            scan("a sentence about the password policy", "password").is_empty(),
            "prose"
        );
    }

    #[test]
    fn redaction_replaces_only_the_secret() {
        let text = "use AKIAIOSFODNN7EXAMPLE and xoxb-1234567890-abcdefghij now";
        let hits = scan(text, "");
        assert_eq!(hits.len(), 2);
        assert_eq!(
            redact(text, &hits),
            "use [REDACTED:aws_access_key] and [REDACTED:slack_token] now"
        );
    }

    #[test]
    fn an_assignment_masks_the_value_and_keeps_the_key() {
        let text = r#"{"user":"ann","password":"q8Zr2LkP0vXw"}"#;
        assert_eq!(
            redact(text, &scan(text, "")),
            r#"{"user":"ann","password":"[REDACTED:secret_assignment]"}"#
        );
    }

    #[test]
    fn an_assigned_value_is_taken_up_to_its_bound_at_a_character_boundary() {
        // 511 ASCII bytes, then a two-byte character straddling the bound, then more.
        let value = format!(
            "{}é{}",
            "q8Zr2LkP".repeat(64)[..511].to_owned(),
            "x".repeat(40)
        );
        let text = format!("token={value} rest");
        let hits = scan(&text, "");
        assert_eq!(hits.len(), 1, "{hits:?}");
        let start = "token=".len();
        assert_eq!(hits[0].range, start..start + 511);
        // A URL's credentials are found whatever their length.
        let long = format!(
            "https://{}:{}@example.com/",
            "u".repeat(300),
            "p".repeat(300)
        );
        assert_eq!(found(&long), ["url_password"]);
    }

    #[test]
    fn overlapping_hits_are_one_secret() {
        let text = "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N";
        let hits = scan(text, "");
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert!(!redact(text, &hits).contains("eyJ"));
    }

    #[test]
    fn secrets_among_other_scripts_are_found() {
        assert_eq!(
            found("ключ: AKIAIOSFODNN7EXAMPLE — готово"),
            ["aws_access_key"]
        );
        assert_eq!(found("日本語AKIAIOSFODNN7EXAMPLE"), ["aws_access_key"]);
        assert!(found(&"Ünïcödé текст 日本語 token: abc ".repeat(10_000)).is_empty());
    }

    #[test]
    fn inputs_built_to_slow_a_matcher_are_scanned_correctly() {
        // Long runs that almost match (quadratic or worse for a backtracking matcher; the
        // benchmark measures the time): the answers are still right.
        assert!(found(&"AKIA".repeat(250_000)).is_empty(), "one long word");
        let bearer = format!("bearer {}", "a".repeat(1_000_000));
        assert_eq!(found(&bearer), ["bearer_token"]);
        assert!(found(&("x://".to_owned() + &"a:".repeat(500_000))).is_empty());
        assert!(found(&("eyJ".to_owned() + &"a.eyJ".repeat(200_000))).is_empty());
    }
}
