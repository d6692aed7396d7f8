//! fedgate's integration tests, one module per area, linked into one test binary (so the
//! crate and its dependencies are linked once, not once per file). Each module drives real
//! fedgate processes, real upstream MCP servers and real clients; `common` holds what they
//! share.

mod common;

mod admin;
mod aggregation;
mod approval_lifecycle;
mod approvals;
mod audit;
mod breaker;
mod catalog;
mod cluster;
mod config_cli;
mod conformance;
mod connect;
mod console;
mod console_runner;
mod deploy;
mod envelope;
mod envelope_example;
mod eras;
mod faults;
mod federation;
mod flows;
mod flows_example;
mod guardrails;
mod layer_order;
mod limits;
mod literal_agent;
mod memory;
mod metrics;
mod mtls;
mod notifications;
mod per_user;
mod per_user_oauth;
mod policy;
mod reload;
mod replicas;
mod resilience;
mod resume;
mod rmcp_matrix;
mod sandbox;
mod sdk_clients;
mod sessions;
mod stages;
mod stateless_wire;
mod tasks;
mod third_party;
mod tiers;
mod token_injection;
mod traces;
mod trust_boundary;
mod upstream_health;
mod upstream_tls;
mod views_search;
