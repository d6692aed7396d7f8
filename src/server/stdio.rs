//! `fedgate stdio`: the same aggregated view over stdin/stdout for desktop clients.

use rmcp::ServiceExt;

use super::mcp::Gateway;

/// Serves one client on stdio until it disconnects.
pub async fn serve(gateway: Gateway) -> Result<(), super::error::StdioError> {
    use super::error::StdioError;
    let running = gateway
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| StdioError::Initialize(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| StdioError::Ended(e.to_string()))?;
    Ok(())
}
