//! `fedgate-testkit`: servers the tests run and the product does not ship: the conformance
//! fixture (`conformance-fixture --http ADDR`: the tools, prompts and resources the official
//! conformance suite calls, in both protocol eras), the demo upstream with its test modes
//! (`demo-upstream`: the product's flags plus slow or failing starts, crashes, changed
//! definitions, bearer and OAuth gates, filler catalogues), the guardrail hook service
//! (`demo-guardrail`) and fedgate's own handler behind rmcp's transport (`rmcp-edge`). It is a
//! crate of its own so that installing `fedgate` installs none of it.

mod fixture;
mod rmcp_edge;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "fedgate-testkit",
    about = "Test MCP servers for fedgate's tests"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the conformance fixture MCP server (the suite's expected tools, prompts and resources).
    ConformanceFixture(fixture::FixtureArgs),
    /// Run the demo MCP server, with the test modes.
    DemoUpstream(Box<DemoUpstream>),
    /// Run the demo guardrail service (answers the guardrail hook protocol).
    DemoGuardrail(fedgate::demo::guardrail::GuardrailArgs),
    /// Serve a gateway config through rmcp's Streamable HTTP service (the transport tests'
    /// reference).
    RmcpEdge(rmcp_edge::EdgeArgs),
}

#[derive(Debug, clap::Args)]
struct DemoUpstream {
    #[command(flatten)]
    demo: fedgate::demo::DemoArgs,
    #[command(flatten)]
    modes: fedgate::demo::TestModes,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FEDGATE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .try_init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fedgate-testkit: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::ConformanceFixture(args) => {
                fixture::run(args).await.map_err(|e| e.to_string())
            }
            Command::DemoUpstream(a) => fedgate::demo::run(a.demo.clone(), a.modes.clone())
                .await
                .map_err(|e| e.to_string()),
            Command::DemoGuardrail(args) => fedgate::demo::guardrail::run(args)
                .await
                .map_err(|e| e.to_string()),
            Command::RmcpEdge(args) => rmcp_edge::run(args).await.map_err(|e| e.to_string()),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fedgate-testkit: {e}");
            ExitCode::FAILURE
        }
    }
}
