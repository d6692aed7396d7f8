//! The stateless era's standard headers (SEP-2243) checked against the body: `Mcp-Method`
//! must name the body's method, `Mcp-Name` its name (a tool's, a prompt's, a URI, a task id),
//! and a `tools/call` carries an `Mcp-Param-<Header>` for every argument its input schema marks
//! with `x-mcp-header` — each once, as text, Base64-wrapped values (`=?base64?…?=`) decoded.
//! The rules and reasons are rmcp's transport's, so the refusals are the ones it gave.

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::server::wire_error::WireError;

const BASE64_PREFIX: &str = "=?base64?";
const BASE64_SUFFIX: &str = "?=";

/// Checks the headers of a request (or notification) against its JSON form; `tool_schema` is
/// the called tool's input schema. A refusal is -32020 with rmcp's reason.
pub(super) fn check(
    headers: &http::HeaderMap,
    request: &Value,
    tool_schema: Option<&Map<String, Value>>,
) -> Result<(), WireError> {
    reasons(headers, request, tool_schema).map_err(|why| WireError::HeaderMismatch {
        why: why.to_string(),
    })
}

/// Why the headers disagree with the body (rmcp's wording).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Refusal {
    #[error("missing required Mcp-Method header")]
    NoMethod,
    #[error("Mcp-Method header `{sent}` does not match body method `{method}`")]
    OtherMethod { sent: String, method: String },
    #[error("missing required Mcp-Name header for `{0}`")]
    NoName(String),
    #[error("{0} header is not valid Base64")]
    NotBase64(String),
    #[error("{header} header `{sent}` does not match body value `{body}`")]
    Mismatch {
        header: String,
        sent: String,
        body: String,
    },
    #[error("unexpected {header} header for absent or null `{prop}`")]
    Unexpected { header: String, prop: String },
    #[error("missing {header} header for `{prop}`")]
    Missing { header: String, prop: String },
    #[error("duplicate {0} header")]
    Duplicate(String),
    #[error("{0} header contains invalid characters")]
    NotText(String),
}

fn reasons(
    headers: &http::HeaderMap,
    request: &Value,
    tool_schema: Option<&Map<String, Value>>,
) -> Result<(), Refusal> {
    let Some(method) = request.get("method").and_then(Value::as_str) else {
        return Ok(());
    };
    let params = request.get("params");
    match header_str(headers, "Mcp-Method")? {
        None => return Err(Refusal::NoMethod),
        Some(value) if value != method => {
            return Err(Refusal::OtherMethod {
                sent: value.to_owned(),
                method: method.to_owned(),
            });
        }
        Some(_) => {}
    }
    if let Some(expected) = name_of(method, params) {
        let Some(raw) = header_str(headers, "Mcp-Name")? else {
            return Err(Refusal::NoName(method.to_owned()));
        };
        let decoded = decode(raw).ok_or_else(|| Refusal::NotBase64("Mcp-Name".into()))?;
        if decoded != expected {
            return Err(Refusal::Mismatch {
                header: "Mcp-Name".into(),
                sent: decoded,
                body: expected,
            });
        }
    }
    let (Some(schema), "tools/call") = (tool_schema, method) else {
        return Ok(());
    };
    let arguments = params.and_then(|p| p.get("arguments"));
    for (path, header) in annotated(schema) {
        let prop = path.join(".");
        let full = format!("Mcp-Param-{header}");
        let sent = header_str(headers, &full)?;
        let body = arguments
            .and_then(|a| path.iter().try_fold(a, |v, k| v.get(k)))
            .filter(|v| !v.is_null())
            .and_then(primitive);
        match (sent, body) {
            (None, None) => {}
            (Some(_), None) => return Err(Refusal::Unexpected { header: full, prop }),
            (None, Some(_)) => return Err(Refusal::Missing { header: full, prop }),
            (Some(raw), Some(expected)) => {
                let decoded = decode(raw).ok_or_else(|| Refusal::NotBase64(full.clone()))?;
                if decoded != expected {
                    return Err(Refusal::Mismatch {
                        header: full,
                        sent: decoded,
                        body: expected,
                    });
                }
            }
        }
    }
    Ok(())
}

/// What `Mcp-Name` must say for `method`, if it names anything.
fn name_of(method: &str, params: Option<&Value>) -> Option<String> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    params?.get(key)?.as_str().map(str::to_owned)
}

/// A JSON primitive as the header carries it; anything else has no header form.
fn primitive(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Every non-empty `x-mcp-header` along `properties` chains from the root: its property path
/// and header name.
fn annotated(schema: &Map<String, Value>) -> Vec<(Vec<&str>, &str)> {
    fn walk<'a>(
        properties: Option<&'a Value>,
        path: &mut Vec<&'a str>,
        out: &mut Vec<(Vec<&'a str>, &'a str)>,
    ) {
        let Some(Value::Object(properties)) = properties else {
            return;
        };
        for (name, schema) in properties {
            path.push(name);
            if let Some(Value::String(h)) = schema.get("x-mcp-header")
                && !h.is_empty()
            {
                out.push((path.clone(), h.as_str()));
            }
            walk(schema.get("properties"), path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema.get("properties"), &mut Vec::new(), &mut out);
    out
}

/// A header value as sent, or what a `=?base64?…?=` wrapping holds (`None`: not Base64 of
/// UTF-8).
pub(super) fn decode(value: &str) -> Option<String> {
    match value
        .strip_prefix(BASE64_PREFIX)
        .and_then(|v| v.strip_suffix(BASE64_SUFFIX))
    {
        Some(inner) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(inner)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(value.to_owned()),
    }
}

/// The one value of `name`, as text: a header sent twice, or not as text, is refused (an
/// intermediary could route on the other one).
fn header_str<'a>(headers: &'a http::HeaderMap, name: &str) -> Result<Option<&'a str>, Refusal> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Refusal::Duplicate(name.to_owned()));
    }
    value
        .to_str()
        .map(Some)
        .map_err(|_| Refusal::NotText(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn method_and_name_must_match_the_body() {
        let call = json!({"method": "tools/call", "params": {"name": "a__b", "arguments": {}}});
        assert!(
            reasons(
                &headers(&[("mcp-method", "tools/call"), ("mcp-name", "a__b")]),
                &call,
                None
            )
            .is_ok()
        );
        for (pairs, reason) in [
            (vec![], "missing required Mcp-Method"),
            (
                vec![("mcp-method", "tools/list")],
                "does not match body method",
            ),
            (
                vec![("mcp-method", "tools/call")],
                "missing required Mcp-Name",
            ),
            (
                vec![("mcp-method", "tools/call"), ("mcp-name", "x")],
                "does not match body value `a__b`",
            ),
            (
                vec![("mcp-method", "tools/call"), ("mcp-method", "tools/call")],
                "duplicate Mcp-Method",
            ),
            (
                vec![("mcp-method", "tools/call"), ("mcp-name", "=?base64?***?=")],
                "not valid Base64",
            ),
        ] {
            let e = reasons(&headers(&pairs), &call, None).expect_err("refused");
            assert!(e.to_string().contains(reason), "{pairs:?}: {e}");
        }
        // Base64-wrapped names are decoded.
        let wrapped = format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode("a__b")
        );
        assert!(
            reasons(
                &headers(&[("mcp-method", "tools/call"), ("mcp-name", &wrapped)]),
                &call,
                None
            )
            .is_ok()
        );
    }

    #[test]
    fn annotated_arguments_need_their_param_headers() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "opts": {"type": "object", "properties": {"n": {"type": "integer", "x-mcp-header": "N"}}}
        }});
        let schema = schema.as_object().unwrap();
        let call = |args: Value| json!({"method": "tools/call", "params": {"name": "t", "arguments": args}});
        let base = [("mcp-method", "tools/call"), ("mcp-name", "t")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut h = base.to_vec();
            h.extend_from_slice(extra);
            headers(&h)
        };
        let args = json!({"region": "eu", "opts": {"n": 3}});
        assert!(
            reasons(
                &with(&[("mcp-param-region", "eu"), ("mcp-param-n", "3")]),
                &call(args.clone()),
                Some(schema)
            )
            .is_ok()
        );
        let e = reasons(
            &with(&[("mcp-param-region", "eu")]),
            &call(args.clone()),
            Some(schema),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("missing Mcp-Param-N header for `opts.n`"),
            "{e}"
        );
        let e = reasons(
            &with(&[("mcp-param-region", "us"), ("mcp-param-n", "3")]),
            &call(args),
            Some(schema),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("does not match body value `eu`"),
            "{e}"
        );
        let e = reasons(
            &with(&[("mcp-param-region", "eu")]),
            &call(json!({})),
            Some(schema),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("unexpected Mcp-Param-Region header"),
            "{e}"
        );
        assert!(reasons(&with(&[]), &call(json!({"region": null})), Some(schema)).is_ok());
    }
}
