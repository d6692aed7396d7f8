//! Argument checks: a tool's `inputSchema`, compiled once per definition (when the upstream's
//! lists are stored), checked before a call is forwarded. The draft is the schema's `$schema`
//! (2020-12 when it names none); formats are asserted; nothing is fetched from the network or
//! disk (a remote `$ref` makes the schema not compile, and the tool is served unchecked).

use std::fmt;

use jsonschema::{Draft, Validator, error::ValidationErrorKind};
use serde_json::Value;

/// At most this many problems are reported per call (a huge bad payload stays cheap).
const MAX_PROBLEMS: usize = 32;
/// Messages longer than this are cut (they describe, they never echo the arguments).
const MAX_MESSAGE_CHARS: usize = 300;

/// A compiled input schema.
pub struct ArgCheck {
    validator: Validator,
}

impl fmt::Debug for ArgCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ArgCheck")
    }
}

/// One way the arguments miss the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// JSON pointer to the offending value (for a missing property: where it should be).
    pub pointer: String,
    /// The schema keyword that failed, snake_case: `required`, `type`, `enum`, `format`, …
    pub code: String,
    pub message: String,
    /// For `required`: the missing property.
    pub missing: Option<String>,
}

/// Why a JSON Schema does not compile (the validator's words, cut short).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadSchema(pub String);

impl ArgCheck {
    /// Compiles `schema`.
    pub fn compile(schema: &Value) -> Result<Self, BadSchema> {
        let mut options = jsonschema::options().should_validate_formats(true);
        if schema.get("$schema").is_none() {
            options = options.with_draft(Draft::Draft202012);
        }
        options
            .build(schema)
            .map(|validator| Self { validator })
            .map_err(|e| BadSchema(cut(e.to_string())))
    }

    /// The problems of `args` (empty when they match).
    pub fn check(&self, args: &Value) -> Vec<Problem> {
        if self.validator.is_valid(args) {
            return Vec::new();
        }
        self.validator
            .iter_errors(args)
            .take(MAX_PROBLEMS)
            .map(|e| {
                let at = e.instance_path().as_str().to_owned();
                let (pointer, missing) = match e.kind() {
                    ValidationErrorKind::Required { property } => {
                        let name = property.as_str().unwrap_or_default().to_owned();
                        let escaped = name.replace('~', "~0").replace('/', "~1");
                        (format!("{at}/{escaped}"), Some(name))
                    }
                    _ => (at, None),
                };
                Problem {
                    pointer,
                    code: snake_case(e.kind().keyword()),
                    message: cut(e.masked().to_string()),
                    missing,
                }
            })
            .collect()
    }
}

fn snake_case(keyword: &str) -> String {
    let mut out = String::with_capacity(keyword.len() + 4);
    for c in keyword.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    out
}

fn cut(mut s: String) -> String {
    if let Some((i, _)) = s.char_indices().nth(MAX_MESSAGE_CHARS) {
        s.truncate(i);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn problems_name_the_field_and_the_keyword() {
        let check = ArgCheck::compile(&json!({
            "type": "object",
            "required": ["title"],
            "properties": {
                "title": {"type": "string"},
                "priority": {"enum": ["low", "high"]},
                "email": {"type": "string", "format": "email"},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1}
            }
        }))
        .unwrap();
        assert!(check.check(&json!({"title": "x"})).is_empty());
        let mut got: Vec<(String, String)> = check
            .check(&json!({"priority": "urgent", "email": "nope", "tags": [1]}))
            .into_iter()
            .map(|p| (p.pointer, p.code))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("/email".to_owned(), "format".to_owned()),
                ("/priority".to_owned(), "enum".to_owned()),
                ("/tags/0".to_owned(), "type".to_owned()),
                ("/title".to_owned(), "required".to_owned()),
            ]
        );
    }

    #[test]
    fn the_declared_draft_is_honoured_and_bad_schemas_do_not_compile() {
        // Draft 7: `exclusiveMinimum` is a number there as well, but `items` as an array is a
        // tuple (2020-12 calls that `prefixItems`).
        let d7 = ArgCheck::compile(&json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "array",
            "items": [{"type": "string"}, {"type": "integer"}]
        }))
        .unwrap();
        assert!(d7.check(&json!(["a", 1])).is_empty());
        assert_eq!(d7.check(&json!(["a", "b"]))[0].pointer, "/1");
        assert!(
            ArgCheck::compile(&json!({"type": "object", "properties": {"x": {"pattern": "("}}}))
                .is_err()
        );
        assert!(ArgCheck::compile(&json!({"type": 12})).is_err());
        assert_eq!(snake_case("minItems"), "min_items");
    }
}
