//! The `ask` form of an `invalid` plan, derived from the tool's input schema: one field per
//! argument that is missing or wrong, typed so an agent (or its human) can fill it in.

use serde_json::Value;

use super::{Ask, AskField, FieldType};

/// A form asking for the arguments at `pointers` (JSON pointers into the arguments) of a tool
/// with input schema `schema`; `required` says which of them the schema requires.
pub fn ask_for(tool: &str, schema: &Value, fields: &[(String, bool)]) -> Ask {
    let mut out: Vec<AskField> = Vec::new();
    for (pointer, required) in fields {
        let name = field_name(pointer);
        if name.is_empty() || out.iter().any(|f| f.name == name) {
            continue;
        }
        let sub = at_pointer(schema, pointer);
        out.push(field(name, sub, *required));
    }
    Ask {
        prompt: match out.as_slice() {
            [] => format!("Provide arguments that match the input schema of `{tool}`."),
            [one] => format!("Provide a valid `{}` for `{tool}`.", one.name),
            many => format!(
                "Provide valid values for `{tool}`: {}.",
                many.iter()
                    .map(|f| format!("`{}`", f.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        fields: out,
    }
}

/// `/owner/email` → `owner.email`; `~1` and `~0` unescaped.
fn field_name(pointer: &str) -> String {
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join(".")
}

/// The sub-schema that describes the value at `pointer` (through `properties` and `items`).
fn at_pointer<'a>(schema: &'a Value, pointer: &str) -> Option<&'a Value> {
    let mut cur = schema;
    for seg in pointer.split('/').skip(1) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        cur = match cur.get("properties").and_then(|p| p.get(&seg)) {
            Some(s) => s,
            None => match cur.get("items") {
                Some(items) if seg.parse::<usize>().is_ok() => items,
                _ => return None,
            },
        };
    }
    Some(cur)
}

fn field(name: String, schema: Option<&Value>, required: bool) -> AskField {
    let label = schema
        .and_then(|s| s.get("title").or_else(|| s.get("description")))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let options = schema
        .and_then(|s| s.get("enum"))
        .and_then(Value::as_array)
        .cloned();
    let kind = if options.is_some() {
        FieldType::Select
    } else {
        match schema.and_then(primary_type) {
            Some("number" | "integer") => FieldType::Number,
            Some("boolean") => FieldType::Boolean,
            Some("array" | "object") => FieldType::Json,
            _ => FieldType::String,
        }
    };
    // An agent fixes an array or object only when it sees what shape it must have.
    let schema = (kind == FieldType::Json).then(|| schema.cloned()).flatten();
    AskField {
        name,
        kind,
        required,
        options,
        label,
        schema,
    }
}

/// `"type": "x"`, or the first non-null of `"type": [..]`.
fn primary_type(schema: &Value) -> Option<&str> {
    match schema.get("type")? {
        Value::String(s) => Some(s),
        Value::Array(a) => a.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_follow_the_schema_through_objects_and_arrays() {
        let schema = json!({
            "type": "object",
            "properties": {
                "priority": {"enum": ["low", "high"], "title": "Priority"},
                "count": {"type": "integer", "description": "How many"},
                "owner": {"type": "object", "properties": {"email": {"type": "string"}}},
                "labels": {"type": "array", "items": {"type": ["null", "boolean"]}},
                "tags": {"type": "array", "items": {"type": "string"}}
            }
        });
        let ask = ask_for(
            "t",
            &schema,
            &[
                ("/priority".into(), true),
                ("/count".into(), false),
                ("/owner/email".into(), true),
                ("/labels/2".into(), false),
                ("/priority".into(), true),
                ("/tags".into(), true),
            ],
        );
        let got: Vec<(&str, FieldType, Option<&str>)> = ask
            .fields
            .iter()
            .map(|f| (f.name.as_str(), f.kind, f.label.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("priority", FieldType::Select, Some("Priority")),
                ("count", FieldType::Number, Some("How many")),
                ("owner.email", FieldType::String, None),
                ("labels.2", FieldType::Boolean, None),
                ("tags", FieldType::Json, None),
            ]
        );
        assert_eq!(
            ask.fields[4].schema,
            Some(json!({"type": "array", "items": {"type": "string"}})),
            "an array field carries its schema"
        );
        assert_eq!(ask.fields[0].schema, None);
        assert_eq!(
            ask.fields[0].options,
            Some(vec![json!("low"), json!("high")])
        );
        assert!(ask.prompt.contains("`priority`"), "{}", ask.prompt);
    }
}
