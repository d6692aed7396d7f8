//! Why an upstream could not be started or connected: the reason `/readyz`, the console and
//! the log show for an upstream that is down. Names commands, addresses and headers, never a
//! credential.

use std::time::Duration;

use crate::policy::token::TokenError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    #[error("not a stdio upstream")]
    NotStdio,
    #[error(transparent)]
    Credential(#[from] TokenError),
    #[error("cannot start `{command}`: {detail}")]
    Spawn { command: String, detail: String },
    #[error("child has no {0}")]
    NoPipe(&'static str),
    #[error("handshake failed: {detail}{stdout}")]
    Handshake { detail: String, stdout: String },
    #[error("no MCP handshake within {limit:?}{stdout}")]
    NoHandshake { limit: Duration, stdout: String },
    #[error("header `{0}`: {1}")]
    Header(String, String),
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
    /// The legacy SSE transport did not connect (its own words).
    #[error("{0}")]
    Sse(String),
    #[error(
        "{addr} is already in use by another process; fedgate launches `{command}` for this upstream and will not talk to a server it did not start (stop the other process or change the port)"
    )]
    AddressTaken {
        addr: std::net::SocketAddr,
        command: String,
    },
    #[error("cannot launch `{command}`: {detail}")]
    Launch { command: String, detail: String },
    #[error("the launched process exited ({status}) before it listened{tail}")]
    LaunchedExited { status: String, tail: String },
    #[error("the launched process exited ({0}) while another server answered on its address")]
    Impostor(String),
    /// A request without a credential was answered 401: the upstream wants one on every
    /// request (with a per-user credential: each person's own, on their own connection).
    #[error("the upstream answered 401 to a request without a credential")]
    Unauthorized,
    /// A per-user upstream whose anonymous requests are refused, and whose OAuth metadata
    /// could not be read either: nobody could sign in to it.
    #[error(
        "it refuses requests without a credential, and its sign-in metadata is unreachable: {0}"
    )]
    NoSignIn(String),
    /// A person's own connection was refused their credential (401).
    #[error("the upstream refused the person's credential")]
    PersonRefused,
    /// A person's own connection was refused for a scope their credential lacks (403
    /// `insufficient_scope`; the scopes it named).
    #[error("the upstream wants a scope the person's credential lacks ({0})")]
    PersonNeedsScope(String),
    /// Every person's connection this upstream may hold is in use.
    #[error(
        "{max} people are connected to this upstream at once, each with a call running: try again in a moment (the operator can raise `person_sessions.max`)"
    )]
    PersonSessionsFull { max: usize },
    /// A process that died during its start: its exit status and last words, then the error
    /// they caused.
    #[error("process exited ({status}){tail}; {cause}")]
    Exited {
        status: String,
        tail: String,
        cause: Box<UpstreamError>,
    },
}
