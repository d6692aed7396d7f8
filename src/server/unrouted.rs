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

/// Methods of the stateless era only: the tasks extension (SEP-2663), which the handshake era is
/// not offered.
const STATELESS_ONLY: [&str; 3] = ["tasks/get", "tasks/cancel", "tasks/update"];

/// A request rmcp handed over as custom: a known method with params it could not decode is
/// invalid params (-32602); anything else (including `tasks/result` and `tasks/list`, which
/// the tasks extension removed, and `tasks/*` asked in the handshake era) is an unknown method
/// (-32601).
pub(super) fn custom_request(method: &str, modern: bool) -> McpError {
    // The stateless era has no `initialize`, `logging/setLevel` or subscribe methods:
    // asked in that era they are unknown methods, as the spec requires.
    let known = (KNOWN_METHODS.contains(&method) && !(modern && HANDSHAKE_ONLY.contains(&method)))
        || (modern && STATELESS_ONLY.contains(&method));
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

#[cfg(test)]
mod tests {
    use super::custom_request;

    #[test]
    fn undecodable_params_of_a_known_method_are_invalid_params_in_its_era() {
        let code = |method, modern| custom_request(method, modern).code.0;
        assert_eq!(code("tools/call", false), -32602);
        assert_eq!(code("tools/call", true), -32602);
        assert_eq!(code("tasks/get", true), -32602);
        assert_eq!(code("tasks/cancel", true), -32602);
        // Not offered in that era, or gone from the protocol: unknown.
        assert_eq!(code("tasks/get", false), -32601);
        assert_eq!(code("initialize", true), -32601);
        assert_eq!(code("tasks/list", true), -32601);
        assert_eq!(code("no/such/method", false), -32601);
    }
}
