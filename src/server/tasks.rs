//! The tasks extension on fedgate's server face: upstream task ids become caller-bound handles
//! on the way out, and `tasks/*` with a handle go back to the upstream running the task.
//!
//! rmcp gates `tasks/*` before these run: `-32601` while no ready upstream offers the extension,
//! `-32021` (with `requiredCapabilities`) for a caller that did not declare it in the request.

use rmcp::{
    ErrorData as McpError,
    model::{CreateTaskResult, GetTaskResult, ServerResult},
};

use super::{mcp::Gateway, request_of::Incoming, unrouted::unexpected};
use crate::{
    pipeline::{CallError, Op, TaskCall, TaskRequest, to_wire},
    router::catalog::Owner,
    tasks::TaskRoute,
};

impl Gateway {
    /// Whether some ready upstream offers the tasks extension.
    pub(super) fn offers_tasks(&self) -> bool {
        let flows = self
            .parts
            .flows
            .as_ref()
            .is_some_and(|f| !f.flows().is_empty());
        flows
            || self.parts.pool.upstreams().iter().any(|u| {
                u.connection().is_some_and(|c| {
                    c.peer
                        .peer_info()
                        .is_some_and(|i| i.capabilities.supports_tasks())
                })
            })
    }

    /// An upstream's new task, as the caller sees it: its id replaced by a handle naming the
    /// upstream behind the exposed `tool`, bound to the caller.
    pub(super) fn expose_task(
        &self,
        mut r: CreateTaskResult,
        tool: &str,
        req: &Incoming,
    ) -> Result<CreateTaskResult, McpError> {
        let catalog = self.parts.pool.catalog();
        // The gateway's own tools (flows) hand out their own handles.
        if catalog
            .tool(tool)
            .is_some_and(|r| r.owner == Owner::Gateway)
        {
            return Ok(r);
        }
        let upstream = catalog
            .tool(tool)
            .and_then(|route| match route.owner {
                Owner::Member(i) => catalog.upstream(i),
                Owner::Gateway => None,
            })
            .map(|u| u.name().to_owned())
            .ok_or_else(|| {
                super::wire_error::WireError::Internal {
                    message: format!(
                        "the upstream behind `{}` returned a task but left the catalog",
                        crate::names::shown(tool)
                    ),
                }
                .to_mcp()
            })?;
        let route = TaskRoute {
            upstream,
            tool: tool.to_owned(),
            task_id: std::mem::take(&mut r.task.task_id),
        };
        r.task.task_id = self.parts.tasks.seal(&self.identity(req).key(), &route);
        Ok(r)
    }

    /// `tasks/*` for `handle`: opened for this caller, then routed through the stack (which
    /// authorizes the tool the task came from, counts, limits and forwards it).
    async fn task_request(
        &self,
        handle: &str,
        request: TaskRequest,
        req: &Incoming,
    ) -> Result<ServerResult, McpError> {
        let route = self
            .parts
            .tasks
            .open(&self.identity(req).key(), handle)
            .map_err(|_| to_wire(&CallError::UnknownTask, true))?;
        self.run(Op::Task(TaskCall { route, request }), req).await
    }

    pub(super) async fn get_task_for(
        &self,
        handle: String,
        req: &Incoming,
    ) -> Result<GetTaskResult, McpError> {
        match self.task_request(&handle, TaskRequest::Get, req).await? {
            ServerResult::GetTaskResult(mut r) => {
                r.task.task.task_id = handle;
                Ok(r)
            }
            other => Err(unexpected("tasks/get", &other)),
        }
    }

    pub(super) async fn ack_task_for(
        &self,
        handle: String,
        request: TaskRequest,
        req: &Incoming,
    ) -> Result<(), McpError> {
        let method = request.method();
        match self.task_request(&handle, request, req).await? {
            ServerResult::TaskAckResult(_) | ServerResult::EmptyResult(_) => Ok(()),
            other => Err(unexpected(method, &other)),
        }
    }
}
