//! `fedgate__disconnect`: a person forgets their own per-user credentials — one upstream's or
//! all of them. It acts only on the caller's identity, so it is granted to every caller.

use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::{Value, json};

use super::{Call, CallFuture, OwnTool, own};
use crate::{
    credentials::UserCredentials, names::DISCONNECT_TOOL, policy::identity::IdentityKind,
    policy::trust::CallClass,
};

#[derive(Debug)]
pub struct DisconnectTool(pub Arc<UserCredentials>);

impl OwnTool for DisconnectTool {
    fn definition(&self) -> Tool {
        own::definition(
            DISCONNECT_TOOL,
            "Forget the account you connected for an upstream that acts as each person (or all \
             of them). The next call to it asks you to connect again.",
            json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "upstream": {
                        "type": "string",
                        "title": "Upstream",
                        "description": "The upstream to disconnect; leave out for all"
                    }
                }
            }),
        )
    }

    fn class(&self) -> CallClass {
        CallClass::Write
    }

    fn call(&self, call: Call) -> CallFuture {
        let creds = self.0.clone();
        Box::pin(async move {
            if call.identity.kind == IdentityKind::Anonymous {
                return own::answer(
                    json!({"error": "anonymous callers have no connected accounts"}),
                    true,
                )
                .await;
            }
            let args = own::arguments(&call);
            let upstream = args.get("upstream").and_then(Value::as_str);
            match creds.revoke(&call.identity.key(), upstream, None).await {
                Ok(forgot) => {
                    own::answer(
                        json!({
                            "disconnected": forgot.len(),
                            "upstream": upstream.unwrap_or("*"),
                            "upstreams": forgot,
                            "note": "`at_provider`: `revoked` means the account's authorization server confirmed the access is withdrawn; `no_endpoint` or `failed` means fedgate forgot it, but the grant may stay valid at the provider until it expires (the person can withdraw it in the provider's account settings)",
                        }),
                        false,
                    )
                    .await
                }
                Err(e) => {
                    tracing::warn!("per-user credentials: {e}");
                    Err(super::CallError::StoreUnavailable {
                        feature: "per-user credentials",
                    })
                }
            }
        })
    }
}
