//! `fedgate-testkit`: MCP servers the tests run and the product does not ship. Today the
//! conformance fixture (`conformance-fixture --http ADDR`): the tools, prompts and resources
//! the official conformance suite calls, in both protocol eras. It is a binary of its own so
//! that `fedgate` carries none of it.

mod fixture;

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
            Command::ConformanceFixture(args) => fixture::run(args).await,
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
