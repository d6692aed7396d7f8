//! Call policies (F5–F10): who is calling and what they may do. Each policy is its own module;
//! the order in which they run is written down once, in `pipeline::build`.

pub mod arguments;
pub mod authz;
pub mod breaker;
pub mod identity;
pub mod pinning;
pub mod rate_limit;
pub mod retry;
pub mod token;
pub mod tool_breakers;
pub mod trust;
pub mod view;
pub mod workflow;
