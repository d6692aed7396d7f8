use super::*;

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
fn only_transport_failures_are_retried() {
    let closed = CallError::UpstreamClosed {
        upstream: "u".into(),
        uncertain: false,
    };
    assert!(closed.retryable());
    let refused = CallError::UpstreamRefused {
        upstream: "u".into(),
        error: Box::new(rmcp::ErrorData::invalid_params("no", None)),
        found: Vec::new(),
    };
    assert!(!refused.retryable());
    assert!(!CallError::Cancelled.retryable());
}
