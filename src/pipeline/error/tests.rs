use super::*;
use crate::error::{Again, Reached};

/// Every kind of failure, as a client is told it and as its plan envelope says it: plain
/// words, no Rust type or module paths, no Debug output, no source locations; the details
/// of internal and transport failures stay in the log (`Display`).
#[test]
fn clients_get_plain_messages_for_every_error_kind() {
    let internals = "serde_json::Error { line: 1 } at src/pipeline/x.rs:10";
    let up = || "demo".to_owned();
    let kinds = vec![
        CallError::UnknownTool {
            name: "x".into(),
            closest: vec![],
            recover: Vec::new(),
            note: None,
        },
        CallError::UnknownPrompt { name: "p".into() },
        CallError::UnknownResource {
            uri: "demo://x".into(),
        },
        CallError::UnknownTask,
        CallError::BadCursor,
        CallError::BadRequestState {
            why: "expired".into(),
        },
        CallError::Busy {
            what: "parked calls".into(),
        },
        CallError::NoClientInput {
            detail: "no answer in time".into(),
        },
        CallError::Internal {
            detail: internals.into(),
        },
        CallError::UpstreamUnavailable {
            upstream: up(),
            phase: Phase::Restarting,
            detail: None,
        },
        CallError::UpstreamTimeout {
            upstream: up(),
            after: Duration::from_secs(5),
            uncertain: true,
        },
        CallError::UpstreamClosed {
            upstream: up(),
            uncertain: false,
        },
        CallError::UpstreamRefused {
            upstream: up(),
            error: Box::new(McpError::invalid_params("bad value", None)),
            found: Vec::new(),
        },
        CallError::UpstreamFailed {
            upstream: up(),
            detail: internals.into(),
        },
        CallError::Cancelled,
        CallError::TooDeep { depth: 9, max: 8 },
        CallError::Hop(crate::federation::hops::HopRefusal::Loop {
            id: "a".into(),
            path: vec!["a".into()],
        }),
        CallError::IdempotencyConflict,
        CallError::ResponseTooLarge {
            upstream: up(),
            size: 10,
            max: 5,
        },
        CallError::NotAuthorized {
            shown: Box::new(CallError::UnknownTool {
                name: "x".into(),
                closest: vec![],
                recover: Vec::new(),
                note: None,
            }),
        },
        CallError::BreakerOpen {
            upstream: up(),
            tool: None,
            retry_in: Duration::from_secs(3),
        },
        CallError::RateLimited {
            rule: "r".into(),
            retry_after: Duration::from_millis(500),
        },
        CallError::StoreUnavailable {
            feature: "rate limits",
        },
        CallError::TierRefused {
            tool: "demo.write".into(),
            tier: "low".into(),
            refusal: TierRefusal::WritesNever,
            upstream: "demo".into(),
            upstream_tool: "write".into(),
        },
        CallError::Plan(PlanRefusal::Used),
        CallError::Planned {
            cause: Box::new(CallError::UpstreamFailed {
                upstream: up(),
                detail: internals.into(),
            }),
            plan: Box::new(Plan::new(crate::envelope::Status::Error, "c")),
        },
    ];
    for e in &kinds {
        let wire = e.to_mcp().message.into_owned();
        let plan = crate::pipeline::envelope::plan_for(e, "c");
        let told = format!("{wire} {}", plan.instruction.clone().unwrap_or_default());
        for internal in ["::", "Error {", "src/", ".rs:", "panicked"] {
            assert!(
                !told.contains(internal),
                "{}: `{internal}` reaches the client: {told}",
                e.code()
            );
        }
        assert!(!wire.is_empty(), "{}", e.code());
    }
    // The details stay where operators read them.
    let failed = &kinds[13];
    assert!(failed.to_string().contains("serde_json::Error"));
    assert!(failed.to_mcp().message.contains("upstream `demo` failed"));
}

#[test]
fn unknown_tools_suggest_the_closest_names_in_the_message() {
    let e = CallError::UnknownTool {
        name: "demo.ecoh".into(),
        closest: vec!["demo.echo".into(), "demo.pid".into()],
        recover: Vec::new(),
        note: None,
    };
    let wire = e.to_mcp();
    assert!(
        wire.message
            .contains("did you mean `demo.echo` or `demo.pid`?"),
        "{}",
        wire.message
    );
    let none = CallError::UnknownTool {
        name: "x".into(),
        closest: Vec::new(),
        recover: Vec::new(),
        note: None,
    };
    assert!(none.to_mcp().message.contains("call tools/list"));
}

#[test]
fn transport_failures_are_retried_at_once_and_held_back_calls_later_even_writes() {
    let closed = CallError::UpstreamClosed {
        upstream: "u".into(),
        uncertain: false,
    };
    let d = closed.describe();
    assert_eq!(d.again, Again::Now);
    assert!(d.retry().for_reads() && !d.retry().for_writes(), "{d:?}");
    let refused = CallError::UpstreamRefused {
        upstream: "u".into(),
        error: Box::new(rmcp::ErrorData::invalid_params("no", None)),
        found: Vec::new(),
    };
    assert!(!refused.describe().retry().for_reads());
    assert!(!CallError::Cancelled.describe().retry().for_reads());
    // Held back before the upstream: worth another try later, a write too.
    let limited = CallError::RateLimited {
        rule: "r".into(),
        retry_after: std::time::Duration::from_millis(5),
    }
    .describe();
    assert_eq!(
        (limited.again, limited.reached),
        (Again::Later, Reached::No)
    );
    assert!(limited.retry().for_writes() && limited.refusal);
}

/// A planned error is its cause in every answer but the plan.
#[test]
fn a_planned_error_is_described_as_its_cause() {
    let cause = CallError::UpstreamTimeout {
        upstream: "u".into(),
        after: std::time::Duration::from_secs(1),
        uncertain: true,
    };
    let want = cause.describe();
    let planned = CallError::Planned {
        plan: Box::new(crate::envelope::Plan::new(
            crate::envelope::Status::Error,
            "c",
        )),
        cause: Box::new(cause),
    };
    assert_eq!(planned.describe(), want);
    assert_eq!(want.travels, Travels::ToolResult);
    let unknown = CallError::UnknownTask.describe();
    assert_eq!(unknown.travels, Travels::ProtocolError);
}
