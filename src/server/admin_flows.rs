//! The admin API's flow endpoints: the flows that loaded (and the problems of those that did
//! not), runs and their events, and starting, cancelling, replaying and re-running runs.
//! Runs started here run as the operator (`admin`, full access).

use crate::flows::error::RunError;
use crate::server::api_error::ApiError;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use serde_json::{Value, json};

use super::{http::Body, responses::json};
use crate::{
    flows::{Engine, events::RunState, tool::tool_name},
    policy::identity::{Identity, IdentityKind},
    server::parts::AdminParts,
};

/// Longest a `?wait_ms=` may hold a request.
const MAX_WAIT: Duration = Duration::from_secs(300);
/// Runs listed unless `?limit=` says otherwise.
const DEFAULT_LIMIT: usize = 50;

/// The flow endpoints; `None` for any other path.
pub(super) async fn route(
    admin: &AdminParts,
    method: &Method,
    parts: &[&str],
    query: &str,
    body: &Bytes,
) -> Option<Response<Body>> {
    let ["admin", "flows", rest @ ..] = parts else {
        return None;
    };
    let Some(engine) = admin.flows.clone() else {
        return Some(ApiError::not_found("no flows: set [flows] dir in the config").response());
    };
    let number = |key: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.parse::<u64>().ok())
    };
    Some(match (method, rest) {
        (&Method::GET, []) => list_flows(admin, &engine),
        (&Method::GET, ["runs"]) => {
            let limit = number("limit").map_or(DEFAULT_LIMIT, |n| n as usize);
            result(list_runs(&engine, limit).await)
        }
        (&Method::GET, ["runs", id]) if query.split('&').any(|kv| kv == "until=parked") => {
            // Until the run has finished or waits for someone (with more than `after` events).
            let wait = Duration::from_millis(number("wait_ms").unwrap_or(0)).min(MAX_WAIT);
            let after = number("after").unwrap_or(0);
            let parked = engine
                .wait_parked(id, after, wait)
                .await
                .is_ok_and(|(_, parked)| parked);
            result(engine.load(id).await.map(|(record, events)| {
                let state = RunState::fold(&events);
                let waiting = waiting_plans(&state);
                let graph = graph(&engine, &record.flow);
                json!({"run": record, "state": state, "events": events, "graph": graph,
                       "parked": parked, "waiting": waiting})
            }))
        }
        (&Method::GET, ["runs", id]) => {
            let wait = Duration::from_millis(number("wait_ms").unwrap_or(0)).min(MAX_WAIT);
            result(
                engine
                    .wait_finished(id, wait)
                    .await
                    .map(|(record, events, state)| {
                        let graph = graph(&engine, &record.flow);
                        json!({"run": record, "state": state, "events": events, "graph": graph})
                    }),
            )
        }
        (&Method::POST, [flow, "runs"]) => {
            let inputs = match json_body(body) {
                Ok(v) => v.get("inputs").cloned().unwrap_or_else(|| json!({})),
                Err(r) => return Some(*r),
            };
            match engine
                .start(
                    flow,
                    inputs,
                    (operator(), None),
                    0,
                    None,
                    Default::default(),
                )
                .await
            {
                Ok(started) => json(StatusCode::ACCEPTED, &json!({"run_id": started.run_id})),
                Err(e) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()).response(),
            }
        }
        (&Method::POST, ["runs", id, "cancel"]) => result(
            engine
                .cancel_run(id)
                .await
                .map(|_| json!({"run_id": id, "cancel": "requested"})),
        ),
        (&Method::POST, ["runs", id, "replay"]) => result(
            engine
                .replay(id, query.split('&').any(|kv| kv == "allow_writes=true"))
                .await
                .map(|r| serde_json::to_value(r).unwrap_or(Value::Null)),
        ),
        (&Method::POST, ["runs", id, "rerun", node]) => result(
            engine
                .rerun(id, node)
                .await
                .map(|_| json!({"run_id": id, "rerun": node})),
        ),
        (&Method::POST, ["runs", id, "nodes", node, verb @ ("rerun" | "skip")]) => result(
            engine
                .decide(id, node, *verb == "rerun")
                .await
                .map(|_| json!({"run_id": id, "node": node, "decision": verb})),
        ),
        _ => ApiError::unknown_endpoint(
            "unknown flows endpoint",
            &[
                "GET /admin/flows",
                "GET /admin/flows/runs?limit=N",
                "GET /admin/flows/runs/RUN?wait_ms=N",
                "POST /admin/flows/FLOW/runs {\"inputs\": {…}}",
                "POST /admin/flows/runs/RUN/cancel",
                "POST /admin/flows/runs/RUN/replay[?allow_writes=true]",
                "POST /admin/flows/runs/RUN/rerun/NODE",
                "POST /admin/flows/runs/RUN/nodes/NODE/rerun",
                "POST /admin/flows/runs/RUN/nodes/NODE/skip",
            ],
        )
        .response(),
    })
}

/// The nodes of a run that wait for approval, with their plans' ids and what they hold.
fn waiting_plans(state: &RunState) -> Vec<Value> {
    state
        .nodes
        .iter()
        .filter(|(_, n)| n.status == crate::flows::events::NodeStatus::AwaitingApproval)
        .filter_map(|(node, n)| {
            let plan = n.plan.as_ref()?;
            Some(json!({
                "node": node,
                "plan_id": crate::flows::node::plan_id(plan)?,
                "instruction": plan["instruction"],
                "safety": plan["safety"],
            }))
        })
        .collect()
}

/// Who the admin API acts as: runs it starts are this identity's.
pub(crate) fn operator() -> Identity {
    Identity::unrestricted("admin", IdentityKind::Local)
}

fn result(r: Result<Value, RunError>) -> Response<Body> {
    let e = match r {
        Ok(v) => return json(StatusCode::OK, &v),
        Err(e) => e,
    };
    let status = match &e {
        RunError::NoRun(_) | RunError::FlowNotLoaded(_) | RunError::NoNode { .. } => {
            StatusCode::NOT_FOUND
        }
        RunError::Unfinished(..)
        | RunError::NotDeciding { .. }
        | RunError::NotDriven(_)
        | RunError::Ended(_)
        | RunError::Driven
        | RunError::LeftHere => StatusCode::CONFLICT,
        RunError::Log(_) | RunError::Stopped(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    json(status, &json!({"error": e.to_string()}))
}

/// An admin request's JSON body (`{}` when empty); a 400 answer for one that is not JSON.
pub(super) fn json_body(bytes: &Bytes) -> Result<Value, Box<Response<Body>>> {
    if bytes.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| Box::new(ApiError::bad_request(format!("body is not JSON: {e}")).response()))
}

fn list_flows(admin: &AdminParts, engine: &Engine) -> Response<Body> {
    let naming = admin.pool.naming();
    let flows: Vec<Value> = engine
        .flows()
        .iter()
        .map(|f| {
            json!({"id": f.id, "tool": tool_name(&f.id, naming), "description": f.description,
                   "nodes": f.nodes.len(), "file": f.file, "export": f.export, "digest": f.digest})
        })
        .collect();
    let problems: Vec<String> = engine.problems().iter().map(|d| d.to_string()).collect();
    json(
        StatusCode::OK,
        &json!({"flows": flows, "problems": problems}),
    )
}

async fn list_runs(engine: &Engine, limit: usize) -> Result<Value, RunError> {
    let runs = engine.runs(limit).await?;
    Ok(Value::Array(
        runs.into_iter()
            .map(|(r, state): (_, RunState)| {
                json!({"run_id": r.run_id, "flow": r.flow, "created_ms": r.created_ms,
                       "status": state.finished.map_or("running", |s| s.as_str()),
                       "replay_of": r.replay_of})
            })
            .collect(),
    ))
}

/// The nodes of flow `id` and the edges between them, as the console draws a run (the current
/// definition; `null` when the flow no longer loads).
fn graph(engine: &Engine, id: &str) -> Value {
    let Some(flow) = engine.flow(id) else {
        return Value::Null;
    };
    let nodes: Vec<Value> = flow
        .nodes
        .iter()
        .map(|n| json!({"id": n.id, "tool": n.tool, "depends_on": n.depends_on}))
        .collect();
    json!({"nodes": nodes})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_answer_by_kind() {
        let status = |e: RunError| result(Err(e)).status();
        assert_eq!(status(RunError::NoRun("r".into())), StatusCode::NOT_FOUND);
        assert_eq!(
            status(RunError::NoNode {
                flow: "f".into(),
                node: "n".into()
            }),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status(RunError::NotDeciding {
                run: "r".into(),
                node: "n".into()
            }),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status(RunError::Unfinished("r".into(), "later")),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status(RunError::Log(crate::flows::log::LogError("down".into()))),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(result(Ok(json!({}))).status(), StatusCode::OK);
    }
}
