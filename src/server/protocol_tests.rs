//! The in-process protocol ring: an rmcp client talks MCP to the gateway's handler over an
//! in-memory duplex — no process, no socket — for what needs the protocol but not the edge:
//! the handshake, listing, the own tools, refusals as plan envelopes.

use std::sync::Arc;

use rmcp::{ServiceExt, model::CallToolRequestParams};

use super::{core::Core, mcp::Gateway};

/// A gateway from `toml` served in this process, and a client connected to it.
async fn connect(
    toml: &str,
) -> (
    Arc<Core>,
    rmcp::service::RunningService<rmcp::RoleClient, ()>,
) {
    let snapshot = crate::config::load_str("t.toml", toml).expect("valid config");
    let core = Core::new(&snapshot).await.expect("core");
    core.start();
    let gateway = Gateway::new(
        core.mcp_parts(),
        core.stack(None),
        snapshot.gateway.page_size.get(),
    );
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = gateway.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(client_io).await.expect("handshake");
    (core, client)
}

#[tokio::test]
async fn a_client_meets_the_gateway_lists_its_own_tools_and_gets_plans_for_mistakes() {
    let (_core, client) =
        connect("[gateway]\ntool_listing = \"search\"\ntool_listing_threshold = 0\n").await;
    let info = client.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("fedgate")
    );

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(names.contains(&"fedgate__find_tools"), "{names:?}");
    assert!(
        names.iter().all(|n| n.starts_with("fedgate__")),
        "no upstream is configured: {names:?}"
    );

    // A mistyped name: a JSON-RPC error that carries the plan envelope and the closest name.
    let err = client
        .call_tool(CallToolRequestParams::new("fedgate__find_tool"))
        .await
        .expect_err("unknown tool");
    let rmcp::ServiceError::McpError(e) = err else {
        panic!("not a JSON-RPC error: {err}");
    };
    assert_eq!(e.code.0, -32602, "{e:?}");
    let data = e.data.expect("data");
    assert_eq!(
        data["io.fedgate/orchestrated_plan"]["errors"][0]["code"],
        "unknown_tool"
    );
    assert!(e.message.contains("fedgate__find_tools"), "{}", e.message);

    let _ = client.cancel().await;
}
