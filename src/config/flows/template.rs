//! Flow templates: `{{inputs.x}}` and `{{node.output.path}}` inside node params and outputs.
//! A string that is one template keeps the referenced JSON value's type; a template inside a
//! longer string interpolates the value as text (strings as they are, anything else as JSON).

use crate::config::Invalid;
use serde_json::{Map, Value};

/// Where a reference points: the run's inputs, or a node's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Root {
    Inputs,
    Node(String),
}

/// One `{{…}}` reference, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ref {
    pub root: Root,
    /// Segments after `inputs` or after `<node>.output`; a segment of digits indexes arrays.
    pub path: Vec<String>,
    /// As written, for errors.
    pub text: String,
}

/// A param or output value with its templates parsed.
#[derive(Debug, Clone)]
pub enum Template {
    Literal(Value),
    /// The whole value is one reference: the referenced value, type kept.
    Whole(Ref),
    /// Text with references interpolated.
    Text(Vec<Piece>),
    Array(Vec<Template>),
    Object(Vec<(String, Template)>),
}

#[derive(Debug, Clone)]
pub enum Piece {
    Text(String),
    Ref(Ref),
}

/// What a reference could not be resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub reference: String,
}

impl Template {
    /// Parses templates in `value`; the error names the malformed reference.
    pub fn parse(value: &Value) -> Result<Self, Invalid> {
        Ok(match value {
            Value::String(s) => parse_string(s)?,
            Value::Array(items) => {
                Template::Array(items.iter().map(Self::parse).collect::<Result<_, _>>()?)
            }
            Value::Object(map) => Template::Object(
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), Self::parse(v)?)))
                    .collect::<Result<_, Invalid>>()?,
            ),
            other => Template::Literal(other.clone()),
        })
    }

    /// Every reference in this template.
    pub fn refs(&self) -> Vec<&Ref> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Ref>) {
        match self {
            Template::Literal(_) => {}
            Template::Whole(r) => out.push(r),
            Template::Text(pieces) => out.extend(pieces.iter().filter_map(|p| match p {
                Piece::Ref(r) => Some(r),
                Piece::Text(_) => None,
            })),
            Template::Array(items) => items.iter().for_each(|t| t.collect(out)),
            Template::Object(fields) => fields.iter().for_each(|(_, t)| t.collect(out)),
        }
    }

    /// The literal value, when the template has no references (for static type checks).
    pub fn literal(&self) -> Option<&Value> {
        match self {
            Template::Literal(v) => Some(v),
            _ => None,
        }
    }

    /// Renders against `scope` (`{"inputs": …, "<node>": {"output": …}}`).
    pub fn render(&self, scope: &Value) -> Result<Value, Missing> {
        Ok(match self {
            Template::Literal(v) => v.clone(),
            Template::Whole(r) => lookup(scope, r)?.clone(),
            Template::Text(pieces) => {
                let mut s = String::new();
                for p in pieces {
                    match p {
                        Piece::Text(t) => s.push_str(t),
                        Piece::Ref(r) => match lookup(scope, r)? {
                            Value::String(v) => s.push_str(v),
                            v => s.push_str(&v.to_string()),
                        },
                    }
                }
                Value::String(s)
            }
            Template::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|t| t.render(scope))
                    .collect::<Result<_, _>>()?,
            ),
            Template::Object(fields) => {
                let mut map = Map::new();
                for (k, t) in fields {
                    map.insert(k.clone(), t.render(scope)?);
                }
                Value::Object(map)
            }
        })
    }
}

fn lookup<'a>(scope: &'a Value, r: &Ref) -> Result<&'a Value, Missing> {
    let missing = || Missing {
        reference: r.text.clone(),
    };
    let mut at = match &r.root {
        Root::Inputs => scope.get("inputs"),
        Root::Node(n) => scope.get(n).and_then(|n| n.get("output")),
    }
    .ok_or_else(missing)?;
    for seg in &r.path {
        at = match at {
            Value::Object(m) => m.get(seg),
            Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        }
        .ok_or_else(missing)?;
    }
    Ok(at)
}

fn parse_string(s: &str) -> Result<Template, Invalid> {
    let mut pieces = Vec::new();
    let mut rest = s;
    while let Some(open) = rest.find("{{") {
        let Some(close) = rest[open..].find("}}") else {
            return Err(Invalid(format!(
                "`{{{{` without `}}}}` in \"{}\"",
                crate::names::shown(s)
            )));
        };
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_owned()));
        }
        pieces.push(Piece::Ref(parse_ref(rest[open + 2..open + close].trim())?));
        rest = &rest[open + close + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_owned()));
    }
    Ok(match pieces.as_slice() {
        [] => Template::Literal(Value::String(String::new())),
        [Piece::Text(t)] => Template::Literal(Value::String(t.clone())),
        [Piece::Ref(r)] => Template::Whole(r.clone()),
        _ => Template::Text(pieces),
    })
}

fn parse_ref(text: &str) -> Result<Ref, Invalid> {
    let segs: Vec<&str> = text.split('.').collect();
    if segs.iter().any(|s| s.is_empty()) {
        return Err(Invalid(format!(
            "`{{{{{}}}}}` is not a reference (inputs.<path> or <node>.output.<path>)",
            crate::names::shown(text)
        )));
    }
    let (root, path) = match segs.as_slice() {
        ["inputs", path @ ..] => (Root::Inputs, path),
        [node, "output", path @ ..] => (Root::Node((*node).to_owned()), path),
        _ => {
            return Err(Invalid(format!(
                "`{{{{{}}}}}` is not a reference (inputs.<path> or <node>.output.<path>)",
                crate::names::shown(text)
            )));
        }
    };
    Ok(Ref {
        root,
        path: path.iter().map(|s| (*s).to_owned()).collect(),
        text: text.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_values_keep_their_type_and_text_interpolates() {
        let scope =
            json!({"inputs": {"n": 3, "s": "x"}, "a": {"output": {"items": [1, {"k": true}]}}});
        let t = Template::parse(&json!({
            "n": "{{inputs.n}}", "deep": "{{ a.output.items.1.k }}",
            "text": "n={{inputs.n}} s={{inputs.s}}", "list": ["{{a.output.items}}"], "lit": 5
        }))
        .unwrap();
        assert_eq!(
            t.render(&scope).unwrap(),
            json!({"n": 3, "deep": true, "text": "n=3 s=x", "list": [[1, {"k": true}]], "lit": 5})
        );
        let missing = Template::parse(&json!("{{a.output.items.7}}")).unwrap();
        assert_eq!(
            missing.render(&scope).unwrap_err().reference,
            "a.output.items.7"
        );
    }

    #[test]
    fn malformed_references_are_refused() {
        for bad in ["{{a.items}}", "{{inputs..x}}", "{{open", "{{}}"] {
            assert!(Template::parse(&json!(bad)).is_err(), "{bad}");
        }
    }
}
