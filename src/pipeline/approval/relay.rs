//! Plans of peer gateways. A call this gateway forwards to a peer may come back held there (a
//! plan of the peer's, or a peer flow parked on one). The caller cannot call the peer's
//! `fedgate__approve`, so the plan it gets names this gateway's: its id becomes
//! `<peer upstream>/<peer's id>` and the peer's tool names become the names exposed here.
//! Approving such an id here forwards the decision to that peer, as this caller (the peer
//! binds the plan to the caller claim it was made for, so no other caller of this gateway can
//! decide it), and the peer's answer comes back the same way. A flow run here that parked on
//! the peer's plan hears of the outcome like of a local plan's.

use crate::pipeline::Route;
use std::{collections::BTreeSet, sync::Arc};

use rmcp::model::{CallToolResult, ContentBlock, ServerResult};
use serde_json::Value;

use super::{
    super::Classified,
    super::{Call, CallError, CallFuture, Exposed, Op, Target, TargetKind, step::CallService},
    Approvals, Decision, decision_arg, plan_id_arg,
};
use crate::{
    approval::events::{PlanEvent, RanError},
    envelope::META_KEY,
    names::APPROVE_TOOL,
    policy::trust::{self, CallClass},
    upstream::{Upstream, pool::Pool},
};

impl Approvals {
    /// A call on its way to its upstream; a peer's answer gets plans this gateway's callers
    /// can decide (see `relay`).
    pub(super) fn pass<S: CallService>(&self, inner: &mut S, call: Call) -> CallFuture {
        let peer = match call.target.as_ref().and_then(|t| t.route()) {
            Some(r) if r.spec.peer => r.upstream.clone(),
            _ => return inner.call(call),
        };
        let (pool, fut) = (self.pool.clone(), inner.call(call));
        Box::pin(async move { Ok(relabel(fut.await?, &peer, &pool)) })
    }

    /// A decision on a peer's plan: forwarded to the peer as this caller; its answer (the held
    /// call's result, a flow's next plan) comes back relabelled, and a run here parked on the
    /// plan hears of it.
    pub(super) fn relay<S: CallService>(
        &self,
        inner: &mut S,
        call: Call,
        up: Arc<Upstream>,
        remote: String,
    ) -> CallFuture {
        let relayed = plan_id_arg(&call);
        let deny = decision_arg(&call) == Decision::Deny;
        let by = call.identity.key();
        let call = decision_for_peer(call, up.clone(), &remote, &relayed);
        let (this, fut) = (self.clone(), inner.call(call));
        Box::pin(async move {
            let result = fut.await.map(|r| relabel(r, &up, &this.pool));
            if let Some(event) = outcome(&relayed, deny, &by, &result) {
                let follow_up = this.plans.events.follow_up(&relayed);
                this.plans.events.send(event);
                if let Some(f) = follow_up
                    && let Some(answer) = f.await
                {
                    return Ok(ServerResult::CallToolResult(answer));
                }
            }
            result
        })
    }
}

/// The peer upstream and the peer's own plan id behind a relayed id, when `id` is one.
pub(super) fn peer_plan(pool: &Pool, id: &str) -> Option<(Arc<Upstream>, String)> {
    let (upstream, remote) = id.split_once('/')?;
    let up = pool.upstream_named(upstream)?;
    (up.spec().peer && !remote.is_empty()).then(|| (up, remote.to_owned()))
}

/// The `fedgate__approve` call that carries this caller's decision to the peer: the peer's own
/// plan id, to the peer's own tool, as a write that is never repeated (the peer may run the
/// held call when it gets it) and may take as long as a long-running call (a flow goes on).
pub(super) fn decision_for_peer(
    mut call: Call,
    up: Arc<Upstream>,
    remote: &str,
    relayed: &str,
) -> Call {
    if let Op::CallTool(p) = &mut call.op {
        let mut args = p.arguments.clone().unwrap_or_default();
        args.insert("plan_id".into(), Value::String(remote.to_owned()));
        p.arguments = Some(args);
    }
    let route = Route::of(up);
    let spec = route.spec.clone();
    call.target = Some(Target {
        owner: route.upstream.shared_name(),
        exposed: Exposed::Tool(format!("{}/{APPROVE_TOOL}", route.upstream.name())),
        kind: TargetKind::Upstream(route),
    });
    call.decided.classify(Classified {
        class: CallClass::Write,
        timeout: Some(trust::timeout(&spec.tier, CallClass::Long)),
        retry_safe: false,
        approval: None,
    });
    call.decided.approve(relayed.to_owned());
    call
}

/// A peer's answer as this gateway's callers must see it: plan ids they can approve here,
/// tool names they can call here.
pub(super) fn relabel(result: ServerResult, up: &Upstream, pool: &Pool) -> ServerResult {
    let ServerResult::CallToolResult(mut r) = result else {
        return result;
    };
    let Some(plan) = r.meta.as_ref().and_then(|m| m.0.get(META_KEY)) else {
        return ServerResult::CallToolResult(r);
    };
    let ids = approve_ids(plan);
    let relabel_value = |v: &mut Value| {
        replace_ids(v, &ids, up.name());
        rename_actions(v, up, pool);
    };
    if let Some(meta) = r.meta.as_mut()
        && let Some(plan) = meta.0.get_mut(META_KEY)
    {
        relabel_value(plan);
    }
    if let Some(s) = r.structured_content.as_mut()
        && s.get("kind").and_then(Value::as_str) == Some("orchestrated_plan")
    {
        relabel_value(s);
    }
    for block in r.content.iter_mut() {
        if let ContentBlock::Text(t) = block {
            match serde_json::from_str::<Value>(&t.text) {
                Ok(mut v) if v.get("kind").and_then(Value::as_str) == Some("orchestrated_plan") => {
                    relabel_value(&mut v);
                    t.text = v.to_string();
                }
                _ => t.text = replaced(&t.text, &ids, up.name()),
            }
        }
    }
    ServerResult::CallToolResult(r)
}

/// The plan ids a plan asks to approve.
fn approve_ids(plan: &Value) -> BTreeSet<String> {
    actions(plan)
        .filter(|a| a["tool"] == APPROVE_TOOL)
        .filter_map(|a| a["args"]["plan_id"].as_str().map(str::to_owned))
        .collect()
}

fn actions(plan: &Value) -> impl Iterator<Item = &Value> {
    ["next_actions", "recovery_actions"]
        .into_iter()
        .filter_map(|k| plan.get(k).and_then(Value::as_array))
        .flatten()
}

fn replaced(text: &str, ids: &BTreeSet<String>, upstream: &str) -> String {
    ids.iter().fold(text.to_owned(), |t, id| {
        t.replace(id.as_str(), &format!("{upstream}/{id}"))
    })
}

/// Every string of `v` with the peer's plan ids in their relayed form (once per string).
fn replace_ids(v: &mut Value, ids: &BTreeSet<String>, upstream: &str) {
    match v {
        Value::String(s) => *s = replaced(s, ids, upstream),
        Value::Array(a) => a.iter_mut().for_each(|v| replace_ids(v, ids, upstream)),
        Value::Object(o) => o.values_mut().for_each(|v| replace_ids(v, ids, upstream)),
        _ => {}
    }
}

/// Actions naming the peer's tools name them as exposed here.
fn rename_actions(plan: &mut Value, up: &Upstream, pool: &Pool) {
    let lists = up.lists();
    let prefix = up.spec().prefix;
    for key in ["next_actions", "recovery_actions"] {
        let Some(list) = plan.get_mut(key).and_then(Value::as_array_mut) else {
            continue;
        };
        for action in list {
            let Some(tool) = action.get("tool").and_then(Value::as_str) else {
                continue;
            };
            if tool != APPROVE_TOOL && lists.tool(tool).is_some() {
                let (exposed, _) = pool.naming().expose(up.name(), prefix, tool);
                action["tool"] = Value::String(exposed);
            }
        }
    }
}

/// What the peer's answer to a relayed decision means for whoever waits on the plan here (a
/// flow run parked on it). `None` when it settles nothing: the peer refused this decision
/// (another caller's plan, a reviewer still to decide, a race), and the plan stays as it was.
pub(super) fn outcome(
    relayed: &str,
    deny: bool,
    by: &str,
    result: &Result<ServerResult, CallError>,
) -> Option<PlanEvent> {
    let id = relayed.to_owned();
    let r = match result {
        Ok(ServerResult::CallToolResult(r)) => r,
        Ok(other) => {
            return Some(PlanEvent::Ran {
                id,
                result: Ok(serde_json::to_value(other).unwrap_or(Value::Null)),
            });
        }
        // The peer did not answer: the decision may or may not have reached it.
        Err(_) => return None,
    };
    match refusal_code(r) {
        Some(code) if ENDS_PLAN.contains(&code.as_str()) => Some(PlanEvent::Ran {
            id,
            result: Err(RanError {
                message: first_text(r),
                retry: crate::error::Retry::NEVER,
                plan: r.meta.as_ref().and_then(|m| m.0.get(META_KEY)).cloned(),
            }),
        }),
        Some(_) => None,
        None if deny => Some(PlanEvent::Denied {
            id,
            by: by.to_owned(),
        }),
        None => Some(PlanEvent::Ran {
            id,
            result: Ok(serde_json::to_value(r).unwrap_or(Value::Null)),
        }),
    }
}

/// Refusals of the peer that end the plan for good.
const ENDS_PLAN: [&str; 4] = [
    "plan_expired",
    "plan_denied",
    "plan_invalidated",
    "plan_superseded",
];

/// The code of the peer's refusal of a decision (a plan error, not the held tool's own).
fn refusal_code(r: &CallToolResult) -> Option<String> {
    if r.is_error != Some(true) {
        return None;
    }
    let plan = r.meta.as_ref()?.0.get(META_KEY)?;
    let code = plan["errors"][0]["code"].as_str()?;
    let decision = code.starts_with("plan_")
        || matches!(
            code,
            "not_approver" | "awaiting_approval" | "too_many_plans"
        );
    decision.then(|| code.to_owned())
}

fn first_text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_default()
}
