//! The `orchestrated_plan` envelope, version 1 (F11): what fedgate tells an agent around a
//! result or a refusal — what happened and what it can do next. The types serialize exactly to
//! `schemas/orchestrated_plan.v1.json` (absent fields are omitted, never `null`).

mod ask;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use ask::ask_for;

/// Where the plan travels in a result's `_meta`, and in a JSON-RPC error's `data`.
pub const META_KEY: &str = "io.fedgate/orchestrated_plan";

/// When fedgate adds an envelope (per gateway, upstream or tool).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Never: answers are what a direct call gives.
    Off,
    /// Around what the gateway decides or fails; the upstream's answers pass as they are.
    #[default]
    Errors,
    /// Around every answer, the upstream's too (added beside its content, never instead).
    Always,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Error,
    Invalid,
    Blocked,
    Partial,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Invalid => "invalid",
            Status::Blocked => "blocked",
            Status::Partial => "partial",
        }
    }
}

/// One tool call the agent can make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Action {
    pub tool: String,
    pub args: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Ask the human before making the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanError {
    /// Stable, snake_case (README lists them).
    pub code: String,
    /// A JSON pointer into the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Whether calling again (after the hint) can succeed.
    pub recoverable: bool,
}

/// A form the agent can fill (or show its human) to call again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ask {
    pub prompt: String,
    pub fields: Vec<AskField>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldType {
    String,
    Number,
    Boolean,
    Select,
    /// An array or object: a JSON value matching the field's `schema`.
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AskField {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: FieldType,
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// For `json` fields: the JSON Schema of the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Safety {
    pub writes_code: bool,
    pub touches_files: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
}

/// One step of a flow, in a `partial` plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub step: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<PlanError>,
}

/// The envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Always `orchestrated_plan`.
    pub kind: String,
    /// Always `1`.
    pub version: String,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_actions: Vec<Action>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_up: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<PlanError>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<Ask>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recovery_actions: Vec<Action>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safety: Option<Safety>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub affected_paths: Vec<String>,
    pub correlation_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partial_results: Vec<StepResult>,
}

impl Plan {
    pub fn new(status: Status, correlation_id: impl Into<String>) -> Self {
        Self {
            kind: "orchestrated_plan".into(),
            version: "1".into(),
            status,
            instruction: None,
            next_actions: Vec::new(),
            follow_up: None,
            errors: Vec::new(),
            missing: Vec::new(),
            ask: None,
            recovery_actions: Vec::new(),
            safety: None,
            affected_paths: Vec::new(),
            correlation_id: correlation_id.into(),
            partial_results: Vec::new(),
        }
    }

    pub fn instruction(mut self, text: impl Into<String>) -> Self {
        self.instruction = Some(text.into());
        self
    }

    pub fn error(mut self, e: PlanError) -> Self {
        self.errors.push(e);
        self
    }

    /// The plan as a JSON value (it always serializes: every field is plain data).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl PlanError {
    pub fn new(code: impl Into<String>, message: impl Into<String>, recoverable: bool) -> Self {
        Self {
            code: code.into(),
            field: None,
            message: message.into(),
            hint: None,
            recoverable,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl Action {
    pub fn call(tool: impl Into<String>, args: Map<String, Value>) -> Self {
        Self {
            tool: tool.into(),
            args,
            label: None,
            confirm: None,
        }
    }

    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_fields_are_omitted_and_status_is_lower_case() {
        let plan = Plan::new(Status::Blocked, "0".repeat(32)).instruction("wait");
        let v = plan.to_value();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["correlation_id", "instruction", "kind", "status", "version"]
        );
        assert_eq!(v["status"], "blocked");
        let back: Plan = serde_json::from_value(v).unwrap();
        assert_eq!(back, plan);
    }
}
