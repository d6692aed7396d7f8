//! A call that needs the caller's own credential for its upstream (`per_user`): where to
//! connect it, or why it cannot be. The wire error is MCP's URL-required error (-32042) with
//! the URL elicitation in `data.elicitations`, so clients with URL elicitation open it and
//! retry; the `blocked` plan says the same to any agent. The token itself is never in it.

use serde_json::{Value, json};

use crate::envelope::{Plan, PlanError};

/// MCP's `URLElicitationRequiredError`.
pub const URL_ELICITATION_REQUIRED: i32 = -32_042;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRefusal {
    /// `credential_required` (connect at `url`), `credential_declined`, `credential_anonymous`,
    /// `credential_rejected` (the upstream refused the token just given),
    /// `credential_not_connected_in_time` (the call waited for the person in vain),
    /// `credential_provider_unavailable` (a due refresh failed for now; the account stays
    /// connected).
    pub code: &'static str,
    pub upstream: String,
    /// The connect link and its elicitation id, for `credential_required`.
    pub url: Option<(String, String)>,
    pub message: String,
    /// The caller declared elicitation (though not URL mode): it gets MCP's URL-required
    /// error; callers without elicitation get the plan as a tool result their model reads.
    pub as_error: bool,
}

impl std::fmt::Display for ConnectRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl ConnectRefusal {
    /// `error.data` of the wire error.
    pub fn data(&self) -> Value {
        let mut d = json!({"reason": self.code, "upstream": self.upstream});
        if let Some((url, id)) = &self.url {
            d["elicitations"] = json!([{
                "mode": "url",
                "elicitationId": id,
                "url": url,
                "message": self.message,
            }]);
        }
        d
    }

    pub fn wire_code(&self) -> i32 {
        match self.url {
            Some(_) => URL_ELICITATION_REQUIRED,
            None => rmcp::model::ErrorCode::INVALID_REQUEST.0,
        }
    }

    /// The `blocked` plan: what the person must do, then call again.
    pub fn plan(&self, base: Plan) -> Plan {
        let hint = match &self.url {
            Some((url, _)) => format!(
                "tell your user: open {url} and connect their `{}` account there (the link works once, for 10 minutes); then call the tool again",
                self.upstream
            ),
            None if self.code == "credential_anonymous" => {
                "tell your user: sign in to the gateway (an API key or token of their own) to use this upstream".to_owned()
            }
            None if self.code == "credential_scope_unavailable" => format!(
                "tell your user: their `{}` account lacks an access this tool needs, and signing in again will not give it; they should ask the gateway's operator. Do not call this tool again for now",
                self.upstream
            ),
            None if self.code == "credential_insufficient" => format!(
                "tell your user: the token they connected for `{}` lacks an access this tool needs; they should disconnect it (fedgate__disconnect) and connect one that has it, then call the tool again",
                self.upstream
            ),
            None if self.code == "credential_provider_unavailable" => format!(
                "the sign-in service of `{}` is not answering right now; the user's account stays connected: call the tool again in a minute, and tell the user only if it keeps failing",
                self.upstream
            ),
            None => format!(
                "tell your user: `{}` needs their own account connected; call the tool again to get a link",
                self.upstream
            ),
        };
        // Only an operator can change what the authorization server grants.
        let recoverable = self.code != "credential_scope_unavailable";
        base.error(PlanError::new(self.code, self.message.clone(), recoverable).hint(hint))
    }
}
