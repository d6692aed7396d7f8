//! The tasks extension (`io.modelcontextprotocol/tasks`) through the gateway. This module holds
//! what every side shares: the sealed, caller-bound handle format ([`handle`]) and the request
//! a handle routes ([`request`]). The sides adapt their own types and stay beside them, so
//! the module graph keeps no cycle:
//!
//! - the server face (`server/tasks.rs`): upstream task ids become handles on the way out, and
//!   `tasks/*` with a handle go into the pipeline;
//! - the upstream side (`pipeline`'s `Op::Task`, forwarded like a call to the upstream behind
//!   the handle, authorized against the tool the task came from);
//! - flow runs as tasks (`flows/task.rs`): a run's handle names the flows namespace, and its
//!   status comes from the run log.

pub mod handle;
pub mod request;

pub use handle::{TaskHandles, TaskRoute, UnknownTask};
pub use request::{TaskCall, TaskRequest};
