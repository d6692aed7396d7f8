//! Stage-gated tool sets (`[stages.NAME]`, issue 29 part 3 — in progress on this branch): a
//! workflow's state machine decides which tools a session bound to a workspace sees and calls.

pub mod machine;
pub mod store;
