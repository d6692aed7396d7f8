//! `flows__<id>`: each loaded flow as one of the gateway's own tools, with the flow's input
//! schema and output contract. A call starts a run and waits for it, with a progress
//! notification per finished node; cancelling the call cancels the run.

use std::sync::Arc;

use rmcp::model::{
    CreateTaskResult, GetTaskResult, ProgressNotificationParam, ServerResult, TaskAckResult, Tool,
    ToolAnnotations,
};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{Engine, StartError};
use crate::{
    config::flows::{FLOWS_NAMESPACE, FlowDef},
    pipeline::{Call, CallError, CallFuture, Op, OwnTool, TaskCall, TaskRequest, TypedStack},
    policy::trust::CallClass,
};

/// The tool of one flow.
#[derive(Debug)]
pub struct FlowTool {
    engine: Arc<Engine>,
    flow: Arc<FlowDef>,
    name: String,
}

/// The tools of every loaded flow.
pub fn tools(engine: &Arc<Engine>, naming: &crate::names::Naming) -> Vec<Arc<dyn OwnTool>> {
    engine
        .flows()
        .into_iter()
        .map(|flow| {
            Arc::new(FlowTool {
                name: tool_name(&flow.id, naming),
                engine: engine.clone(),
                flow,
            }) as Arc<dyn OwnTool>
        })
        .collect()
}

/// `flows<sep><id>`, in its portable form when the rule asks for one.
pub fn tool_name(id: &str, naming: &crate::names::Naming) -> String {
    naming
        .expose(FLOWS_NAMESPACE, crate::names::PrefixMode::Always, id)
        .0
}

impl OwnTool for FlowTool {
    fn definition(&self) -> Tool {
        let schema = match &self.flow.inputs {
            Value::Object(m) => m.clone(),
            _ => Default::default(),
        };
        let mut tool = Tool::new(
            self.name.clone(),
            if self.flow.description.is_empty() {
                format!("Run the flow `{}`.", self.flow.id)
            } else {
                self.flow.description.clone()
            },
            Arc::new(schema),
        );
        if let Some(Value::Object(out)) = &self.flow.output_schema {
            tool.output_schema = Some(Arc::new(out.clone()));
        }
        tool.annotations = Some(ToolAnnotations::new().read_only(false));
        if self.flow.export {
            crate::federation::export::mark(&mut tool);
        }
        tool
    }

    /// A flow may write (its nodes are classified one by one when they run).
    fn class(&self) -> CallClass {
        CallClass::Long
    }

    fn call(&self, call: Call) -> CallFuture {
        let (engine, flow) = (self.engine.clone(), self.flow.clone());
        let flow_id = flow.id.clone();
        let name = self.name.clone();
        Box::pin(async move {
            let p = match &call.op {
                Op::CallTool(p) => p,
                Op::Task(t) => return task_request(&engine, t, &call).await,
                _ => {
                    return Err(CallError::Internal {
                        detail: "a flow tool got a request that is not tools/call".into(),
                    });
                }
            };
            let inputs = Value::Object(p.arguments.clone().unwrap_or_default());
            // A caller of the stateless era that declared the tasks extension gets the run as
            // a task, once it is recorded; it polls the run log from then on.
            let as_task = call.downstream.as_ref().is_some_and(|d| {
                d.modern && d.capabilities.as_ref().is_some_and(|c| c.supports_tasks())
            });
            let (progress, mut finished) = mpsc::unbounded_channel();
            let progress = (!as_task).then_some(progress);
            let mut hop = crate::federation::outbound::carried(&call.meta);
            // Node calls are recorded under the flow call's correlation id.
            hop.insert(
                crate::federation::hops::CORRELATION_KEY.into(),
                Value::String(call.correlation_id.clone()),
            );
            let started = engine
                .start(
                    &flow_id,
                    inputs,
                    (call.identity.clone(), call.workspace.clone()),
                    call.depth,
                    progress,
                    hop,
                )
                .await
                .map_err(|e| match e {
                    StartError::UnknownFlow(name) => CallError::UnknownTool {
                        name,
                        closest: Vec::new(),
                        recover: Vec::new(),
                        note: None,
                    },
                    StartError::Elsewhere(detail) => CallError::FlowsElsewhere { detail },
                    StartError::Log(e) => run_failed("", e),
                    other => CallError::Internal {
                        detail: other.to_string(),
                    },
                })?;
            let (run_id, mut done) = (started.run_id, started.done);
            if as_task {
                let handle = engine.task_handle(&call.identity.key(), &name, &run_id);
                let task = engine
                    .task(&run_id, &call.correlation_id)
                    .await
                    .map_err(|e| run_failed(&run_id, e))?;
                let mut task = task.task;
                task.task_id = handle;
                return Ok(ServerResult::CreateTaskResult(CreateTaskResult::new(task)));
            }
            let cancelled = call.ct.clone();
            let mut cancel_sent = false;
            // The call may also end by being dropped (its caller cancelled it): so does the run.
            let mut guard = CancelOnDrop {
                engine: engine.clone(),
                run_id: run_id.clone(),
                armed: true,
            };
            // A run that parks on an approval answers at once with the plan to approve; it
            // goes on when the plan is decided.
            let parked = engine.settle(&run_id, 0);
            tokio::pin!(parked);
            let mut watching = true;
            let state = loop {
                tokio::select! {
                    end = &mut done => break end,
                    settled = &mut parked, if watching => {
                        watching = false;
                        if let Ok((state, true)) = settled {
                            guard.armed = false;
                            return Ok(ServerResult::CallToolResult(super::approval::answer(
                                &flow, &run_id, &state, &call.correlation_id,
                            )));
                        }
                    }
                    Some(n) = finished.recv() => notify_progress(&call, n).await,
                    _ = cancelled.cancelled(), if !cancel_sent => {
                        cancel_sent = true;
                        engine.cancel(&run_id);
                    }
                }
            };
            guard.armed = false;
            // What finished just before the end goes out before the answer.
            while let Ok(n) = finished.try_recv() {
                notify_progress(&call, n).await;
            }
            let state = state
                .map_err(|e| run_failed(&run_id, e.into()))?
                .map_err(|e| run_failed(&run_id, e))?;
            Ok(ServerResult::CallToolResult(super::report::result(
                &flow,
                &run_id,
                &state,
                &call.correlation_id,
            )))
        })
    }
}

/// `tasks/get` and `tasks/cancel` of a run (the handle was opened for this caller, and authz
/// checked the flow's tool); `tasks/update` has nothing to answer until a run asks for input.
async fn task_request(
    engine: &Engine,
    t: &TaskCall,
    call: &Call,
) -> Result<ServerResult, CallError> {
    let correlation_id = call.correlation_id.as_str();
    let run_id = &t.route.task_id;
    match &t.request {
        TaskRequest::Get => {
            let mut task = engine
                .task(run_id, correlation_id)
                .await
                .map_err(|_| CallError::UnknownTask)?;
            task.task.task_id = String::new();
            Ok(ServerResult::GetTaskResult(GetTaskResult::new(task)))
        }
        TaskRequest::Cancel => {
            engine
                .cancel_run(run_id)
                .await
                .map_err(|_| CallError::UnknownTask)?;
            Ok(ServerResult::TaskAckResult(TaskAckResult::new()))
        }
        TaskRequest::Update(responses) => {
            let (_, events) = engine
                .load(run_id)
                .await
                .map_err(|_| CallError::UnknownTask)?;
            let state = super::events::RunState::fold(&events);
            let stack = engine.stack().ok_or_else(|| CallError::Internal {
                detail: "the flow engine has no call stack".into(),
            })?;
            let mut answered = 0;
            for (key, answer) in responses {
                let waits = state.nodes.values().any(|n| {
                    n.status == super::events::NodeStatus::AwaitingApproval
                        && n.plan.as_ref().and_then(super::node::plan_id).as_deref() == Some(key)
                });
                if !waits {
                    continue;
                }
                decide(stack.clone(), call, key, crate::pipeline::approves(answer));
                answered += 1;
            }
            if answered == 0 {
                return Err(CallError::BadRequestState {
                    why: "no input of this task waits for these responses".into(),
                });
            }
            Ok(ServerResult::TaskAckResult(TaskAckResult::new()))
        }
    }
}

/// Approves (or denies) plan `plan_id` as the task's caller, on its own: the task's caller
/// polls for the outcome.
fn decide(stack: TypedStack, call: &Call, plan_id: &str, approve: bool) {
    let (identity, depth, plan_id) = (call.identity.clone(), call.depth, plan_id.to_owned());
    let hop = crate::federation::outbound::carried(&call.meta);
    tokio::spawn(async move {
        if let Err(e) =
            super::approval::decide(stack, identity, depth, hop, &plan_id, approve).await
        {
            tracing::warn!("flow approval by tasks/update: {e}");
        }
    });
}

/// Cancels a synchronous call's run when the call is dropped before the run ended.
struct CancelOnDrop {
    engine: Arc<Engine>,
    run_id: String,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.engine.cancel(&self.run_id);
        }
    }
}

/// One finished node, as a progress notification to a caller that asked for progress.
async fn notify_progress(call: &Call, n: super::driver::NodeDone) {
    if let (Some(d), Some(token)) = (&call.downstream, &call.progress_token) {
        let p = ProgressNotificationParam::new(token.clone(), n.done as f64)
            .with_total(n.total as f64)
            .with_message(format!(
                "node `{}` {}",
                n.node,
                super::driver::status_label(n.status)
            ));
        let _ = d.client.progress(p).await;
    }
}

/// A run that failed for a reason of the gateway's: a run log that does not answer is a
/// store the caller may retry against; anything else is internal.
fn run_failed(run_id: &str, e: crate::flows::error::RunError) -> CallError {
    match e {
        crate::flows::error::RunError::Log(e) => {
            tracing::warn!(run = run_id, "flow run log: {e}");
            CallError::StoreUnavailable {
                feature: "flow runs",
            }
        }
        other => CallError::Internal {
            detail: format!("flow run {run_id}: {other}"),
        },
    }
}
