//! Every problem serde finds in a config file, not only the first: each problem's line is set
//! aside and the rest read again, then validated, so one `fedgate check` reports them all.

use super::{Diagnostic, RawConfig, line_of, validate};

/// Most problems reported from one parse failure.
const MAX_PARSE_PROBLEMS: usize = 50;

/// Every problem of a file that is valid TOML but not a valid config, not only the first serde
/// stops at: the `key = value` line of each one is blanked (line numbers stay) and the text
/// parsed again, until it parses or a problem has no line of its own. Once the rest parses, it
/// is validated too, so unknown tiers, roles or bad values elsewhere come in the same run. A
/// TOML syntax error is reported alone: what follows it cannot be read reliably.
pub(super) fn all(
    file: &str,
    text: &str,
    first: toml::de::Error,
    reading: bool,
) -> Vec<Diagnostic> {
    let diagnostic = |text: &str, e: &toml::de::Error| {
        let key = e.span().and_then(|s| key_at(text, s.start));
        Diagnostic {
            file: file.to_owned(),
            line: e.span().map(|s| line_of(text, s.start)).unwrap_or(0),
            message: plain(&with_suggestion(e.message().trim()), key.as_deref()),
        }
    };
    let mut out = vec![diagnostic(text, &first)];
    if text.parse::<toml::Table>().is_err() {
        return out;
    }
    let mut text = text.to_owned();
    let mut blanked: Vec<String> = Vec::new();
    let mut err = first;
    while out.len() < MAX_PARSE_PROBLEMS {
        let Some(start) = err.span().map(|s| s.start) else {
            break;
        };
        let Some(key) = key_at(&text, start) else {
            break;
        };
        blank_line(&mut text, start);
        blanked.push(key);
        if text.parse::<toml::Table>().is_err() {
            break;
        }
        err = match toml::from_str::<RawConfig>(&text) {
            Ok(raw) => {
                if let Err(more) = validate::validate(file, &text, raw, reading) {
                    out.extend(more);
                }
                break;
            }
            Err(e) => e,
        };
        // A field blanked above now reads as missing: the same problem again.
        let message = err.message();
        if message.starts_with("missing field")
            && blanked.iter().any(|k| message.contains(&format!("`{k}`")))
        {
            break;
        }
        out.push(diagnostic(&text, &err));
    }
    out
}

/// Replaces the line holding byte `offset` with spaces (its newline stays).
fn blank_line(text: &mut String, offset: usize) {
    let start = text
        .get(..offset)
        .and_then(|t| t.rfind('\n'))
        .map_or(0, |i| i + 1);
    let end = text
        .get(start..)
        .and_then(|t| t.find('\n'))
        .map_or(text.len(), |i| start + i);
    if let Some(line) = text.get(start..end) {
        let spaces = " ".repeat(line.len());
        text.replace_range(start..end, &spaces);
    }
}

/// serde's "unknown field `x`, expected one of `a`, `b`" gains "did you mean `a`?" when one of
/// the fields is a likely misspelling (at most a third of its letters differ).
fn with_suggestion(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_owned();
    };
    let Some((field, expected)) = rest.split_once('`') else {
        return message.to_owned();
    };
    let hint = crate::names::did_you_mean(field, expected.split('`').skip(1).step_by(2));
    format!("{message}{hint}")
}

/// The key of the `key = value` line holding byte `offset` (where a type error points).
fn key_at(text: &str, offset: usize) -> Option<String> {
    let start = text.get(..offset)?.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(start..)?.lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty() && !key.contains('[')).then(|| key.to_owned())
}

/// serde's type errors in words a person reads: `invalid type: string "100", expected u64` on
/// `startup_timeout_ms` becomes `startup_timeout_ms must be a whole number of milliseconds, got
/// the string "100"`.
fn plain(message: &str, key: Option<&str>) -> String {
    let Some(rest) = message.strip_prefix("invalid type: ") else {
        return message.to_owned();
    };
    let Some((got, expected)) = rest.split_once(", expected ") else {
        return message.to_owned();
    };
    let millis = key.is_some_and(|k| k.ends_with("_ms"));
    let wanted = match expected.trim() {
        "usize" | "u64" | "u32" | "u16" | "u8" | "i64" | "i32" if millis => {
            "a whole number of milliseconds"
        }
        "usize" | "u64" | "u32" | "u16" | "u8" | "i64" | "i32" => "a whole number",
        "f64" | "f32" => "a number",
        "a boolean" => "true or false",
        "a string" => "a string in quotes",
        "a sequence" => "a list like [\"a\", \"b\"]",
        e if e.starts_with("struct") || e.starts_with("a map") => "a table",
        other => other,
    };
    let got = got
        .replacen("string ", "the string ", 1)
        .replacen("integer ", "the number ", 1)
        .replacen("floating point ", "the number ", 1)
        .replacen("boolean ", "", 1);
    match key {
        Some(k) => format!("{k} must be {wanted}, got {got}"),
        None => format!("expected {wanted}, got {got}"),
    }
}
