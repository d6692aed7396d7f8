//! Guardrails (F20): secrets found in what crosses the gateway — a tool's arguments on the way
//! to an upstream, a result on the way back — are blocked, redacted or recorded, per tier and
//! per upstream. What is found is named by detector and field, never by value.

mod anchors;
pub mod definition_hooks;
pub mod definitions;
pub mod hook;
pub mod injections;
pub mod pii;
pub mod rules;
pub mod secrets;

pub use definitions::DefinitionAction;
pub use injections::InjectionAction;
pub use rules::Rules;

use std::sync::Arc;

use rmcp::model::{ContentBlock, ResourceContents, ServerResult};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What happens to a secret found in one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretAction {
    Off,
    /// Recorded in the audit log and metrics only; the text passes unchanged.
    Audit,
    /// The secret is masked in what is forwarded or returned (said in `_meta` and text).
    Redact,
    /// The call is refused with a `blocked` plan naming the detector and the field.
    Block,
}

/// What was done about one finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Taken {
    Audit,
    Redact,
    Block,
    /// An injected instruction fenced, hidden characters removed.
    Mark,
}

impl Taken {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Audit => "audit",
            Self::Redact => "redact",
            Self::Block => "block",
            Self::Mark => "mark",
        }
    }
}

/// A tier's or an upstream's guardrails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Policy {
    /// Secrets in a tool's arguments, before they reach the upstream.
    pub arguments: SecretAction,
    /// Secrets in results (tool results, resources, prompts), before they reach the caller.
    pub results: SecretAction,
    /// Tool definitions that hide characters or address the model.
    pub definitions: DefinitionAction,
    /// Results that hide characters or address the model.
    pub injections: InjectionAction,
    /// The operator's rules: the bound on findings, allowlists, own and PII detectors.
    pub rules: Arc<Rules>,
}

impl Policy {
    /// Upstreams without a tier: recorded and reported, never changed or held.
    pub fn untiered() -> Policy {
        static UNTIERED: std::sync::LazyLock<Arc<Rules>> =
            std::sync::LazyLock::new(|| Arc::new(Rules::bound_only(MAX_FINDINGS)));
        Policy {
            arguments: SecretAction::Audit,
            results: SecretAction::Audit,
            definitions: DefinitionAction::Warn,
            injections: InjectionAction::Audit,
            rules: UNTIERED.clone(),
        }
    }
}

/// Findings recorded per message by default.
pub const MAX_FINDINGS: u16 = 100;
/// Detector name of the finding that counts those past the bound.
pub const MORE_FINDINGS: &str = "more_findings";

/// The raw `[guardrails]` of a tier file or an upstream (each key optional: an upstream's
/// settings override its tier's one by one).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    pub secrets_in_arguments: Option<SecretAction>,
    pub secrets_in_results: Option<SecretAction>,
    pub tool_definitions: Option<DefinitionAction>,
    pub injections_in_results: Option<InjectionAction>,
    /// Findings recorded per message (1 to 65,535; default 100).
    pub max_findings: Option<std::num::NonZeroU16>,
    /// PII detectors to run (none by default).
    pub pii: Option<Vec<pii::Pii>>,
    /// What passes unflagged: fields, detectors in fields, values by SHA-256.
    pub allow: Option<Vec<rules::RawAllow>>,
    /// The operator's own detectors.
    pub detectors: Option<Vec<rules::RawDetector>>,
    /// External guardrail hooks (`[guardrail_hooks.NAME]`), asked in this order.
    pub hooks: Option<Vec<String>>,
}

impl RawPolicy {
    /// These settings over `base`, key by key (a list replaces the base's list); the rules
    /// compiled, or why they do not.
    pub fn over(&self, base: &Policy) -> Result<Policy, rules::RuleError> {
        let rules = if self.max_findings.is_none()
            && self.pii.is_none()
            && self.allow.is_none()
            && self.detectors.is_none()
        {
            base.rules.clone()
        } else {
            let b = &base.rules.raw;
            Arc::new(Rules::compile(rules::RawRules {
                max_findings: self.max_findings.map_or(b.max_findings, |n| n.get()),
                pii: self.pii.clone().unwrap_or_else(|| b.pii.clone()),
                allow: self.allow.clone().unwrap_or_else(|| b.allow.clone()),
                detectors: self
                    .detectors
                    .clone()
                    .unwrap_or_else(|| b.detectors.clone()),
            })?)
        };
        Ok(Policy {
            arguments: self.secrets_in_arguments.unwrap_or(base.arguments),
            results: self.secrets_in_results.unwrap_or(base.results),
            definitions: self.tool_definitions.unwrap_or(base.definitions),
            injections: self.injections_in_results.unwrap_or(base.injections),
            rules,
        })
    }
}

/// Which way the text was going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Arguments,
    Result,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Arguments => "arguments",
            Self::Result => "result",
        }
    }
}

/// One secret found: where and by which detector, never what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub detector: &'static str,
    /// A JSON pointer into the arguments or the result (`/content/0/text`).
    pub field: String,
    pub direction: Direction,
    pub action: Taken,
    /// For a `more_findings` finding: how many were found past the bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub more: Option<usize>,
}

impl Finding {
    /// An injected instruction or hidden characters, rather than a secret.
    pub fn is_injection(&self) -> bool {
        matches!(self.detector, "hidden_unicode" | "instruction")
    }
}

/// A call refused because of a secret under `block`: in its arguments (it never reached the
/// upstream) or in its result (withheld from the caller).
#[derive(Debug, Clone)]
pub struct Blocked {
    pub finding: Finding,
    /// The exposed tool (or prompt, or resource) name and its upstream.
    pub tool: String,
    pub upstream: String,
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Finding {
            detector, field, ..
        } = &self.finding;
        match self.finding.direction {
            Direction::Arguments => write!(
                f,
                "`{}` was not called: its arguments hold what looks like a secret ({detector} \
                 at `{field}`), and upstream `{}` may not receive secrets",
                self.tool, self.upstream
            ),
            Direction::Result => write!(
                f,
                "the answer of `{}` was withheld: it holds what looks like a secret ({detector} \
                 at `{field}`), and secrets from upstream `{}` are blocked",
                self.tool, self.upstream
            ),
        }
    }
}

impl Blocked {
    /// What the caller can do about it.
    pub fn hint(&self) -> String {
        match self.finding.direction {
            Direction::Arguments => format!(
                "remove the secret from `{}` and call again; credentials for upstreams are \
                 injected by the gateway ([credentials] in its config), never passed as arguments",
                self.finding.field
            ),
            Direction::Result => "do not retry: the same answer would be withheld again; ask an \
                 operator to check what the upstream returns"
                .to_owned(),
        }
    }
}

/// Why the guardrails refused a call: a secret under `block`, or a hook's deny or failure.
#[derive(Debug, Clone)]
pub enum Refusal {
    Secret(Blocked),
    Hook(hook::Refusal),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Secret(b) => b.fmt(f),
            Self::Hook(h) => h.fmt(f),
        }
    }
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        match self {
            Self::Secret(_) => "secret_blocked",
            Self::Hook(h) => h.code(),
        }
    }

    pub fn hint(&self) -> String {
        match self {
            Self::Secret(b) => b.hint(),
            Self::Hook(h) => h.hint(),
        }
    }

    /// Refused before the upstream was asked (so nothing there ran).
    pub fn before_upstream(&self) -> bool {
        match self {
            Self::Secret(b) => b.finding.direction == Direction::Arguments,
            Self::Hook(h) => h.phase == hook::Phase::Request,
        }
    }

    /// Whether the same call may pass later (a hook that did not answer may answer then).
    pub fn retryable(&self) -> bool {
        matches!(self, Self::Hook(h) if !h.denied)
    }

    /// What a JSON-RPC error's data says about it (never a secret).
    pub fn data(&self) -> Value {
        match self {
            Self::Secret(b) => serde_json::json!({"reason": self.code(),
                "detector": b.finding.detector, "field": b.finding.field,
                "direction": b.finding.direction}),
            Self::Hook(h) => serde_json::json!({"reason": self.code(), "hook": h.hook,
                "phase": h.phase}),
        }
    }

    /// The audit log's entry.
    pub fn audit(&self) -> Value {
        match self {
            Self::Secret(b) => serde_json::to_value(&b.finding).unwrap_or_default(),
            Self::Hook(h) => serde_json::json!({"hook": h.hook, "phase": h.phase,
                "decision": if h.denied { "deny" } else { "error" }}),
        }
    }
}

/// Most text scanned in one message; anything past it is treated as a secret under `block`
/// and `redact` (it cannot be said to be clean), and recorded under `audit`.
pub const MAX_SCANNED: usize = 16 << 20;

/// Detector name of text past [`MAX_SCANNED`].
pub const UNSCANNED: &str = "too_large_to_scan";

/// Scans one message in one direction under `action`, masking secrets in place under
/// `redact`. Each finding carries the action taken.
struct Scan<'r> {
    direction: Direction,
    action: SecretAction,
    injections: InjectionAction,
    budget: usize,
    found: Vec<Finding>,
    /// Findings past `max` are counted, not kept: 1 MiB of keys is not 50,000 findings.
    max: usize,
    more: usize,
    more_action: Option<Taken>,
    /// The answer's fence marker, under `mark`.
    marker: String,
    rules: &'r Rules,
}

impl<'r> Scan<'r> {
    fn new(
        direction: Direction,
        action: SecretAction,
        injections: InjectionAction,
        rules: &'r Rules,
    ) -> Self {
        Self {
            direction,
            action,
            injections,
            budget: MAX_SCANNED,
            found: Vec::new(),
            max: usize::from(rules.raw.max_findings.max(1)),
            more: 0,
            more_action: None,
            marker: String::new(),
            rules,
        }
    }

    /// What was found: at most `max` findings, then one that counts the rest (its action the
    /// strongest of theirs).
    fn finish(mut self) -> Vec<Finding> {
        if let Some(action) = self.more_action {
            self.found.push(Finding {
                detector: MORE_FINDINGS,
                field: String::new(),
                direction: self.direction,
                action,
                more: Some(self.more),
            });
        }
        self.found
    }

    /// The finding's action under the secret policy (never `Off`: nothing is scanned then).
    fn taken(&self) -> Taken {
        match self.action {
            SecretAction::Redact => Taken::Redact,
            SecretAction::Block => Taken::Block,
            SecretAction::Off | SecretAction::Audit => Taken::Audit,
        }
    }

    fn text(&mut self, text: &mut String, field: &str, pointer: &str) {
        if self.budget < text.len() {
            self.budget = 0;
            self.note(UNSCANNED, pointer, self.taken());
            if self.action == SecretAction::Redact {
                *text = format!("[REDACTED:{UNSCANNED}]");
            }
            return;
        }
        self.budget -= text.len();
        if self.action != SecretAction::Off {
            let mut hits = secrets::scan(text, field);
            self.rules.apply(text, pointer, &mut hits);
            for h in &hits {
                self.note(h.detector, pointer, self.taken());
            }
            if self.action == SecretAction::Redact && !hits.is_empty() {
                *text = secrets::redact(text, &hits);
            }
        }
        if self.injections != InjectionAction::Off {
            let mark = self.injections == InjectionAction::Mark;
            let taken = if mark { Taken::Mark } else { Taken::Audit };
            let marker = mark.then_some(self.marker.as_str());
            for kind in injections::screen(text, marker) {
                self.note(kind, pointer, taken);
            }
        }
    }

    fn note(&mut self, detector: &'static str, pointer: &str, action: Taken) {
        if self.found.len() >= self.max {
            self.more += 1;
            // A block among them still blocks.
            if self.more_action != Some(Taken::Block) {
                self.more_action = Some(action);
            }
            return;
        }
        self.found.push(Finding {
            detector,
            field: pointer.to_owned(),
            direction: self.direction,
            action,
            more: None,
        });
    }

    /// Every string in `v`, each with the name of the field holding it.
    fn value(&mut self, v: &mut Value, field: &str, pointer: &mut String) {
        match v {
            Value::String(s) => self.text(s, field, pointer),
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    let len = pointer.len();
                    pointer.push('/');
                    pointer.push_str(&i.to_string());
                    self.value(item, field, pointer);
                    pointer.truncate(len);
                }
            }
            Value::Object(map) => {
                for (k, item) in map.iter_mut() {
                    let len = pointer.len();
                    push_key(pointer, k);
                    self.value(item, k, pointer);
                    pointer.truncate(len);
                }
            }
            _ => {}
        }
    }

    fn resource(&mut self, r: &mut ResourceContents, pointer: &str) {
        if let ResourceContents::TextResourceContents { text, .. } = r {
            self.text(text, "", &format!("{pointer}/text"));
        }
    }

    fn content(&mut self, blocks: &mut [ContentBlock], at: &str) {
        for (i, block) in blocks.iter_mut().enumerate() {
            match block {
                ContentBlock::Text(t) => self.text(&mut t.text, "", &format!("{at}/{i}/text")),
                ContentBlock::Resource(r) => {
                    self.resource(&mut r.resource, &format!("{at}/{i}/resource"))
                }
                _ => {}
            }
        }
    }
}

/// Longest key named in a field pointer; a longer one, or one that looks like a secret itself,
/// is named `*` so a pointer never carries what it points away from.
const MAX_KEY_SHOWN: usize = 64;

/// Appends one JSON-pointer segment for key `k`.
fn push_key(pointer: &mut String, k: &str) {
    pointer.push('/');
    if k.len() > MAX_KEY_SHOWN || !secrets::scan(k, "").is_empty() {
        pointer.push('*');
    } else {
        pointer.push_str(&k.replace('~', "~0").replace('/', "~1"));
    }
}

/// Scans a tool's arguments under `action` (masking under `redact`).
pub fn scan_arguments(
    args: &mut serde_json::Map<String, Value>,
    action: SecretAction,
    rules: &Rules,
) -> Vec<Finding> {
    if action == SecretAction::Off {
        return Vec::new();
    }
    let mut scan = Scan::new(Direction::Arguments, action, InjectionAction::Off, rules);
    let mut pointer = String::new();
    for (k, v) in args.iter_mut() {
        pointer.clear();
        push_key(&mut pointer, k);
        scan.value(v, k, &mut pointer);
    }
    scan.finish()
}

/// Scans an upstream's JSON-RPC error — its message and data — for secrets like a result,
/// masking under `redact`.
pub fn scan_error(
    error: &mut rmcp::ErrorData,
    action: SecretAction,
    rules: &Rules,
) -> Vec<Finding> {
    if action == SecretAction::Off {
        return Vec::new();
    }
    let mut scan = Scan::new(Direction::Result, action, InjectionAction::Off, rules);
    let mut message = error.message.to_string();
    scan.text(&mut message, "", "/message");
    if let Some(data) = error.data.as_mut() {
        scan.value(data, "", &mut "/data".to_owned());
    }
    if action == SecretAction::Redact && message != error.message {
        error.message = message.into();
    }
    scan.finish()
}

/// `text` with every secret masked, for what fedgate writes itself (log lines, error text),
/// whatever the upstream's guardrails: a secret never reaches fedgate's own output.
pub fn masked(text: &str) -> std::borrow::Cow<'_, str> {
    let hits = secrets::scan(text, "");
    if hits.is_empty() {
        text.into()
    } else {
        secrets::redact(text, &hits).into()
    }
}

/// Scans a result's text (tool content and structured content, resource contents, prompt
/// messages) for secrets under `action` (masking under `redact`) and for injected
/// instructions under `injections` (fencing under `mark`, with `marker` in every fence).
pub fn scan_result(
    result: &mut ServerResult,
    action: SecretAction,
    injections: InjectionAction,
    rules: &Rules,
    marker: &str,
) -> Vec<Finding> {
    if action == SecretAction::Off && injections == InjectionAction::Off {
        return Vec::new();
    }
    let mut scan = Scan::new(Direction::Result, action, injections, rules);
    scan.marker = marker.to_owned();
    match result {
        ServerResult::CallToolResult(r) => {
            scan.content(&mut r.content, "/content");
            if let Some(s) = r.structured_content.as_mut() {
                scan.value(s, "", &mut "/structuredContent".to_owned());
            }
        }
        ServerResult::ReadResourceResult(r) => {
            for (i, c) in r.contents.iter_mut().enumerate() {
                scan.resource(c, &format!("/contents/{i}"));
            }
        }
        ServerResult::GetPromptResult(r) => {
            for (i, m) in r.messages.iter_mut().enumerate() {
                scan.content(
                    std::slice::from_mut(&mut m.content),
                    &format!("/messages/{i}/content"),
                );
            }
        }
        _ => {}
    }
    scan.finish()
}

#[cfg(test)]
mod tests {
    use rmcp::model::CallToolResult;
    use serde_json::json;

    use super::*;

    const KEY: &str = "AKIAIOSFODNN7EXAMPLE";

    #[test]
    fn arguments_are_scanned_field_by_field_and_masked_under_redact() {
        let mut args = json!({"note": format!("key {KEY}"), "nested": {"list": ["ok", KEY]}})
            .as_object()
            .cloned()
            .unwrap();
        let found = scan_arguments(&mut args.clone(), SecretAction::Audit, Rules::standard());
        let fields: Vec<&str> = found.iter().map(|f| f.field.as_str()).collect();
        // In the order the arguments came (objects keep their key order).
        assert_eq!(fields, ["/note", "/nested/list/1"]);
        let found = scan_arguments(&mut args, SecretAction::Redact, Rules::standard());
        assert_eq!(found.len(), 2);
        assert_eq!(args["note"], "key [REDACTED:aws_access_key]");
        assert!(!serde_json::to_string(&args).unwrap().contains(KEY));
        assert!(scan_arguments(&mut args, SecretAction::Off, Rules::standard()).is_empty());
    }

    #[test]
    fn results_are_scanned_in_text_structured_content_and_resources() {
        let mut r = CallToolResult::success(vec![
            ContentBlock::text("clean"),
            ContentBlock::text(format!("here: {KEY}")),
            ContentBlock::embedded_text("file:///env", format!("AWS={KEY}")),
        ]);
        r.structured_content = Some(json!({"password": "q8Zr2LkP0vXw7NcY4tBm"}));
        let mut result = ServerResult::CallToolResult(r);
        let found = scan_result(
            &mut result,
            SecretAction::Redact,
            InjectionAction::Off,
            Rules::standard(),
            "",
        );
        let fields: Vec<(&str, &str)> = found
            .iter()
            .map(|f| (f.detector, f.field.as_str()))
            .collect();
        assert_eq!(
            fields,
            [
                ("aws_access_key", "/content/1/text"),
                ("aws_access_key", "/content/2/resource/text"),
                ("secret_field", "/structuredContent/password"),
            ]
        );
        let text = serde_json::to_string(&result).unwrap();
        assert!(!text.contains(KEY) && !text.contains("q8Zr2"), "{text}");
    }

    #[test]
    fn a_pointer_never_names_a_key_that_looks_like_a_secret() {
        let mut args = json!({ KEY: {"a/b": KEY}, "x".repeat(100): KEY })
            .as_object()
            .cloned()
            .unwrap();
        let found = scan_arguments(&mut args, SecretAction::Audit, Rules::standard());
        let fields: Vec<&str> = found.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(fields, ["/*/a~1b", "/*"]);
    }

    #[test]
    fn text_past_the_scan_budget_counts_as_unscanned() {
        let mut args = json!({"a": "x".repeat(MAX_SCANNED), "b": "y"})
            .as_object()
            .cloned()
            .unwrap();
        let found = scan_arguments(&mut args, SecretAction::Redact, Rules::standard());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].detector, UNSCANNED);
        assert_eq!(found[0].field, "/b");
    }
}
