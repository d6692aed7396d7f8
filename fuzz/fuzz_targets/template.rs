//! Flow templates: any JSON value parses to a template or an error, and rendering it against
//! any scope gives a value or names the missing reference, never a panic.
#![no_main]

use fedgate::config::flows::template::Template;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // `[template, scope]`, or a bare template rendered against a fixed scope.
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let (template, scope) = match value {
        serde_json::Value::Array(mut pair) if pair.len() == 2 => {
            let scope = pair.pop().unwrap_or_default();
            (pair.pop().unwrap_or_default(), scope)
        }
        other => (
            other,
            serde_json::json!({"inputs": {"q": "x", "n": 3}, "a": {"output": {"items": [1, {"b": null}]}}}),
        ),
    };
    let Ok(t) = Template::parse(&template) else {
        return;
    };
    let _ = t.refs();
    if let Err(missing) = t.render(&scope) {
        assert!(!missing.reference.is_empty());
    }
});
