//! External guardrail hooks: an HTTP service asked before a tool call is forwarded (phase
//! `request`) and after its result comes back (phase `response`), answering pass, mutate (new
//! arguments or a new result) or deny (with a reason that becomes the caller's plan). Hooks of
//! an upstream run in config order, each seeing what the previous one passed on. A hook that
//! does not answer in time, or answers something that is not a decision, fails the call (fail
//! closed, the default) or is skipped (fail open).
//!
//! The wire format (version 1), a JSON `POST`:
//!
//! ```json
//! {"version": 1, "phase": "request", "hook": "pii", "method": "tools/call",
//!  "upstream": "web", "tool": "web__fetch", "upstream_tool": "fetch",  // a prompt's names,
//!                                                      // or a resource's URI, for those
//!  "identity": {"name": "ci-bot", "kind": "api_key"}, "correlation_id": "…",
//!  "arguments": {…}, "result": {…}}            // `result` in the response phase only
//! ```
//!
//! answered with `{"decision": "pass"}`, `{"decision": "mutate", "arguments": {…}}` (request
//! phase of `tools/call` and `prompts/get`) or `{"decision": "mutate", "result": {…}}` (response
//! phase: a result of the method's kind), or `{"decision": "deny", "reason": "…"}`.

use std::{sync::LazyLock, time::Duration};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// When a hook is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Request,
    Response,
    /// A tool definition, before it is listed (`guard::definition_hooks`).
    Definitions,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Response => "response",
            Self::Definitions => "definitions",
        }
    }
}

/// One configured hook (`[guardrail_hooks.NAME]`).
#[derive(Debug, Clone)]
pub struct Hook {
    pub name: String,
    pub url: String,
    pub timeout: Duration,
    /// Skip the hook (and log) when it fails, instead of refusing the call.
    pub fail_open: bool,
    pub phases: Vec<Phase>,
    /// `env:NAME` or `file:PATH`: sent as `Authorization: Bearer …`, read per call.
    pub token: Option<String>,
}

/// Largest answer read from a hook (a mutated result can be large, not unbounded).
pub const MAX_ANSWER: usize = 16 << 20;
/// Largest answer read from a hook about a tool definition.
pub const MAX_DEFINITION_ANSWER: usize = 64 << 10;
/// Characters of a deny reason passed on to the caller.
const MAX_REASON: usize = 500;

/// What a hook decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Pass,
    Arguments(Map<String, Value>),
    /// A new result, as JSON: the step reads it as the kind of result its method has.
    Result(Box<Value>),
    Deny(String),
}

impl Decision {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Arguments(_) | Self::Result(_) => "mutate",
            Self::Deny(_) => "deny",
        }
    }
}

/// One HTTP client for every hook: pooled connections, no redirects (a hook answers itself).
static CLIENT: LazyLock<Option<reqwest::Client>> = LazyLock::new(|| {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .ok()
});

/// Why a hook gave no usable decision (never with its token); the words complete "the hook
/// ...".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    #[error("has no HTTP client (none could be built)")]
    NoClient,
    #[error("its token cannot be read: {0}")]
    Token(crate::secret::SecretError),
    #[error("unreachable: {0}")]
    Unreachable(String),
    #[error("answered HTTP {0}")]
    Status(u16),
    #[error("broke off its answer: {0}")]
    BrokeOff(String),
    #[error("its answer is longer than {0} bytes")]
    TooLong(usize),
    #[error("answered mutate for a tool definition, which fedgate never edits")]
    MutatedDefinition,
    #[error("did not answer within {0} ms")]
    Timeout(u128),
    #[error("answered with what is not JSON ({0})")]
    NotJson(String),
    #[error("answered without a `decision` (pass, mutate or deny)")]
    NoDecision,
    #[error("answered mutate without an `arguments` object")]
    NoArguments,
    #[error("answered mutate with a `result` that is not an object")]
    ResultNotObject,
    #[error("answered mutate without a `result`")]
    NoResult,
    #[error("answered decision `{0}` (pass, mutate or deny)")]
    UnknownDecision(String),
    #[error("answered mutate for a read, which has no arguments to change")]
    MutatedRead,
    #[error("answered mutate with prompt arguments that are not all strings")]
    PromptArgumentsNotStrings,
    #[error(
        "answered mutate with arguments the tool's schema refuses ({count} problem(s), first at `{first}`)"
    )]
    SchemaRefuses { count: usize, first: String },
    #[error("answered mutate for a result that cannot be replaced")]
    NotReplaceable,
    #[error("answered mutate with a result that is not a {method} result ({detail})")]
    WrongResult { method: String, detail: String },
}

/// Asks `hook` about `payload`.
pub async fn ask(hook: &Hook, phase: Phase, payload: &Value) -> Result<Decision, HookError> {
    let client = CLIENT.as_ref().ok_or(HookError::NoClient)?;
    let mut req = client.post(&hook.url).json(payload);
    if let Some(reference) = &hook.token {
        let token = crate::secret::resolve(reference).map_err(HookError::Token)?;
        req = req.bearer_auth(token.expose());
    }
    let exchange = async {
        let resp = req
            .send()
            .await
            .map_err(|e| HookError::Unreachable(plain(e)))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(HookError::Status(status.as_u16()));
        }
        // A verdict on a definition is a word and a reason; a result may be large.
        let max = match phase {
            Phase::Definitions => MAX_DEFINITION_ANSWER,
            _ => MAX_ANSWER,
        };
        crate::json_size::read_bounded(resp, max)
            .await
            .map_err(|e| match e {
                crate::json_size::Unread::Broken(e) => HookError::BrokeOff(plain(e)),
                crate::json_size::Unread::TooLong => HookError::TooLong(max),
            })
    };
    let body = tokio::time::timeout(hook.timeout, exchange)
        .await
        .map_err(|_| HookError::Timeout(hook.timeout.as_millis()))??;
    decode(&body, phase)
}

/// reqwest's error without the URL (a URL may carry credentials).
fn plain(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A hook's answer as a decision, or why it is not one.
pub fn decode(body: &[u8], phase: Phase) -> Result<Decision, HookError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| HookError::NotJson(e.to_string()))?;
    let decision = v
        .get("decision")
        .and_then(Value::as_str)
        .ok_or(HookError::NoDecision)?;
    match (decision, phase) {
        ("pass", _) => Ok(Decision::Pass),
        ("deny", _) => {
            let reason = v
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("no reason given");
            let mut shown: String = reason
                .chars()
                .filter(|c| !c.is_control())
                .take(MAX_REASON)
                .collect();
            if reason.chars().count() > MAX_REASON {
                shown.push('…');
            }
            Ok(Decision::Deny(shown))
        }
        ("mutate", Phase::Request) => match v.get("arguments") {
            Some(Value::Object(m)) => Ok(Decision::Arguments(m.clone())),
            _ => Err(HookError::NoArguments),
        },
        ("mutate", Phase::Response) => match v.get("result") {
            Some(r @ Value::Object(_)) => Ok(Decision::Result(Box::new(r.clone()))),
            Some(_) => Err(HookError::ResultNotObject),
            None => Err(HookError::NoResult),
        },
        ("mutate", Phase::Definitions) => Err(HookError::MutatedDefinition),
        (other, _) => Err(HookError::UnknownDecision(
            other.chars().take(40).collect::<String>(),
        )),
    }
}

/// Why a call did not get through its hooks.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub hook: String,
    pub phase: Phase,
    pub tool: String,
    /// A deny's reason, or why the hook failed.
    pub why: String,
    /// The hook denied (as opposed to failing while fail-closed).
    pub denied: bool,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Refusal {
            hook, tool, why, ..
        } = self;
        let when = match self.phase {
            Phase::Request => "was not called",
            Phase::Response => "answered, and its answer was withheld",
            Phase::Definitions => "is held back",
        };
        if self.denied {
            write!(f, "`{tool}` {when}: guardrail `{hook}` denied it: {why}")
        } else {
            write!(
                f,
                "`{tool}` {when}: guardrail `{hook}` {why}, and it fails closed"
            )
        }
    }
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        if self.denied {
            "guardrail_denied"
        } else {
            "guardrail_unavailable"
        }
    }

    pub fn hint(&self) -> String {
        match (self.denied, self.phase) {
            (true, Phase::Request) => {
                "change the call as the reason says, or do without it; the same call is denied again"
                    .into()
            }
            (true, Phase::Response | Phase::Definitions) => {
                "do not retry: the same answer would be withheld again".into()
            }
            (false, _) => format!(
                "retry later: guardrail `{}` must answer before this tool can be used",
                self.hook
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_decisions_or_clear_errors() {
        use Phase::*;
        assert_eq!(
            decode(br#"{"decision":"pass"}"#, Request),
            Ok(Decision::Pass)
        );
        assert_eq!(
            decode(
                br#"{"decision":"deny","reason":"no PII\n please"}"#,
                Response
            ),
            Ok(Decision::Deny("no PII please".into()))
        );
        assert!(matches!(
            decode(br#"{"decision":"mutate","arguments":{"a":1}}"#, Request),
            Ok(Decision::Arguments(m)) if m["a"] == 1
        ));
        assert!(matches!(
            decode(
                br#"{"decision":"mutate","result":{"content":[{"type":"text","text":"x"}]}}"#,
                Response
            ),
            Ok(Decision::Result(r)) if r["content"][0]["text"] == "x"
        ));
        for (body, phase, says) in [
            (&b"<html>"[..], Request, "not JSON"),
            (br#"{"ok":true}"#, Request, "without a `decision`"),
            (br#"{"decision":"maybe"}"#, Request, "decision `maybe`"),
            (
                br#"{"decision":"mutate","arguments":"rm -rf"}"#,
                Request,
                "`arguments` object",
            ),
            (
                br#"{"decision":"mutate","result":"x"}"#,
                Response,
                "not an object",
            ),
            (br#"{"decision":"mutate"}"#, Response, "without a `result`"),
        ] {
            let err = decode(body, phase).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
        let long = format!(r#"{{"decision":"deny","reason":"{}"}}"#, "x".repeat(10_000));
        let Ok(Decision::Deny(r)) = decode(long.as_bytes(), Request) else {
            panic!("a deny")
        };
        assert_eq!(r.chars().count(), MAX_REASON + 1);
    }
}
