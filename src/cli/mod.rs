//! The command line: `serve`, `stdio`, `check`, `tools`, `call`, `flows`, `plans`,
//! `credentials`, `import`, `connect`, `catalog`, `add`, and the demo upstream.

mod error;
pub use error::CliError;
mod add;
mod admin_api;
mod check;
mod connect;
mod credentials;
mod flows;
mod import;
mod inspect;
mod plans;
mod replace_file;
pub mod serve;
mod startup_pages;

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

/// Default config file, looked up in the working directory.
pub const DEFAULT_CONFIG: &str = "gateway.toml";

#[derive(Debug, Parser)]
#[command(
    name = "fedgate",
    version,
    about = "Federated gateway proxy for MCP servers"
)]
struct Cli {
    /// Runtime worker threads (default: half the CPUs, at least 1).
    #[arg(long, global = true, env = "FEDGATE_WORKER_THREADS")]
    worker_threads: Option<std::num::NonZeroUsize>,
    /// Log format on stderr.
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the aggregated upstreams over Streamable HTTP at /mcp.
    Serve {
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Listen address, overriding `gateway.listen` (e.g. 127.0.0.1:0 for a free port).
        #[arg(long)]
        listen: Option<String>,
    },
    /// Serve the aggregated upstreams to one client over stdin/stdout.
    Stdio {
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Serve through this view (`[views.NAME]`) only.
        #[arg(long)]
        view: Option<String>,
    },
    /// Validate a config file; prints every problem as file:line and exits non-zero.
    Check {
        #[arg(default_value = DEFAULT_CONFIG)]
        file: PathBuf,
    },
    /// Start the upstreams and print the aggregated tools.
    Tools {
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Start the upstreams and call one tool by its namespaced name.
    Call {
        tool: String,
        /// Arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Call as the identity of this API key or JWT (checked like `Authorization: Bearer`);
        /// without it the call runs as the local operator with full access.
        #[arg(long, env = "FEDGATE_BEARER", hide_env_values = true)]
        bearer: Option<String>,
    },
    /// Flows: list, run, show, replay, rerun, cancel, decide.
    Flows {
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        #[command(subcommand)]
        command: flows::FlowsCommand,
    },
    /// Plans waiting for approval: list, approve, deny (through the admin API).
    Plans {
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        #[command(subcommand)]
        command: plans::PlansCommand,
    },
    /// Connected per-user accounts: list, revoke (through the admin API).
    Credentials {
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        #[command(subcommand)]
        command: credentials::CredentialsCommand,
    },
    /// Convert an `mcpServers` JSON file (Claude Desktop, Cursor, VS Code) to gateway.toml.
    Import { file: PathBuf },
    /// Popular MCP servers fedgate knows: name, runner, tier, description (`catalog search WORD`).
    Catalog {
        #[command(subcommand)]
        command: Option<CatalogCommand>,
    },
    /// Add a server of the catalog to a config, with the tier and tool lists that fit it.
    Add(add::AddArgs),
    /// Add this gateway to a client's config file (claude-desktop, cursor, vscode).
    Connect(connect::ConnectArgs),
    /// Remove this gateway from a client's config file.
    Disconnect(connect::ConnectArgs),
    /// Run the built-in demo MCP server (the shipped config's upstream).
    #[command(hide = true)]
    DemoUpstream(crate::demo::DemoArgs),
}

#[derive(Debug, Subcommand)]
enum CatalogCommand {
    /// Servers whose name, description or package contains WORD.
    Search { word: String },
}

pub fn run() -> ExitCode {
    // Every HTTPS client (reqwest's, rmcp's) uses rustls with ring, chosen once per process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    init_logging(
        &cli.log_format,
        matches!(cli.command, Command::DemoUpstream(_)),
    );
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(
            cli.worker_threads
                .unwrap_or_else(default_worker_threads)
                .get(),
        )
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fedgate: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async move {
        match cli.command {
            Command::Serve { config, listen } => serve::serve(&config, listen.as_deref()).await,
            Command::Stdio { config, view } => serve::stdio(&config, view.as_deref()).await,
            Command::Check { file } => check::check(&file),
            Command::Tools { config, json } => inspect::tools(&config, json).await,
            Command::Call {
                tool,
                args,
                config,
                bearer,
            } => inspect::call(&config, &tool, &args, bearer.as_deref()).await,
            Command::Import { file } => import::import(&file),
            Command::Connect(args) => connect::connect(args),
            Command::Catalog { command } => add::catalog(match &command {
                Some(CatalogCommand::Search { word }) => Some(word.as_str()),
                None => None,
            }),
            Command::Add(args) => add::add(args),
            Command::Disconnect(args) => connect::disconnect(args),
            Command::Flows { config, command } => flows::run(&config, command).await,
            Command::Plans { config, command } => plans::run(&config, command).await,
            Command::Credentials { config, command } => credentials::run(&config, command).await,
            Command::DemoUpstream(args) => crate::demo::run(args, Default::default())
                .await
                .map_err(CliError::from),
        }
    });
    match result {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("fedgate: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// Half the CPUs: stdio upstreams run on the same machine and need the other half; measured
/// on 2 cores, one worker spends ~20% less CPU per forwarded call than two and forwards more.
fn default_worker_threads() -> std::num::NonZeroUsize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::num::NonZeroUsize::new(cpus / 2).unwrap_or(std::num::NonZeroUsize::MIN)
}

fn init_logging(format: &str, quiet: bool) {
    use tracing_subscriber::EnvFilter;
    // rmcp's transport worker logs each failed connection at ERROR, with the URL; fedgate
    // reports the same failure itself (`upstream down: …`, /readyz), without URL secrets.
    let default = if quiet {
        "warn,rmcp=error,rmcp::transport::worker=off,opentelemetry=warn"
    } else {
        "info,rmcp=error,rmcp::transport::worker=off,opentelemetry=warn"
    };
    use tracing_subscriber::{Layer, layer::SubscriberExt, util::SubscriberInitExt};
    let filter = EnvFilter::try_from_env("FEDGATE_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let layer = tracing_subscriber::fmt::layer().with_ansi(ansi);
    let layer = if format == "json" {
        layer.json().with_writer(std::io::stderr).boxed()
    } else {
        let one_line = crate::telemetry::one_line::OneLine::new(std::io::stderr, ansi);
        layer.with_writer(one_line).boxed()
    };
    let _ = tracing_subscriber::registry()
        .with(
            layer
                .with_filter(filter)
                .with_filter(crate::telemetry::benign::Benign),
        )
        .try_init();
}
