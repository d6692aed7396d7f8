//! Answers to requests fedgate cannot route: methods it does not serve, and params rmcp
//! could not decode.

use rmcp::{ErrorData as McpError, model::ServerResult};

use super::wire_error::WireError;

/// Methods fedgate serves: a request for one of these that rmcp could not decode has bad params.
const KNOWN_METHODS: [&str; 12] = [
    "tools/call",
    "tools/list",
    "prompts/get",
    "prompts/list",
    "resources/read",
    "resources/list",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "initialize",
];

/// Methods of the handshake era only.
const HANDSHAKE_ONLY: [&str; 4] = [
    "initialize",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// A request rmcp handed over as custom: a known method with params it could not decode is
/// invalid params (-32602); anything else (including `tasks/result` and `tasks/list`, which
/// the tasks extension removed) is an unknown method (-32601).
pub(super) fn custom_request(method: &str, modern: bool) -> McpError {
    // The stateless era has no `initialize`, `logging/setLevel` or subscribe methods:
    // asked in that era they are unknown methods, as the spec requires.
    let known = KNOWN_METHODS.contains(&method) && !(modern && HANDSHAKE_ONLY.contains(&method));
    let method = method.to_owned();
    if known {
        WireError::MalformedParams { method }
    } else {
        WireError::UnknownMethod { method }
    }
    .to_mcp()
}

pub(super) fn unexpected(method: &str, r: &ServerResult) -> McpError {
    WireError::Internal {
        message: format!(
            "upstream answered {method} with an unexpected result type: {}",
            variant(r)
        ),
    }
    .to_mcp()
}

fn variant(r: &ServerResult) -> String {
    serde_json::to_value(r)
        .ok()
        .and_then(|v| {
            v.as_object()
                .map(|o| o.keys().cloned().collect::<Vec<_>>().join(","))
        })
        .unwrap_or_default()
}
