//! Secret detectors: credentials recognisable by their shape (cloud keys, forge, chat and AI
//! provider tokens, whole private keys, JWTs, authorization and cookie headers, connection
//! strings with a password) and values assigned to names that say they are secrets, in text
//! (`DB_PASSWORD=…`, `"SecretAccessKey": "…"`) or as a JSON field (`{"password": …}`).
//!
//! Matching is linear in the text: the `regex` crate runs finite automata, never backtracking,
//! so no input can make a pattern slow. One Aho-Corasick pass over the text finds the literals
//! each detector needs (`AKIA`, `ghp_`, `-----BEGIN`, `password`, …) and only the detectors
//! whose literals occur run their pattern.

use std::{ops::Range, sync::LazyLock};

use regex::Regex;

use super::anchors::{Anchor, Anchors};

/// One built-in detector: its stable name (in plans, audit records and metric labels), the
/// literals one of which any match contains (as written, or in any case where the pattern is
/// case-insensitive), and its pattern. A pattern with a capture group names the secret by that
/// group (the value, not its name).
struct Spec {
    name: &'static str,
    anchors: &'static [&'static str],
    pattern: &'static str,
}

/// Names that say a value is a secret, as the last word of a name (`STRIPE_SECRET_KEY`,
/// `clientSecret`, `db.password`); `secret_name` or `tokenizer` do not end in one.
const SECRET_WORDS: &str = r"(?:secret|token|passw(?:or)?d|pwd|passphrase|api[_.-]?key|private[_.-]?key|access[_.-]?key|account[_.-]?key|signing[_.-]?key|credentials?)(?:[_.-]?(?:access[_.-]?)?key)?(?:[_.-]?base)?";

const DETECTORS: &[Spec] = &[
    Spec {
        name: "aws_access_key",
        anchors: &["AKIA", "ASIA", "ABIA", "ACCA", "A3T"],
        pattern: r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[0-9A-Z]{16}\b",
    },
    Spec {
        name: "github_token",
        anchors: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
        pattern: r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
    },
    Spec {
        name: "gitlab_token",
        anchors: &["glpat-", "gldt-", "glptt-", "glrt-"],
        pattern: r"\b(?:glpat|gldt|glptt|glrt)-[A-Za-z0-9_-]{20,}",
    },
    Spec {
        name: "slack_token",
        anchors: &["xox", "hooks.slack.com"],
        pattern: r"\bxox[abposre]-[A-Za-z0-9-]{10,}|https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9/_-]{20,}",
    },
    Spec {
        name: "stripe_key",
        anchors: &["_live_", "_test_"],
        pattern: r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}\b",
    },
    Spec {
        name: "google_api_key",
        anchors: &["AIza"],
        pattern: r"\bAIza[0-9A-Za-z_-]{35}",
    },
    Spec {
        name: "ai_api_key",
        anchors: &["sk-"],
        pattern: r"\bsk-(?:ant-(?:api|admin)\d\d-[A-Za-z0-9_-]{32,}|(?:proj|svcacct|admin)-[A-Za-z0-9_-]{32,}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})",
    },
    Spec {
        name: "package_token",
        anchors: &["npm_", "pypi-AgE"],
        pattern: r"\bnpm_[A-Za-z0-9]{36}\b|\bpypi-AgE[A-Za-z0-9_-]{50,}",
    },
    Spec {
        name: "service_token",
        anchors: &[
            "glsa_", "glc_", "_v1_", "hvs.", "shpat_", "shpss_", "shpca_", "hf_",
        ],
        pattern: r"\b(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2}|do[opr]_v1_[a-f0-9]{64}|hvs\.[A-Za-z0-9_-]{90,}|shp(?:at|ss|ca)_[a-fA-F0-9]{32}|hf_[A-Za-z]{34})\b",
    },
    Spec {
        // `curl -u user:password`, `--password=…` on a command line.
        name: "cli_password",
        anchors: &["-u ", "-u\t", "-u=", "--user", "--password"],
        pattern: r#"(?:^|\s)(?:(?:-u|--user)[ \t=]+["']?[^\s:"']+:|--password[ \t=]+["']?)([^\s"']{4,})"#,
    },
    Spec {
        name: "sendgrid_key",
        anchors: &["SG."],
        pattern: r"\bSG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}",
    },
    Spec {
        // The whole block, header to footer: its base64 lines are the key. A block cut short
        // (a truncated paste) is a key to the end of the text.
        name: "private_key",
        anchors: &["PRIVATE KEY"],
        pattern: r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END [A-Z0-9 ]{0,40}-----|\z)",
    },
    Spec {
        name: "jwt",
        anchors: &["eyJ"],
        pattern: r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    },
    Spec {
        name: "bearer_token",
        anchors: &["bearer"],
        pattern: r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{20,}=*",
    },
    Spec {
        // `scheme://user:password@host`, the user possibly empty (`redis://:pw@host`).
        name: "url_password",
        anchors: &["://"],
        pattern: r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@]*:([^\s:/@]+)@[^\s/]",
    },
    Spec {
        // `Authorization: Basic …` in HTTP text, `"Authorization": "Basic …"` in JSON text.
        name: "basic_auth",
        anchors: &["authorization"],
        pattern: r#"(?i)\bauthorization["']?\s{0,8}[:=]\s{0,8}["']?(?:basic|digest|token|negotiate)\s+([A-Za-z0-9+/._~=-]{8,})"#,
    },
    Spec {
        name: "cookie_header",
        anchors: &["cookie"],
        pattern: r#"(?i)\b(?:set-)?cookie["']?[ \t]{0,8}:[ \t]{0,8}["']?([^\s=;"']{1,64}=[^\r\n"']{6,})"#,
    },
    // `DB_PASSWORD=…` in an env file, `"api_key": "…"` in JSON text, `token: …` in YAML, the
    // name in any casing (`STRIPE_SECRET_KEY=`, `"SecretAccessKey":`). It starts at the name's
    // last word, so those words are what the prefilter looks for.
    Spec {
        name: ASSIGNMENT,
        anchors: &[
            "secret",
            "token",
            "passw",
            "pwd",
            "passphrase",
            "key",
            "credential",
        ],
        pattern: "",
    },
];

/// Detector of a secret-named key assigned a value in text.
const ASSIGNMENT: &str = "secret_assignment";
/// Detector of a secret-named JSON field's value, or an authorization header's.
const FIELD: &str = "secret_field";
/// Below this spread an assigned value is a word or a number, not a secret.
const MIN_ASSIGNED_ENTROPY: f64 = 2.5;
/// A shorter assigned value is a flag, a short id, or nothing.
const MIN_ASSIGNED: usize = 8;

/// The assignment pattern: a name ending in a secret word; `=`, `:` or `=>` (quoted or not,
/// JSON escaped inside JSON), an XML element's `>` or a quoted argument's `,`; the value.
fn assignment_pattern() -> String {
    format!(
        r#"(?i:{SECRET_WORDS})(?:(?:\\?["'])?[ \t]{{0,8}}(?:=>?|:)|>|\\?["'][ \t]{{0,4}},)[ \t]{{0,8}}(?:\\?["'])?([^\s"'*<>{{}}$,;&\\]{{{MIN_ASSIGNED},}})"#
    )
}

struct Compiled {
    /// Each detector's pattern, in [`DETECTORS`] order.
    patterns: Vec<Regex>,
    /// Every detector's anchors, naming the detectors to run on a text (all of them when the
    /// anchors could not be compiled).
    prefilter: Option<Anchors>,
    /// The last word of a secret name, anchored at the end of a field name.
    field: Regex,
}

static COMPILED: LazyLock<Option<Compiled>> = LazyLock::new(|| {
    let assignment = assignment_pattern();
    let patterns = DETECTORS
        .iter()
        .map(|d| {
            let p = if d.name == ASSIGNMENT {
                &assignment
            } else {
                d.pattern
            };
            Regex::new(&ascii_boundaries(p))
        })
        .collect::<Result<_, _>>()
        .ok()?;
    let anchors: Vec<Anchor> = DETECTORS
        .iter()
        .enumerate()
        .flat_map(|(owner, d)| {
            let folded = d.name == ASSIGNMENT || d.pattern.starts_with("(?i)");
            d.anchors.iter().map(move |&literal| Anchor {
                literal,
                owner,
                folded,
            })
        })
        .collect();
    let field = Regex::new(&format!(r"(?i)(?:{SECRET_WORDS})$")).ok()?;
    Some(Compiled {
        patterns,
        prefilter: Anchors::new(&anchors),
        field,
    })
});

/// `pattern` with every `\b` an ASCII word boundary: a Unicode one would make the automaton
/// give up on the first non-ASCII byte and fall back to a much slower engine.
pub(super) fn ascii_boundaries(pattern: &str) -> String {
    pattern.replace(r"\b", r"(?-u:\b)")
}

/// Bits of entropy per character a random token has at least (hex is 4, base64 6; prose ~2.5).
const MIN_ENTROPY: f64 = 3.5;
/// A value shorter than this in a field whose name only hints at a secret is not one.
const MIN_FIELD_SECRET: usize = 16;

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
        .map(|d| d.name)
        .chain(std::iter::once(FIELD))
}

/// Words before a secret word that make the name a cursor or a count, not a secret
/// (`next_page_token`, `continuation_token`).
const NOT_SECRET_BEFORE: [&str; 7] = [
    "page",
    "next",
    "continuation",
    "cursor",
    "sync",
    "pagination",
    "resume",
];

/// Every secret in `text`, in order, not overlapping. `field` is the name of the JSON field
/// holding it (empty when none): a field named as a secret holds one when its value is
/// plausible, an authorization or cookie header always.
pub fn scan(text: &str, field: &str) -> Vec<Hit> {
    let Some(c) = COMPILED.as_ref() else {
        return Vec::new();
    };
    if text.len() < MIN_ASSIGNED {
        return Vec::new();
    }
    let run = c.prefilter.as_ref().map_or(u64::MAX, |p| p.which(text));
    scan_with(c, text, field, run)
}

/// [`scan`] running the detectors whose bit is set in `run`.
fn scan_with(c: &Compiled, text: &str, field: &str, run: u64) -> Vec<Hit> {
    let mut hits = Vec::new();
    for (i, (re, spec)) in c.patterns.iter().zip(DETECTORS).enumerate() {
        if run & (1 << i) != 0 {
            matches(re, spec.name, text, &mut hits);
        }
    }
    if hits.is_empty() {
        if let Some(range) = field_secret(c, text, field) {
            hits.push(Hit {
                detector: FIELD,
                range,
            });
        }
        return hits;
    }
    settle(&mut hits);
    hits
}

/// `hits` in order, overlapping ones (a bearer token that is also a JWT) made one secret: the
/// first wins.
pub(super) fn settle(hits: &mut Vec<Hit>) {
    hits.sort_by_key(|h| h.range.start);
    let mut end = 0;
    hits.retain(|h| {
        let keep = h.range.start >= end;
        if keep {
            end = h.range.end;
        }
        keep
    });
}

/// `name`'s matches in `text`, by their value group where the pattern has one.
fn matches(re: &Regex, name: &'static str, text: &str, hits: &mut Vec<Hit>) {
    if re.captures_len() == 1 {
        hits.extend(re.find_iter(text).map(|m| Hit {
            detector: name,
            range: m.range(),
        }));
        return;
    }
    for caps in re.captures_iter(text) {
        let Some(whole) = caps.get(0) else {
            continue;
        };
        let m = caps.get(1).unwrap_or(whole);
        // The value whole, however long (session tokens run past 1,000 characters).
        let range = m.range();
        if name == ASSIGNMENT
            && (!plausible_value(&text[range.clone()]) || not_a_name(&text[..whole.start()]))
        {
            continue;
        }
        hits.push(Hit {
            detector: name,
            range,
        });
    }
}

/// Whether what comes before an assignment's secret word makes it something else: a cursor,
/// or a path segment (`…:secret:prod/db` in an ARN).
fn not_a_name(before: &str) -> bool {
    before.ends_with([':', '/']) || cursor_name(before)
}

/// Whether the words of a name before its secret word (`next_page_` in `next_page_token`,
/// `nextPage` in `nextPageToken`) make it a cursor.
fn cursor_name(before: &str) -> bool {
    let name = before.trim_end_matches(['_', '-', '.']);
    let word: String = name
        .chars()
        .rev()
        .take(24)
        .take_while(char::is_ascii_alphabetic)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .map(|c| c.to_ascii_lowercase())
        .collect();
    NOT_SECRET_BEFORE.iter().any(|w| word.ends_with(w))
}

/// A field's value that is a secret by the field's name: any value of an authorization or
/// cookie header; a plausible value of a field named as a secret (`password`, `clientSecret`,
/// `x-api-key`). `key`, `secret_name`, `author_id` or `next_page_token` are not such names.
fn field_secret(c: &Compiled, text: &str, field: &str) -> Option<Range<usize>> {
    if field.is_empty() || field.len() > 128 {
        return None;
    }
    let value = text.trim();
    let start = text.len() - text.trim_start().len();
    let range = start..start + value.len();
    let lower = field.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie"
    ) {
        return (value.len() >= MIN_ASSIGNED && !placeholder(value)).then_some(range);
    }
    let m = c.field.find(field)?;
    // The secret word starts the name, follows a separator, or starts a camel-case word.
    let before = &field[..m.start()];
    let boundary = match before.chars().next_back() {
        None => true,
        Some(p) if !p.is_ascii_alphabetic() => true,
        Some(p) => {
            p.is_ascii_lowercase()
                && field[m.start()..].starts_with(|c: char| c.is_ascii_uppercase())
        }
    };
    if !boundary || cursor_name(before) {
        return None;
    }
    let strong = value.len() >= MIN_ASSIGNED && plausible_value(value);
    let random = value.len() >= MIN_FIELD_SECRET && entropy(value) >= MIN_ENTROPY;
    (!value.contains(char::is_whitespace)
        && !placeholder(value)
        && value.len() <= 4096
        && (strong || random))
        .then_some(range)
}

/// Words that say a value is a place for a secret (`your_key_here`, `changeme`).
const PLACEHOLDER_WORDS: [&str; 6] = [
    "your_",
    "your-",
    "_here",
    "changeme",
    "change_me",
    "placeholder",
];

/// `<your-token>`, `${API_KEY}`, `{{ secret }}`, `********`, `sk_test_your_key_here`: a place
/// for a secret, not one.
fn placeholder(v: &str) -> bool {
    if v.contains(['<', '>', '$', '{', '}']) || v.contains("***") || v.contains("...") {
        return true;
    }
    let lower = v.to_ascii_lowercase();
    PLACEHOLDER_WORDS.iter().any(|w| lower.contains(w))
}

/// An assigned value that may be a password: not a number (`max_tokens: 100000000`), not one
/// character repeated, not a placeholder, not code reading it from elsewhere
/// (`os.environ[`, `getpass(`).
fn plausible_value(v: &str) -> bool {
    !v.bytes().all(|b| b.is_ascii_digit())
        && !v.ends_with(['[', '('])
        && !placeholder(v)
        && entropy(v) >= MIN_ASSIGNED_ENTROPY
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
            (
                "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                ASSIGNMENT,
            ),
            (
                r#""SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY""#,
                ASSIGNMENT,
            ),
            ("STRIPE_SECRET_KEY=q8Zr2LkP0vXw7NcY", ASSIGNMENT),
            ("apiKey: q8Zr2LkP0vXw7NcY", ASSIGNMENT),
            ("db.Password = q8Zr2LkP0vXw7NcY", ASSIGNMENT),
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
    fn a_field_is_secret_by_the_last_word_of_its_name() {
        let value = "q8Zr2LkP0vXw7NcY4tBm";
        for field in [
            "password",
            "clientSecret",
            "x-api-key",
            "AWS_SESSION_TOKEN",
            "db.password",
            "private_key",
            "Authorization",
        ] {
            assert_eq!(scan(value, field).len(), 1, "{field}");
        }
        for field in [
            "author_id",
            "tokenizer",
            "secret_name",
            "credentials_provider",
            "next_page_token",
            "nextPageToken",
            "key",
            "monkey",
            "passwordPolicy",
        ] {
            assert!(scan(value, field).is_empty(), "{field}");
        }
        // A header is a secret whatever it looks like; a placeholder is not.
        assert_eq!(scan("Basic dXNlcjpwYXNz", "authorization").len(), 1);
        assert!(scan("Bearer <token>", "Authorization").is_empty());
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
    fn a_private_key_is_masked_header_to_footer() {
        let key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn\n\
                   /ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n-----END RSA PRIVATE KEY-----";
        let text = format!("key:\n{key}\nafter");
        assert_eq!(
            redact(&text, &scan(&text, "")),
            "key:\n[REDACTED:private_key]\nafter"
        );
        // Cut short: everything from the header on is the key.
        let cut = "id_rsa:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA";
        assert_eq!(
            redact(cut, &scan(cut, "")),
            "id_rsa:\n[REDACTED:private_key]"
        );
        // Two keys are two findings, the text between them kept.
        let two = format!("{key}\nand\n{key}");
        let hits = scan(&two, "");
        assert_eq!(hits.len(), 2, "{hits:?}");
        assert_eq!(
            redact(&two, &hits),
            "[REDACTED:private_key]\nand\n[REDACTED:private_key]"
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
    fn a_value_of_any_length_is_found_whole() {
        // An AWS session token is 700 to 1,100 characters; a multi-byte character inside.
        let value = format!("{}é{}", "q8Zr2LkP".repeat(100), "x".repeat(40));
        let text = format!("aws_session_token={value} rest");
        let hits = scan(&text, "");
        assert_eq!(hits.len(), 1, "{hits:?}");
        let start = "aws_session_token=".len();
        assert_eq!(hits[0].range, start..start + value.len());
        assert_eq!(
            redact(&text, &hits),
            "aws_session_token=[REDACTED:secret_assignment] rest"
        );
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

/// The corpus of fake secrets and ordinary data (`tests/data/secrets-corpus.toml`), written from
/// public scanners' rule sets rather than from these detectors.
#[cfg(test)]
mod corpus {
    use serde::Deserialize;

    use super::{COMPILED, redact, scan, scan_with};

    #[derive(Deserialize)]
    struct Corpus {
        secret: Vec<Secret>,
        clean: Vec<Clean>,
    }

    #[derive(Deserialize)]
    struct Secret {
        shape: String,
        text: String,
        secrets: Vec<String>,
    }

    #[derive(Deserialize)]
    struct Clean {
        shape: String,
        text: String,
    }

    /// Share of secret entries masked whole that the detectors must reach.
    const MIN_RECALL: f64 = 0.97;
    /// Share of ordinary entries that may be flagged.
    const MAX_FALSE_POSITIVES: f64 = 0.02;

    /// `text` masked as the guardrails mask it: field by field when it is a JSON object (so
    /// field names count), as one text otherwise.
    fn masked(text: &str) -> (String, Vec<&'static str>) {
        if let Ok(serde_json::Value::Object(mut args)) = serde_json::from_str(text) {
            let found = crate::guard::scan_arguments(
                &mut args,
                crate::guard::SecretAction::Redact,
                crate::guard::Rules::standard(),
            );
            let detectors = found.iter().map(|f| f.detector).collect();
            return (serde_json::Value::Object(args).to_string(), detectors);
        }
        let hits = scan(text, "");
        (
            redact(text, &hits),
            hits.iter().map(|h| h.detector).collect(),
        )
    }

    #[test]
    fn the_prefilter_never_skips_a_detector_that_would_match() {
        let corpus: Corpus = toml::from_str(include_str!("../../tests/data/secrets-corpus.toml"))
            .expect("the corpus parses");
        let c = COMPILED.as_ref().expect("the detectors compile");
        let texts = corpus.secret.iter().map(|s| &s.text);
        for text in texts.chain(corpus.clean.iter().map(|c| &c.text)) {
            // Each variant in other casings too: the case-insensitive detectors must still run.
            for t in [
                text.clone(),
                text.to_ascii_uppercase(),
                text.to_ascii_lowercase(),
            ] {
                assert_eq!(scan(&t, ""), scan_with(c, &t, "", u64::MAX), "{t}");
            }
        }
    }

    #[test]
    fn recall_and_false_positives_on_the_corpus() {
        let corpus: Corpus = toml::from_str(include_str!("../../tests/data/secrets-corpus.toml"))
            .expect("the corpus parses");
        let mut missed = Vec::new();
        for s in &corpus.secret {
            let (masked, _) = masked(&s.text);
            if let Some(left) = s.secrets.iter().find(|v| masked.contains(v.as_str())) {
                missed.push(format!("{}: {left:.24}…", s.shape));
            }
        }
        let flagged: Vec<String> = corpus
            .clean
            .iter()
            .filter_map(|c| {
                let (_, found) = masked(&c.text);
                (!found.is_empty()).then(|| format!("{} ({found:?})", c.shape))
            })
            .collect();
        let recall = 1.0 - missed.len() as f64 / corpus.secret.len() as f64;
        let fp = flagged.len() as f64 / corpus.clean.len() as f64;
        println!(
            "recall {:.1} % ({} of {} masked whole), false positives {:.1} % ({} of {})",
            recall * 100.0,
            corpus.secret.len() - missed.len(),
            corpus.secret.len(),
            fp * 100.0,
            flagged.len(),
            corpus.clean.len()
        );
        println!("missed: {missed:#?}\nflagged: {flagged:#?}");
        assert!(recall >= MIN_RECALL, "recall {recall:.3}: {missed:#?}");
        assert!(
            fp <= MAX_FALSE_POSITIVES,
            "false positives {fp:.3}: {flagged:#?}"
        );
    }
}
