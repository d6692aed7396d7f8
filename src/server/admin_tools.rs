//! The console's tool runner: the tools an identity sees, and a call made through the whole
//! pipeline as that identity — its result, its plan and its call record, as a client and the
//! audit log would see them.
//!
//! `GET /admin/tools/identities`, `GET /admin/tools?as=NAME`, `POST /admin/tools/call`.

use crate::server::api_error::ApiError;
use http::{Method, Response, StatusCode};
use rmcp::model::{CallToolRequestParams, ServerResult};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{http::Body, responses::json};
use crate::{
    pipeline::{self, Call, Op},
    policy::identity::Identity,
    server::parts::AdminParts,
};

/// The name the operator's own identity has in the runner.
const OPERATOR: &str = "operator";

pub(super) async fn route(
    admin: &AdminParts,
    method: &Method,
    parts: &[&str],
    query: &str,
    body: &bytes::Bytes,
) -> Option<Response<Body>> {
    let ["admin", "tools", rest @ ..] = parts else {
        return None;
    };
    Some(match (method, rest) {
        (&Method::GET, ["identities"]) => {
            let list: Vec<Value> = identities(admin)
                .iter()
                .map(
                    |i| json!({"name": i.name, "kind": i.kind.as_str(), "roles": i.access.roles()}),
                )
                .collect();
            json(StatusCode::OK, &json!({"identities": list}))
        }
        (&Method::GET, []) => {
            let name = form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == "as")
                .map(|(_, v)| v.into_owned())
                .unwrap_or_else(|| OPERATOR.to_owned());
            match identity(admin, &name) {
                Some(id) => json(StatusCode::OK, &visible(admin, &id)),
                None => unknown(&name),
            }
        }
        (&Method::POST, ["call"]) => match super::admin_flows::json_body(body) {
            Ok(v) => call(admin, &v).await,
            Err(bad) => *bad,
        },
        _ => ApiError::unknown_endpoint(
            "unknown endpoint",
            &[
                "GET /admin/tools/identities",
                "GET /admin/tools?as=NAME",
                "POST /admin/tools/call",
            ],
        )
        .response(),
    })
}

/// The operator (unrestricted, as `fedgate call`) and every identity the config names.
fn identities(admin: &AdminParts) -> Vec<Identity> {
    let mut out = vec![Identity {
        name: OPERATOR.into(),
        ..super::admin_flows::operator()
    }];
    out.extend(admin.auth.load().configured());
    out
}

fn identity(admin: &AdminParts, name: &str) -> Option<Identity> {
    identities(admin).into_iter().find(|i| i.name == name)
}

fn unknown(name: &str) -> Response<Body> {
    ApiError::not_found(format!(
        "no configured identity `{}` (GET /admin/tools/identities lists them)",
        crate::names::shown(name)
    ))
    .response()
}

/// The tools `id` would see in `tools/list`, with their schemas and what the tier does.
fn visible(admin: &AdminParts, id: &Identity) -> Value {
    let pool = &admin.pool;
    let catalog = pool.catalog();
    let tools: Vec<Value> = catalog
        .tools
        .iter()
        .filter(|t| crate::pipeline::visible(pool, &id.access, &t.name))
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "input_schema": t.input_schema,
                "access": pipeline::verdict(pool, &t.name).unwrap_or("gateway"),
            })
        })
        .collect();
    json!({"identity": id.name, "tools": tools})
}

/// Runs one tool call through the client stack (authorization, tiers, limits, approvals,
/// envelope, audit) as the chosen identity.
async fn call(admin: &AdminParts, v: &Value) -> Response<Body> {
    let bad = |why: String| ApiError::bad_request(why).response();
    let Some(tool) = v["tool"].as_str() else {
        return bad("`tool` (a name from GET /admin/tools) is required".into());
    };
    let name = v["as"].as_str().unwrap_or(OPERATOR);
    let Some(identity) = identity(admin, name) else {
        return unknown(name);
    };
    let arguments = match &v["arguments"] {
        Value::Object(m) => m.clone(),
        Value::Null => Default::default(),
        _ => return bad("`arguments` must be a JSON object".into()),
    };
    let before = admin
        .feed
        .as_ref()
        .and_then(|f| f.recent(1, |_| true).first().map(|e| e.seq))
        .unwrap_or(0);
    let call = Call::without_session(
        Op::CallTool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)),
        identity.clone(),
        0,
    );
    let correlation = call.correlation_id.clone();
    let answer = admin.stack.clone().oneshot(call).await;
    let (outcome, result, plan) = match answer {
        Ok(ServerResult::CallToolResult(r)) => {
            let plan = r
                .meta
                .as_ref()
                .and_then(|m| m.0.get(crate::envelope::META_KEY))
                .cloned();
            let outcome = if r.is_error == Some(true) {
                "is_error"
            } else {
                "ok"
            };
            (outcome, serde_json::to_value(&r).unwrap_or_default(), plan)
        }
        Ok(other) => ("ok", serde_json::to_value(&other).unwrap_or_default(), None),
        Err(e) => {
            let plan = e
                .data
                .as_ref()
                .and_then(|d| d.get(crate::envelope::META_KEY))
                .cloned();
            ("error", serde_json::to_value(&e).unwrap_or_default(), plan)
        }
    };
    // Its record in the call feed: by correlation id, else (traced calls take the trace id)
    // the first record of this identity and tool since the call began.
    let record = admin.feed.as_ref().and_then(|f| {
        f.recent(crate::telemetry::call_feed::RECENT_CALLS, |e| {
            e.seq > before
        })
        .into_iter()
        .rev()
        .find(|e| {
            e.record.correlation_id == correlation
                || (e.record.identity == identity.name && e.record.name == tool)
        })
    });
    json(
        StatusCode::OK,
        &json!({
            "identity": identity.name,
            "tool": tool,
            "outcome": outcome,
            "result": result,
            "plan": plan,
            "record": record.map(|r| serde_json::to_value(&*r).unwrap_or_default()),
        }),
    )
}
