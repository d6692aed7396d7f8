//! Which side a call's error is on, its stable code, and whether it is worth retrying.

use super::CallError;
use crate::error::{Classify, Side};

impl Classify for CallError {
    fn side(&self) -> Side {
        match self {
            CallError::UnknownTool { .. }
            | CallError::UnknownPrompt { .. }
            | CallError::UnknownResource { .. }
            | CallError::UnknownTask
            | CallError::BadCursor
            | CallError::BadRequestState { .. }
            | CallError::NoClientInput { .. }
            | CallError::TierRefused { .. }
            | CallError::RateLimited { .. }
            | CallError::NotAuthorized { .. }
            | CallError::IdempotencyConflict
            | CallError::TooDeep { .. }
            | CallError::Hop(_)
            | CallError::InvalidArguments { .. }
            | CallError::ApprovalRequired { .. }
            | CallError::Plan(_)
            | CallError::Staged(_)
            | CallError::Connect(_)
            | CallError::Cancelled => Side::Downstream,
            CallError::Guarded(r) if r.before_upstream() => Side::Downstream,
            CallError::Guarded(_) => Side::Upstream,
            CallError::Planned { cause, .. } => cause.side(),
            CallError::BreakerOpen { .. }
            | CallError::Busy { .. }
            | CallError::StoreUnavailable { .. }
            | CallError::FlowsElsewhere { .. }
            | CallError::Internal { .. } => Side::Internal,
            CallError::ResponseTooLarge { .. } => Side::Upstream,
            CallError::UpstreamUnavailable { .. }
            | CallError::UpstreamTimeout { .. }
            | CallError::UpstreamClosed { .. }
            | CallError::UpstreamRefused { .. }
            | CallError::UpstreamFailed { .. } => Side::Upstream,
        }
    }

    /// A stable code for audit records and logs.
    fn code(&self) -> &'static str {
        match self {
            CallError::UnknownTool { .. } => "unknown_tool",
            CallError::UnknownPrompt { .. } => "unknown_prompt",
            CallError::UnknownResource { .. } => "unknown_resource",
            CallError::UnknownTask => "unknown_task",
            CallError::BadCursor => "bad_cursor",
            CallError::BadRequestState { .. } => "bad_request_state",
            CallError::Busy { .. } => "busy",
            CallError::FlowsElsewhere { .. } => "flows_elsewhere",
            CallError::NoClientInput { .. } => "no_client_input",
            CallError::Internal { .. } => "internal",
            CallError::UpstreamUnavailable { .. } => "upstream_unavailable",
            CallError::UpstreamTimeout { .. } => "timeout",
            CallError::UpstreamClosed { .. } => "upstream_closed",
            CallError::UpstreamRefused { .. } => "upstream_error",
            CallError::UpstreamFailed { .. } => "upstream_failed",
            CallError::Cancelled => "cancelled",
            CallError::TooDeep { .. } => "too_deep",
            CallError::Hop(crate::federation::hops::HopRefusal::Loop { .. }) => "hop_loop",
            CallError::Hop(crate::federation::hops::HopRefusal::TooFar { .. }) => "hop_limit",
            CallError::NotAuthorized { .. } => "not_authorized",
            CallError::IdempotencyConflict => "idempotency_conflict",
            CallError::ResponseTooLarge { .. } => "response_too_large",
            CallError::BreakerOpen { .. } => "breaker_open",
            CallError::RateLimited { .. } => "rate_limited",
            CallError::StoreUnavailable { .. } => "store_unavailable",
            CallError::TierRefused { refusal, .. } => refusal.code(),
            CallError::InvalidArguments { .. } => "invalid_arguments",
            CallError::ApprovalRequired { .. } => "approval_required",
            CallError::Plan(r) => r.code(),
            CallError::Guarded(r) => r.code(),
            CallError::Staged(r) => r.code,
            CallError::Connect(r) => r.code,
            CallError::Planned { cause, .. } => cause.code(),
        }
    }

    fn retryable(&self) -> bool {
        if let CallError::Planned { cause, .. } = self {
            return cause.retryable();
        }
        matches!(
            self,
            CallError::UpstreamClosed { .. }
                | CallError::UpstreamUnavailable { .. }
                | CallError::UpstreamTimeout { .. }
                | CallError::UpstreamFailed { .. }
        )
    }
}
