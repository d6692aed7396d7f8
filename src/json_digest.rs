//! Digests of JSON values that do not depend on key order: objects keep their keys in the
//! order they came (input schemas, arguments), but two values that differ only in key order
//! are the same call, definition or arguments. The canonical form is compact JSON with object
//! keys sorted at every level — byte for byte what a sorted map serialises to.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 (hex) of `v`'s canonical form.
pub fn sha256_hex(v: &Value) -> String {
    hex::encode(sha256(v))
}

/// SHA-256 of `v`'s canonical form.
pub fn sha256(v: &Value) -> [u8; 32] {
    let mut out = String::new();
    canonical(v, &mut out);
    Sha256::digest(out.as_bytes()).into()
}

fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn key_order_does_not_change_the_digest_and_the_form_is_sorted_compact_json() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": {"y": [true, null], "x": "é\""}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"a": {"x": "é\"", "y": [true, null]}, "b": 1}"#).unwrap();
        assert_eq!(sha256_hex(&a), sha256_hex(&b));
        let mut out = String::new();
        canonical(&a, &mut out);
        assert_eq!(out, r#"{"a":{"x":"é\"","y":[true,null]},"b":1}"#);
        assert_ne!(sha256_hex(&a), sha256_hex(&json!({"b": 2})));
    }
}
