//! A `tasks/*` request on its way through the pipeline to the upstream (or flow run) behind
//! its handle.

use super::TaskRoute;

/// A `tasks/*` request, its handle already opened for the caller.
#[derive(Debug, Clone)]
pub struct TaskCall {
    pub route: TaskRoute,
    pub request: TaskRequest,
}

#[derive(Debug, Clone)]
pub enum TaskRequest {
    Get,
    Update(rmcp::model::InputResponses),
    Cancel,
}

impl TaskRequest {
    /// The JSON-RPC method of the request.
    pub fn method(&self) -> &'static str {
        match self {
            TaskRequest::Get => "tasks/get",
            TaskRequest::Update(_) => "tasks/update",
            TaskRequest::Cancel => "tasks/cancel",
        }
    }
}
