//! Observe: every routed request is resolved here, once, and recorded — in its trace span, the
//! audit log and the call metrics — with its typed outcome, including the ones resolve, authz,
//! trust, rate limit or the breaker refused.

use std::sync::Arc;

use opentelemetry::{Context, trace::TraceContextExt};
use rmcp::model::{Reference, ServerResult};
use tokio::time::Instant;
use tracing::Instrument;

use super::{
    Call, CallError, CallFuture, Op, OwnTools, envelope,
    resolve::resolve,
    step::{CallService, Step, done},
};
use crate::{
    envelope::Mode,
    names::shown,
    telemetry::{
        audit::{Audit, Record, hash_arguments},
        call_feed::{CallFeed, Finished},
        metrics::Metrics,
        traces::{self, KeyValue, SpanKind, Status},
    },
    upstream::pool::Pool,
};

/// Resolves every call, and records it in the audit log (if configured) and the call metrics.
#[derive(Debug, Clone)]
pub struct Observe {
    /// Whose catalog routes the call.
    pub pool: Arc<Pool>,
    pub own: OwnTools,
    pub audit: Option<Audit>,
    /// The operator console's call feed (when the console is on).
    pub feed: Option<CallFeed>,
    pub metrics: Arc<Metrics>,
    /// The envelope mode of calls without an upstream.
    pub envelope: Mode,
    /// Add the plan envelope (the client stack); the typed stack leaves outcomes as they are.
    pub wrap: bool,
    /// The workflows' stage gate: a refusal suggests only tools the caller's stage allows.
    pub gate: Option<Arc<dyn super::Gate>>,
    /// Connects a caller to an upstream that acts as each person before their call to it
    /// can be routed (with per-user credentials).
    pub personal: Option<Arc<(super::personal::Personal, super::reentry::Reentry)>>,
}

impl Step for Observe {
    fn run<S: CallService>(&self, inner: &mut S, mut call: Call) -> CallFuture {
        let started = Instant::now();
        // What the caller named, before resolve rewrites it to the upstream's own name; the
        // arguments only when an audit log will record them.
        let (name, args) = describe(&call.op, self.audit.is_some());
        let routed = resolve(&self.pool, &self.own, self.personal.as_deref(), &mut call);
        let upstream = routed.as_ref().ok().map(|t| t.owner.clone());
        let method = call.op.method();
        let cx = server_span(&call, method, &shown(&name), upstream.as_deref());
        if let Some(id) = traces::trace_id(&cx) {
            call.correlation_id = id;
        } else if call.identity.access.is_peer()
            && let Some(id) = crate::federation::hops::correlation(&call.meta)
        {
            // A peer's call is one call across gateways: one id in every audit log.
            call.correlation_id = id;
        }
        call.trace = cx.clone();
        let log_span = tracing::info_span!("call", correlation_id = %call.correlation_id);
        // Label values stay bounded: a tool or prompt name only when the catalog knows it, a
        // resource by the URI an upstream lists or the template that routes it.
        let tool_label = match (&call.op, &upstream) {
            (_, None) => "_unknown".to_owned(),
            (Op::CallTool(_) | Op::GetPrompt(_) | Op::Task(_), Some(_)) => name.clone(),
            (Op::Complete(p), Some(_)) if matches!(p.r#ref, Reference::Prompt(_)) => name.clone(),
            (_, Some(_)) => self
                .pool
                .catalog()
                .resource_label(&name)
                .unwrap_or("_unknown")
                .to_owned(),
        };
        let recorded = self.audit.is_some() || self.feed.is_some();
        let full_arguments = self.audit.as_ref().is_some_and(|a| a.full_arguments);
        let base = recorded.then(|| Record {
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            identity: call.identity.name.clone(),
            identity_kind: call.identity.kind.as_str(),
            method,
            name: shown(&name),
            upstream: upstream.as_deref().map(str::to_owned),
            decision: "allowed",
            reason: None,
            outcome: "ok",
            latency_ms: 0.0,
            correlation_id: call.correlation_id.clone(),
            arguments_sha256: args.as_ref().map(hash_arguments),
            // The audit log keeps arguments masked whatever the upstream's guardrails are.
            arguments: args.filter(|_| full_arguments).map(|mut v| {
                if let serde_json::Value::Object(m) = &mut v {
                    crate::guard::scan_arguments(
                        m,
                        crate::guard::SecretAction::Redact,
                        crate::guard::Rules::standard(),
                    );
                }
                v
            }),
            plan_id: None,
            approver: None,
            on_behalf_of: call
                .identity
                .access
                .is_peer()
                .then(|| crate::federation::hops::caller_claim(&call.meta))
                .flatten(),
            guardrails: None,
            cut: None,
        });
        let audit = self.audit.clone();
        let feed = self.feed.clone();
        let metrics = self.metrics.clone();
        let wrap = self.wrap;
        let wrapping = envelope::wrapping(&call, routed.as_ref().ok(), self.envelope);
        let place = self
            .gate
            .as_ref()
            .map(|g| (g.clone(), super::Place::of(&call)));
        let fut = match routed {
            Ok(target) => {
                call.target = Some(target);
                inner.call(call)
            }
            Err(e) => done(Err(e)),
        };
        Box::pin(
            async move {
                let result = match (fut.await, place) {
                    (Err(mut e), Some((gate, place))) if e.suggests() => {
                        let standing = gate.standing(&place).await;
                        e.keep_suggested(|n| standing.allows(n));
                        Err(e)
                    }
                    (r, _) => r,
                };
                let elapsed = started.elapsed();
                let outcome = match &result {
                    Ok(ServerResult::CallToolResult(t)) if t.is_error == Some(true) => "is_error",
                    Ok(ServerResult::InputRequiredResult(_)) => "input_required",
                    Ok(_) => "ok",
                    Err(e) => e.code(),
                };
                let upstream_label = upstream.as_deref().unwrap_or("_none");
                metrics.call(
                    upstream_label,
                    &tool_label,
                    method,
                    outcome,
                    elapsed.as_secs_f64(),
                );
                // Inside the call's log span: the lines carry the correlation id. Fields are
                // the bounded labels, never the raw name or arguments.
                tracing::debug!(
                    method,
                    upstream = upstream_label,
                    tool = %tool_label,
                    outcome,
                    latency_ms = elapsed.as_secs_f64() * 1000.0,
                    "call finished"
                );
                if let (Err(e), false) = (&result, held(&result)) {
                    tracing::info!(
                        method,
                        upstream = upstream_label,
                        tool = %tool_label,
                        side = ?e.describe().side,
                        "call failed: {e}"
                    );
                }
                let span = cx.span();
                if outcome != "ok" {
                    span.set_attribute(KeyValue::new("error.type", outcome));
                    span.set_status(Status::error(outcome));
                }
                span.end();
                let record = base.map(|mut r| {
                    r.latency_ms = elapsed.as_secs_f64() * 1000.0;
                    r.outcome = outcome;
                    r.guardrails = super::guard::findings(&result);
                    if let Err(e) = &result {
                        r.reason = Some(e.code());
                        if e.describe().refusal {
                            r.decision = "refused";
                            r.outcome = "refused";
                        }
                        if let CallError::ApprovalRequired { plan } = e {
                            r.decision = "held";
                            r.outcome = "approval_required";
                            r.plan_id = Some(plan.id.clone());
                        }
                    }
                    r
                });
                let wrapped = if wrap {
                    envelope::wrap(result, &wrapping, &metrics)
                } else {
                    result
                };
                // The audit log gets its own copy only when the feed also wants the record.
                let record = match (&audit, record) {
                    (Some(a), Some(r)) if feed.is_some() => {
                        a.record(r.clone());
                        Some(r)
                    }
                    (Some(a), Some(r)) => {
                        a.record(r);
                        None
                    }
                    (_, r) => r,
                };
                if let (Some(feed), Some(r)) = (feed, record) {
                    feed.push(
                        r,
                        Finished {
                            upstream_label,
                            tool_label: &tool_label,
                            latency_s: elapsed.as_secs_f64(),
                            envelope: envelope::status_of(&wrapped),
                            traced: cx.span().span_context().is_valid(),
                        },
                    );
                }
                wrapped
            }
            .instrument(log_span),
        )
    }
}

/// A call held for approval did not fail; it waits.
fn held(result: &Result<rmcp::model::ServerResult, CallError>) -> bool {
    matches!(result, Err(CallError::ApprovalRequired { .. }))
}

/// The server span of one routed request, under the caller's context. Names and attributes
/// follow the OpenTelemetry MCP conventions (`{mcp.method.name} {target}`); the target is left
/// out of the name when the catalog does not know it, so span names stay bounded.
fn server_span(call: &Call, method: &'static str, name: &str, upstream: Option<&str>) -> Context {
    if !traces::enabled() {
        return call.trace.clone();
    }
    let mut attrs = vec![
        KeyValue::new("mcp.method.name", method),
        KeyValue::new("enduser.id", call.identity.name.clone()),
    ];
    match &call.op {
        Op::CallTool(_) | Op::Task(_) => {
            attrs.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
            attrs.push(KeyValue::new("gen_ai.tool.name", name.to_owned()));
        }
        Op::GetPrompt(_) => attrs.push(KeyValue::new("gen_ai.prompt.name", name.to_owned())),
        _ => attrs.push(KeyValue::new("mcp.resource.uri", name.to_owned())),
    }
    if let Some(u) = upstream {
        attrs.push(KeyValue::new("fedgate.upstream", u.to_owned()));
    }
    // Tool and prompt names come from the catalog; URIs (templates match many) do not.
    let span_name = match (upstream, &call.op) {
        (Some(_), Op::CallTool(_) | Op::GetPrompt(_)) => format!("{method} {name}"),
        _ => method.to_owned(),
    };
    traces::child(&call.trace, span_name, SpanKind::Server, attrs)
}

/// The name or URI the caller used, and (if `with_args`) the arguments it sent.
fn describe(op: &Op, with_args: bool) -> (String, Option<serde_json::Value>) {
    match op {
        Op::CallTool(p) => (
            p.name.to_string(),
            with_args.then(|| serde_json::Value::Object(p.arguments.clone().unwrap_or_default())),
        ),
        Op::GetPrompt(p) => (
            p.name.clone(),
            p.arguments
                .clone()
                .filter(|_| with_args)
                .map(serde_json::Value::Object),
        ),
        Op::ReadResource(p) => (p.uri.clone(), None),
        Op::Subscribe(p) => (p.uri.clone(), None),
        Op::Unsubscribe(p) => (p.uri.clone(), None),
        Op::Task(t) => (t.route.tool.clone(), None),
        Op::Complete(p) => match &p.r#ref {
            Reference::Prompt(r) => (r.name.clone(), None),
            Reference::Resource(r) => (r.uri.clone(), None),
            _ => (String::new(), None),
        },
    }
}
