//! What differs between the two protocol eras at fedgate's own face: error codes and cache
//! hints, each checked with a handshake-era and a stateless-era rmcp client.

mod common;

use common::*;
use rmcp::model::{CacheScope, ReadResourceRequestParams};

fn code(err: rmcp::ServiceError) -> i32 {
    match err {
        rmcp::ServiceError::McpError(e) => e.code.0,
        other => panic!("not a JSON-RPC error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn resource_not_found_uses_each_eras_code() {
    let gw = Gateway::start(&stdio_upstream("a", &[], ""));
    let read = ReadResourceRequestParams::new("nothing://here");
    let legacy = connect_legacy(&gw.url, TestClient::new()).await;
    let err = legacy.peer().read_resource(read.clone()).await.unwrap_err();
    assert_eq!(code(err), -32002, "2025-11-25: resource not found");
    let modern = connect_modern(&gw.url, TestClient::new()).await;
    let err = modern.peer().read_resource(read).await.unwrap_err();
    assert_eq!(code(err), -32602, "2026-07-28: invalid params");
}

#[tokio::test(flavor = "multi_thread")]
async fn lists_are_private_when_filtered_per_caller() {
    // Without [auth] every caller sees the same lists: a shared cache may serve them.
    let open = Gateway::start(&stdio_upstream("a", &[], ""));
    let modern = connect_modern(&open.url, TestClient::new()).await;
    let tools = modern.peer().list_tools(None).await.unwrap();
    assert_eq!(tools.cache_scope, Some(CacheScope::Public));
    assert_eq!(tools.ttl_ms, Some(0));

    // With [auth], lists are filtered per caller: private.
    let guarded = Gateway::start(&format!(
        "[auth]\nanonymous = true\nanonymous_roles = [\"echo\"]\n\n[roles.echo]\ntools = [\"a.echo\"]\n\n{}",
        stdio_upstream("a", &[], "")
    ));
    let modern = connect_modern(&guarded.url, TestClient::new()).await;
    let tools = modern.peer().list_tools(None).await.unwrap();
    assert_eq!(tools.tools.len(), 1, "{tools:?}");
    assert_eq!(tools.cache_scope, Some(CacheScope::Private));
    let prompts = modern.peer().list_prompts(None).await.unwrap();
    assert_eq!(prompts.cache_scope, Some(CacheScope::Private));
}
