//! The downstream face: the MCP handler, the HTTP listener, stdio, and session bookkeeping.

mod account_page;
pub mod admin;
mod admin_credentials;
mod admin_flows;
mod admin_stages;
mod admin_tools;
mod admin_views;
mod api_error;
mod body;
mod connect_page;
mod console;
pub mod core;
pub mod error;
mod health;
pub mod http;
mod listen;
mod listener;
pub mod mcp;
pub mod parts;
mod priming;
#[cfg(test)]
mod protocol_tests;
pub mod reload;
pub mod replay;
mod request_of;
mod responses;
mod rmcp_handler;
pub mod sealed_sessions;
mod session_limit;
pub mod sessions;
pub mod stdio;
mod tasks;
mod tracked;
mod transport;
mod unrouted;
mod wire_error;
