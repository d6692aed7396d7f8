//! Everything the rest of fedgate asks of a call's error, answered for each variant in one
//! `match` without a wildcard: a new variant does not compile until it says what it is. The
//! pipeline's retries, the flows' retries, approvals (is the plan given back?), the envelope
//! (tool result or protocol error?), audit, metrics and logs all read this one answer.

use super::CallError;
pub use crate::error::{Again, Reached, Retry, Side};
use crate::federation::hops::HopRefusal;

/// What a call's error is, for everyone who handles one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Described {
    /// A stable code for audit records, logs, metric labels and plans.
    pub code: &'static str,
    pub side: Side,
    /// fedgate decided not to run the call (a refusal), rather than the call failing.
    pub refusal: bool,
    pub reached: Reached,
    pub again: Again,
    /// How a `tools/call` with the plan envelope on carries it.
    pub travels: Travels,
}

/// How a `tools/call` outcome reaches the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Travels {
    /// A tool result with `isError` and the plan: something the model can correct or wait out.
    ToolResult,
    /// A JSON-RPC error: the request itself was wrong (unknown name, bad handle) or the
    /// upstream's own error.
    ProtocolError,
}

impl Described {
    /// Whether, and for which calls, another attempt may succeed.
    pub fn retry(self) -> Retry {
        Retry {
            again: self.again,
            reached: self.reached,
        }
    }
}

/// One row of the table below.
const fn d(
    code: &'static str,
    side: Side,
    refusal: bool,
    reached: Reached,
    again: Again,
    travels: Travels,
) -> Described {
    Described {
        code,
        side,
        refusal,
        reached,
        again,
        travels,
    }
}

impl CallError {
    /// See [`Described`].
    pub fn describe(&self) -> Described {
        use Again::{Later, Never, Now};
        use Reached::{Maybe, No, Yes};
        use Side::{Downstream as Down, Internal, Upstream as Up};
        use Travels::{ProtocolError as Protocol, ToolResult as Result};
        match self {
            CallError::UnknownTool { .. } => d("unknown_tool", Down, true, No, Never, Protocol),
            CallError::UnknownPrompt { .. } => d("unknown_prompt", Down, true, No, Never, Protocol),
            CallError::UnknownResource { .. } => {
                d("unknown_resource", Down, true, No, Never, Protocol)
            }
            CallError::UnknownTask => d("unknown_task", Down, true, No, Never, Protocol),
            CallError::BadCursor => d("bad_cursor", Down, true, No, Never, Protocol),
            CallError::BadRequestState { .. } => {
                d("bad_request_state", Down, true, No, Never, Protocol)
            }
            CallError::NotAuthorized { .. } => d("not_authorized", Down, true, No, Never, Protocol),
            // The upstream asked for input the client could not give: the call was there.
            CallError::NoClientInput { .. } => {
                d("no_client_input", Down, false, Yes, Never, Protocol)
            }
            CallError::Cancelled => d("cancelled", Down, false, Maybe, Never, Protocol),
            CallError::UpstreamRefused { .. } => {
                d("upstream_error", Up, false, Yes, Never, Protocol)
            }
            CallError::Busy { .. } => d("busy", Internal, true, No, Later, Result),
            CallError::StoreUnavailable { .. } => {
                d("store_unavailable", Internal, true, No, Later, Result)
            }
            CallError::BreakerOpen { .. } => d("breaker_open", Internal, true, No, Later, Result),
            CallError::RateLimited { .. } => d("rate_limited", Down, true, No, Later, Result),
            CallError::FlowsElsewhere { .. } => {
                d("flows_elsewhere", Internal, true, No, Never, Result)
            }
            CallError::Internal { .. } => d("internal", Internal, false, Maybe, Never, Result),
            CallError::UpstreamUnavailable { .. } => {
                d("upstream_unavailable", Up, false, No, Now, Result)
            }
            CallError::UpstreamTimeout { .. } => d("timeout", Up, false, Maybe, Now, Result),
            CallError::UpstreamClosed { .. } => d("upstream_closed", Up, false, Maybe, Now, Result),
            CallError::UpstreamFailed { .. } => d("upstream_failed", Up, false, Maybe, Now, Result),
            CallError::ResponseTooLarge { .. } => {
                d("response_too_large", Up, false, Yes, Never, Result)
            }
            CallError::TooDeep { .. } => d("too_deep", Down, true, No, Never, Result),
            CallError::Hop(HopRefusal::Loop { .. }) => d("hop_loop", Down, true, No, Never, Result),
            CallError::Hop(HopRefusal::TooFar { .. }) => {
                d("hop_limit", Down, true, No, Never, Result)
            }
            CallError::IdempotencyConflict => {
                d("idempotency_conflict", Down, true, No, Never, Result)
            }
            CallError::TierRefused { refusal, .. } => {
                d(refusal.code(), Down, true, No, Never, Result)
            }
            CallError::InvalidArguments { .. } => {
                d("invalid_arguments", Down, true, No, Never, Result)
            }
            CallError::ApprovalRequired { .. } => {
                d("approval_required", Down, true, No, Never, Result)
            }
            CallError::Plan(r) => d(r.code(), Down, true, No, Never, Result),
            CallError::Staged(r) => d(r.code, Down, true, No, Never, Result),
            CallError::Connect(r) => d(
                r.code,
                Down,
                true,
                No,
                Never,
                if r.as_error { Protocol } else { Result },
            ),
            // A hook that did not answer may answer later; a deny or a secret stays.
            CallError::Guarded(r) => d(
                r.code(),
                if r.before_upstream() { Down } else { Up },
                true,
                if r.before_upstream() { No } else { Yes },
                if r.retryable() { Later } else { Never },
                Result,
            ),
            CallError::Planned { cause, .. } => cause.describe(),
        }
    }
}

impl CallError {
    /// [`Described::code`].
    pub fn code(&self) -> &'static str {
        self.describe().code
    }
}
