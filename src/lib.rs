//! fedgate: a federated gateway proxy for MCP servers.
#![deny(unsafe_code)]
#![deny(rust_2018_idioms)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod approval;
pub mod cli;
pub mod clock;
pub mod config;
pub mod credentials;
pub mod demo;
pub mod envelope;
pub mod error;
pub mod federation;
pub mod flows;
pub mod guard;
pub mod json_digest;
pub mod json_size;
pub mod names;
pub mod pipeline;
pub mod policy;
pub mod router;
pub mod secret;
pub mod server;
pub mod server_catalog;
pub mod stages;
pub mod stores;
pub mod tasks;
pub mod telemetry;
pub mod to_client;
pub mod tool_search;
pub mod upstream;

/// Unit tests build HTTPS clients too: the same provider as the binary (`cli::run`).
#[cfg(test)]
#[ctor::ctor(unsafe)]
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
