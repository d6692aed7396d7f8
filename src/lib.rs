//! fedgate: a federated gateway proxy for MCP servers.
#![deny(unsafe_code)]
#![deny(rust_2018_idioms)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod cli;
pub mod clock;
pub mod config;
pub mod demo;
pub mod envelope;
pub mod error;
pub mod fixture;
pub mod flows;
pub mod json_size;
pub mod names;
pub mod pipeline;
pub mod policy;
pub mod router;
pub mod secret;
pub mod server;
pub mod tasks;
pub mod telemetry;
pub mod upstream;
