//! `rmcp-edge --config FILE --http ADDR`: fedgate's gateway handler served by rmcp's own
//! Streamable HTTP service instead of fedgate's transport. The transport corpus test
//! (`tests/it/transport_corpus.rs`) sends the same requests to both and compares the answers.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, sync::Arc};

use fedgate::cli::CliError;
use rmcp::transport::{
    StreamableHttpServerConfig, StreamableHttpService,
    streamable_http_server::session::local::LocalSessionManager,
};

#[derive(Debug, clap::Args)]
pub struct EdgeArgs {
    /// The gateway config to serve.
    #[arg(long)]
    config: PathBuf,
    /// Where to listen (port 0: any; the URL is printed first).
    #[arg(long, default_value = "127.0.0.1:0")]
    http: SocketAddr,
}

pub async fn run(args: EdgeArgs) -> Result<ExitCode, CliError> {
    let listener = tokio::net::TcpListener::bind(args.http)
        .await
        .map_err(|e| format!("rmcp edge: cannot listen on {}: {e}", args.http))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    fedgate::cli::serve::alone(&args.config, None, move |gateway| async move {
        let service = StreamableHttpService::new(
            move || Ok(gateway.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        println!("rmcp edge listening on http://{local}/mcp");
        fedgate::server::http::serve_plain(listener, service, None, None)
            .await
            .map_err(|e| CliError::from(e.to_string()))
    })
    .await
}
