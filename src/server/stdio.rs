//! `fedgate stdio`: the same aggregated view over stdin/stdout for desktop clients.

use rmcp::ServiceExt;

use super::mcp::Gateway;

/// Serves one client on stdio until it disconnects.
pub async fn serve(gateway: Gateway) -> Result<(), String> {
    let running = gateway
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("stdio client did not initialize: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| format!("stdio session ended abnormally: {e}"))?;
    Ok(())
}
