//! The plan envelope (F11) of one answer: which plan a gateway outcome gets, and how it
//! travels. `observe` calls [`wrap`] after it recorded the typed outcome; `wire` turns what
//! stays an error into the JSON-RPC form.
//!
//! For `tools/call`, refusals the model can act on are tool results with `isError: true`,
//! holding the plan as a text block, as `structuredContent` (unless the tool declares an
//! `outputSchema`, which the plan would not match) and in `_meta`. An unknown tool, the
//! upstream's own JSON-RPC errors and protocol failures stay JSON-RPC errors, with the plan in
//! `error.data`. A result the upstream produced is never changed: the plan is only added to
//! `_meta` (and, in mode `always`, as one more text block).

use rmcp::model::{CallToolResult, ContentBlock, MetaObject, ServerResult};
use serde_json::{Map, Value, json};

use super::{Call, CallError, Op, Target, TargetKind};
use crate::{
    approval::PlanRefusal,
    envelope::{Action, META_KEY, Mode, Plan, PlanError, Status},
    names::{APPROVE_TOOL, FIND_TOOLS},
    telemetry::metrics::Metrics,
};

/// What `wrap` needs to know of the call.
#[derive(Debug, Clone)]
pub(super) struct Wrapping {
    pub mode: Mode,
    pub tool_call: bool,
    pub correlation_id: String,
    /// A question to ask after success (tool setting).
    pub follow_up: Option<String>,
    /// The tool declares an `outputSchema`: a refusal's `structuredContent` would break it.
    pub output_schema: bool,
}

/// How the answer of `call` (routed to `target`) gets its envelope.
pub(super) fn wrapping(call: &Call, target: Option<&Target>, default: Mode) -> Wrapping {
    let mut w = Wrapping {
        mode: default,
        tool_call: matches!(call.op, Op::CallTool(_)),
        correlation_id: call.correlation_id.clone(),
        follow_up: None,
        output_schema: false,
    };
    if let Some(TargetKind::Upstream(route)) = target.map(|t| &t.kind) {
        let spec = &route.spec;
        match &call.op {
            Op::CallTool(p) => {
                let policy = spec.tool_policy(&p.name);
                w.mode = policy.envelope;
                if w.mode != Mode::Off {
                    w.follow_up = policy.settings.and_then(|s| s.follow_up.clone());
                    w.output_schema = route
                        .lists
                        .tool(&p.name)
                        .is_some_and(|t| t.output_schema.is_some());
                }
            }
            _ => w.mode = spec.envelope,
        }
    }
    w
}

/// The status of the envelope an answer carries, if any (for the console's call feed).
pub(super) fn status_of(result: &Result<ServerResult, CallError>) -> Option<String> {
    match result {
        Ok(ServerResult::CallToolResult(r)) => r
            .meta
            .as_ref()?
            .0
            .get(META_KEY)?
            .get("status")?
            .as_str()
            .map(str::to_owned),
        Err(CallError::Planned { plan, .. }) => Some(plan.status.as_str().to_owned()),
        _ => None,
    }
}

/// Adds the envelope to one answer.
pub(super) fn wrap(
    result: Result<ServerResult, CallError>,
    w: &Wrapping,
    metrics: &Metrics,
) -> Result<ServerResult, CallError> {
    if w.mode == Mode::Off {
        return result;
    }
    match result {
        Err(e) => {
            let plan = plan_for(&e, &w.correlation_id);
            metrics.envelope(plan.status.as_str(), e.code());
            if w.tool_call && travels_as_result(&e) {
                Ok(ServerResult::CallToolResult(refusal_result(
                    &plan,
                    w.output_schema,
                    matches!(e, CallError::ApprovalRequired { .. }),
                )))
            } else {
                Err(CallError::Planned {
                    cause: Box::new(e),
                    plan: Box::new(plan),
                })
            }
        }
        Ok(ServerResult::CallToolResult(mut r)) => {
            // Already wrapped (an approved call, by its own tool's settings).
            if r.meta.as_ref().is_some_and(|m| m.0.contains_key(META_KEY)) {
                return Ok(ServerResult::CallToolResult(r));
            }
            let failed = r.is_error == Some(true);
            if w.mode != Mode::Always && (failed || w.follow_up.is_none()) {
                return Ok(ServerResult::CallToolResult(r));
            }
            let plan = if failed {
                Plan::new(Status::Error, &w.correlation_id)
                    .instruction("the tool reported an error; its content says what went wrong")
                    .error(
                        PlanError::new("tool_error", first_text(&r), true)
                            .hint("read the tool's content, correct the call and try again"),
                    )
            } else {
                let mut p =
                    Plan::new(Status::Ok, &w.correlation_id).instruction("the call succeeded");
                p.follow_up = w.follow_up.clone();
                p
            };
            metrics.envelope(
                plan.status.as_str(),
                if failed { "tool_error" } else { "ok" },
            );
            let v = plan.to_value();
            if w.mode == Mode::Always {
                r.content.push(ContentBlock::text(v.to_string()));
            } else if let Some(q) = plan.follow_up.as_deref() {
                // Desktop clients pass only content to the model, never `_meta`: the question
                // the operator configured must reach it there.
                r.content
                    .push(ContentBlock::text(format!("Follow-up for the user: {q}")));
            }
            r.meta
                .get_or_insert_with(MetaObject::new)
                .0
                .insert(META_KEY.into(), v);
            Ok(ServerResult::CallToolResult(r))
        }
        ok => ok,
    }
}

/// Whether a `tools/call` outcome reaches the model as a tool result (something it can
/// correct or wait out) rather than a JSON-RPC error.
fn travels_as_result(e: &CallError) -> bool {
    e.describe().travels == super::error::Travels::ToolResult
}

fn refusal_result(plan: &Plan, output_schema: bool, held: bool) -> CallToolResult {
    let v = plan.to_value();
    // A held call of a tool with an output schema has no structured content to give; clients
    // that check output schemas accept that only from an error result, so it is one (its plan
    // still says `ok`).
    let mut r = if held && !output_schema {
        CallToolResult::success(vec![ContentBlock::text(v.to_string())])
    } else if held {
        // An error only for the client's output-schema check: the model must read that the
        // call waits, not that it failed.
        CallToolResult::error(vec![
            ContentBlock::text(
                "Not a failure: this call has not run yet and waits for approval. Follow the \
                 plan's next_actions (confirm with your user first).",
            ),
            ContentBlock::text(v.to_string()),
        ])
    } else {
        CallToolResult::error(vec![ContentBlock::text(v.to_string())])
    };
    if !output_schema {
        r.structured_content = Some(v.clone());
    }
    let mut meta = MetaObject::new();
    meta.0.insert(META_KEY.into(), v);
    r.meta = Some(meta);
    r
}

/// The start of the upstream's first text block (the whole text stays in its own content).
fn first_text(r: &CallToolResult) -> String {
    const MAX: usize = 300;
    let text = r
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.as_str()))
        .unwrap_or("the tool failed");
    match text.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// The plan of one gateway outcome (README's table lists them).
pub fn plan_for(e: &CallError, correlation_id: &str) -> Plan {
    let msg = e.wire_message();
    let code = e.code();
    let base = |status| Plan::new(status, correlation_id).instruction(msg.clone());
    match e {
        CallError::Planned { plan, .. } => (**plan).clone(),
        CallError::NotAuthorized { shown } => plan_for(shown, correlation_id),
        CallError::UnknownTool {
            closest, recover, ..
        } => {
            let searching = recover.iter().any(|r| r.tool == FIND_TOOLS);
            let hint = match closest.as_slice() {
                _ if searching => {
                    "search with fedgate__find_tools: it searches every tool you may call, \
                     listed or not"
                        .to_owned()
                }
                [] => "call tools/list to see the tools you may call".to_owned(),
                names => format!(
                    "did you mean {}? Check its arguments in tools/list before calling it",
                    names
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            };
            let mut p =
                base(Status::Error).error(PlanError::new(code, msg.clone(), true).hint(hint));
            // Only reads: a recovery action must be safe to try.
            p.recovery_actions = recover
                .iter()
                .map(|r| {
                    Action::call(&r.tool, r.args.clone()).label(if r.tool == FIND_TOOLS {
                        "search the tools you may call".to_owned()
                    } else {
                        format!("did you mean `{}`?", r.tool)
                    })
                })
                .collect();
            p
        }
        CallError::InvalidArguments { problems, ask, .. } => {
            let mut p = base(Status::Invalid);
            p.missing = problems.iter().filter_map(|p| p.missing.clone()).collect();
            p.errors = problems
                .iter()
                .map(|pr| PlanError {
                    code: pr.code.clone(),
                    field: Some(pr.pointer.clone()),
                    message: pr.message.clone(),
                    hint: None,
                    recoverable: true,
                })
                .collect();
            p.ask = Some((**ask).clone());
            p
        }
        CallError::ApprovalRequired { plan } => {
            let who = if plan.approvers.is_empty() {
                "ask your user to approve it, then call fedgate__approve".to_owned()
            } else {
                format!(
                    "an identity with role {} must approve it; then call fedgate__approve",
                    plan.approvers.join(" or ")
                )
            };
            let mut p = Plan::new(Status::Ok, correlation_id).instruction(format!(
                "Not run yet: `{}` on upstream `{}` with {} needs approval; {who}. The plan \
                 expires at {}.",
                plan.tool,
                plan.upstream,
                plan.summary,
                rfc3339(plan.expires_ms)
            ));
            let mut args = Map::new();
            args.insert("plan_id".into(), json!(plan.id));
            p.next_actions = vec![Action {
                tool: APPROVE_TOOL.to_owned(),
                args,
                label: Some(format!("approve `{}` ({})", plan.tool, plan.summary)),
                confirm: Some(true),
            }];
            p.safety = Some(plan.safety.clone());
            p.affected_paths = plan.safety.touches_files.clone();
            p
        }
        CallError::TierRefused {
            refusal,
            upstream,
            upstream_tool,
            tier,
            ..
        } => base(Status::Blocked).error(PlanError::new(code, msg.clone(), false).hint(
            super::error::tier_fix(*refusal, upstream, upstream_tool, tier),
        )),
        CallError::Staged(r) => r.plan(base(Status::Blocked)),
        CallError::Connect(r) => r.plan(base(Status::Blocked)),
        CallError::Guarded(r) => base(Status::Blocked)
            .error(PlanError::new(code, msg.clone(), r.retryable()).hint(r.hint())),
        CallError::RateLimited { retry_after, .. } => {
            let ms = retry_after.as_millis() as u64;
            base(Status::Blocked).error(PlanError::new(code, msg.clone(), true).hint(format!(
                "retry_after_ms={ms}: wait that long, then call again"
            )))
        }
        CallError::BreakerOpen { retry_in, tool, .. } => {
            let ms = retry_in.as_millis() as u64;
            base(Status::Blocked).error(PlanError::new(code, msg.clone(), true).hint(format!(
                "retry_after_ms={ms}: fedgate probes the {} again at {}",
                if tool.is_some() { "tool" } else { "upstream" },
                rfc3339(crate::clock::now_ms().saturating_add(ms))
            )))
        }
        CallError::UpstreamUnavailable {
            upstream, phase, ..
        } => base(Status::Blocked).error(PlanError::new(code, msg.clone(), true).hint(format!(
            "upstream `{upstream}` is {}: its tools are back once it is ready; retry later",
            format!("{phase:?}").to_lowercase()
        ))),
        CallError::Busy { .. } | CallError::StoreUnavailable { .. } => base(Status::Blocked)
            .error(PlanError::new(code, msg.clone(), true).hint("retry in a moment")),
        CallError::FlowsElsewhere { .. } => base(Status::Blocked).error(
            PlanError::new(code, msg.clone(), false)
                .hint("tell your user: this client's fedgate process cannot run flows; the gateway named in the message does"),
        ),
        CallError::Plan(r) => {
            let (status, recoverable, hint) = match r {
                PlanRefusal::Waiting { .. } => (
                    Status::Blocked,
                    true,
                    "call fedgate__approve again once a reviewer approved",
                ),
                PlanRefusal::Full | PlanRefusal::TooManyOfYours(_) => {
                    (Status::Blocked, true, "retry later")
                }
                PlanRefusal::Changed => (
                    Status::Blocked,
                    true,
                    "call fedgate__approve again: it answers with the plan's new state",
                ),
                PlanRefusal::Superseded => (
                    Status::Error,
                    false,
                    "the run asked again with a new plan: decide that one instead",
                ),
                PlanRefusal::Expired | PlanRefusal::Invalidated => {
                    (Status::Error, true, "call the tool again for a new plan")
                }
                PlanRefusal::Used | PlanRefusal::Denied { .. } | PlanRefusal::Unknown => (
                    Status::Error,
                    false,
                    "do not repeat the call without asking your user",
                ),
                PlanRefusal::NotApprover { .. } => {
                    (Status::Error, false, "ask an identity with that role")
                }
                PlanRefusal::NoLongerAllowed { .. } => (
                    Status::Blocked,
                    false,
                    "tell your user: the tool is no longer theirs to call; the plan waits until it is again or expires",
                ),
                PlanRefusal::OperatorMayOnlyDeny => (
                    Status::Error,
                    false,
                    "the plan's caller approves it with fedgate__approve",
                ),
                PlanRefusal::Decided { .. } => (
                    Status::Error,
                    false,
                    "the decision is recorded already; do not repeat it",
                ),
            };
            base(status).error(PlanError::new(code, msg.clone(), recoverable).hint(hint))
        }
        CallError::UpstreamTimeout { uncertain, .. }
        | CallError::UpstreamClosed { uncertain, .. }
            if *uncertain =>
        {
            base(Status::Error).error(
                PlanError::new("outcome_uncertain", msg.clone(), false).hint(
                    "the write may have happened: check its effect (read it back) before \
                     repeating it",
                ),
            )
        }
        CallError::UpstreamTimeout { .. } | CallError::UpstreamClosed { .. } => base(Status::Error)
            .error(
                PlanError::new(code, msg.clone(), true).hint("safe to retry: the call was a read"),
            ),
        CallError::UpstreamFailed { .. } => base(Status::Error).error(
            PlanError::new(code, msg.clone(), true)
                .hint("a read may be retried; for a write, check its effect before repeating it"),
        ),
        CallError::ResponseTooLarge { .. } => base(Status::Error).error(
            PlanError::new(code, msg.clone(), true)
                .hint("ask for less: use the tool's filters or pagination"),
        ),
        CallError::IdempotencyConflict => base(Status::Error)
            .error(PlanError::new(code, msg.clone(), true).hint("use a new idempotency key")),
        CallError::UnknownPrompt { .. } | CallError::UnknownResource { .. } => base(Status::Error)
            .error(
                PlanError::new(code, msg.clone(), true).hint("list what exists and pick from it"),
            ),
        CallError::UnknownTask => base(Status::Error).error(
            PlanError::new(code, msg.clone(), false)
                .hint("use the taskId fedgate returned to you; a task's handle is yours alone"),
        ),
        CallError::BadCursor
        | CallError::BadRequestState { .. }
        | CallError::NoClientInput { .. } => {
            base(Status::Error).error(PlanError::new(code, msg.clone(), true))
        }
        CallError::UpstreamRefused { error, .. } => {
            base(Status::Error).error(PlanError::new(code, error.message.to_string(), false))
        }
        CallError::Cancelled | CallError::TooDeep { .. } | CallError::Internal { .. } => {
            base(Status::Error).error(PlanError::new(code, msg.clone(), false))
        }
        // Nothing ran: the path says which gateways the request passed.
        CallError::Hop(h) => {
            let mut plan = base(Status::Blocked).error(
                PlanError::new(code, msg.clone(), false)
                    .hint("a federation of gateways routes this name in a circle or too far: change the peers' imports or `[gateway] max_hops`"),
            );
            plan.affected_paths = h.path().to_vec();
            plan
        }
    }
}

fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// A short, bounded rendering of call arguments for an approval plan (`key=value, …`), shown
/// to the agent, its human and reviewers. Masked as the audit log masks them — by the secret
/// detectors (`[REDACTED:<detector>]`) — and properties the schema declares secret (`writeOnly`,
/// `format: password`) are `«redacted»` whatever they hold. A name alone (`key`) hides nothing:
/// the approver sees which record a write touches.
pub(super) fn summarize(args: &Map<String, Value>, schema: Option<&Value>) -> String {
    const MAX: usize = 200;
    if args.is_empty() {
        return "no arguments".to_owned();
    }
    let mut masked = args.clone();
    crate::guard::scan_arguments(
        &mut masked,
        crate::guard::SecretAction::Redact,
        crate::guard::Rules::standard(),
    );
    let mut out = String::new();
    for (k, v) in &masked {
        if !out.is_empty() {
            out.push_str(", ");
        }
        let v = match v {
            _ if declared_secret(schema.and_then(|s| s.get("properties")?.get(k))) => {
                "«redacted»".into()
            }
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        out.push_str(&format!("{k}={v}"));
        if out.chars().count() > MAX {
            out = out.chars().take(MAX).collect();
            out.push('…');
            break;
        }
    }
    out
}

/// Whether a property's schema declares its value secret.
fn declared_secret(schema: Option<&Value>) -> bool {
    schema.is_some_and(|s| {
        s.get("writeOnly") == Some(&Value::Bool(true))
            || s.get("format").and_then(Value::as_str) == Some("password")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_bounded_and_redact_secrets() {
        let args = json!({"user": "ada", "api_token": "t0ps3cret", "pin": "1234", "n": 2,
            "key": "notes/2024-06-01", "note": "AKIAIOSFODNN7EXAMPLE"});
        let schema = json!({"properties": {"pin": {"type": "string", "writeOnly": true}}});
        let s = summarize(args.as_object().unwrap(), Some(&schema));
        assert!(!s.contains("t0ps3cret") && !s.contains("1234"), "{s}");
        assert!(
            !s.contains("AKIA") && s.contains("[REDACTED:aws_access_key]"),
            "{s}"
        );
        assert!(s.contains("user=\"ada\"") && s.contains("n=2"), "{s}");
        // A record's key is not a secret by its name.
        assert!(s.contains("key=\"notes/2024-06-01\""), "{s}");
        let long = json!({"text": "x".repeat(1000)});
        assert!(summarize(long.as_object().unwrap(), None).chars().count() <= 201);
    }
}
