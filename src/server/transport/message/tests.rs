use super::*;

#[test]
fn a_call_is_decoded_with_its_meta_taken_out() {
    let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"hi"},"_meta":{"progressToken":"p1"}}}"#;
    let Some(Message::Request { id, request, meta }) =
        decode(body, Some("tools/call"), Some("demo__echo"), Era::Handshake)
    else {
        panic!("not decoded");
    };
    assert_eq!(id, RequestId::Number(7));
    assert!(meta.get_progress_token().is_some());
    match request {
        Request::CallTool(p) => {
            assert_eq!(p.name, "demo__echo");
            assert!(p.meta.is_none());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn what_rmcp_must_answer_is_left_to_it() {
    for (body, method, name) in [
        // not JSON, not 2.0
        (&b"{"[..], None, None),
        (br#"{"jsonrpc":"1.0","id":1,"method":"tools/list"}"#, None, None),
        // a ping or initialized notification with params (rmcp checks them)
        (br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#, None, None),
        (br#"{"jsonrpc":"2.0","method":"notifications/initialized","params":3}"#, None, None),
        // an initialize inside a session, a stateless-only method
        (br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#, None, None),
        // headers that disagree with the body
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            Some("prompts/list"),
            None,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}"#,
            None,
            Some("b"),
        ),
        (br#"{"jsonrpc":"2.0","id":1,"method":"nothing/here"}"#, None, Some("x")),
        // a stateless-era request
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
            None,
            None,
        ),
        (
            br#"{"jsonrpc":"2.0","id":1,"method":"nothing/here","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
            None,
            None,
        ),
    ] {
        assert!(
            decode(body, method, name, Era::Handshake).is_none(),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn what_rmcp_decodes_as_custom_is_answered_with_its_error() {
    for (body, method) in [
        // no params where they are required, arguments not an object, bad level
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            "tools/call",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":3}}"#,
            "tools/call",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"loud"}}"#,
            "logging/setLevel",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"task":"t"}}"#,
            "tasks/get",
        ),
        // methods nobody serves, removed ones among them
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"nothing/here"}"#,
            "nothing/here",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/list","params":{}}"#,
            "tasks/list",
        ),
    ] {
        let decoded = decode(body.as_bytes(), None, None, Era::Handshake);
        let Some(Message::Request {
            request: Request::Custom(m),
            ..
        }) = decoded
        else {
            panic!("{body}: {decoded:?}");
        };
        assert_eq!(m, method);
    }
    // In the stateless era, with its `_meta`, a method without a name; a named one is
    // rmcp's (it checks `Mcp-Name` first).
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
    let era = Era::Stateless("2026-07-28");
    let unknown =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"nothing/here","params":{{{meta}}}}}"#);
    assert!(matches!(
        decode(unknown.as_bytes(), Some("nothing/here"), None, era),
        Some(Message::Request {
            request: Request::Custom(_),
            ..
        })
    ));
    let bad_call = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"arguments":3,{meta}}}}}"#
    );
    assert!(decode(bad_call.as_bytes(), Some("tools/call"), None, era).is_none());
}

#[test]
fn a_session_ping_initialized_and_initialize_are_decoded() {
    let ping = decode(
        br#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#,
        None,
        None,
        Era::Handshake,
    );
    assert!(matches!(
        ping,
        Some(Message::Request {
            request: Request::Ping,
            ..
        })
    ));
    // With params, read as rmcp reads them: `_meta` taken out.
    for body in [
        &br#"{"jsonrpc":"2.0","id":9,"method":"ping","params":{}}"#[..],
        br#"{"jsonrpc":"2.0","id":9,"method":"ping","params":{"_meta":{"progressToken":1}}}"#,
    ] {
        assert!(
            matches!(
                decode(body, None, None, Era::Handshake),
                Some(Message::Request {
                    request: Request::Ping,
                    ..
                })
            ),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    let stateless = decode(
        br#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#,
        Some("ping"),
        None,
        Era::Stateless("2026-07-28"),
    );
    assert!(stateless.is_none(), "a stateless ping is rmcp's to check");
    let done = decode(
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        None,
        None,
        Era::Handshake,
    );
    assert!(matches!(done, Some(Message::Initialized)));
    let init = br#"{"jsonrpc":"2.0","id":"a","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"c","version":"1"}}}"#;
    let (id, params) = decode_initialize(init).expect("decoded");
    assert_eq!(id, RequestId::String("a".into()));
    assert_eq!(params.protocol_version.as_str(), "2025-11-25");
    assert!(params.capabilities.elicitation.is_some());
    for not in [
        &br#"{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#[..],
        br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    ] {
        assert!(decode_initialize(not).is_none(), "{}", String::from_utf8_lossy(not));
    }
}

#[test]
fn a_stateless_request_needs_its_headers_and_its_meta() {
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"a__echo",{meta}}}}}"#
    );
    let era = Era::Stateless("2026-07-28");
    let decode = |body: &str, m, n| decode(body.as_bytes(), m, n, era);
    assert!(decode(&call, Some("tools/call"), Some("a__echo")).is_some());
    // Mcp-Name missing, Mcp-Method missing: rmcp refuses them.
    assert!(decode(&call, Some("tools/call"), None).is_none());
    assert!(decode(&call, None, Some("a__echo")).is_none());
    // No version in _meta, or another one; required keys missing.
    let bare = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    assert!(decode(bare, Some("tools/list"), None).is_none());
    let other = call.replace("2026-07-28", "2099-01-01");
    assert!(decode(&other, Some("tools/call"), Some("a__echo")).is_none());
    let partial = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    assert!(decode(partial, Some("tools/list"), None).is_none());
    // The stateless era has no ping (rmcp's handler answers -32601), even with its `_meta`.
    let ping = format!(r#"{{"jsonrpc":"2.0","id":2,"method":"ping","params":{{{meta}}}}}"#);
    assert!(decode(&ping, Some("ping"), None).is_none());
    // And a handshake-era session never takes it.
    assert!(
        super::decode(
            call.as_bytes(),
            Some("tools/call"),
            Some("a__echo"),
            Era::Handshake
        )
        .is_none()
    );
}

#[test]
fn completion_tasks_subscriptions_and_discover_are_decoded() {
    let session = |body: &str| decode(body.as_bytes(), None, None, Era::Handshake);
    let complete = session(
        r#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":"v"}}}"#,
    );
    assert!(matches!(
        complete,
        Some(Message::Request {
            request: Request::Complete(_),
            ..
        })
    ));
    for (method, gated) in [
        ("tasks/get", true),
        ("tasks/cancel", true),
        ("resources/subscribe", false),
        ("resources/unsubscribe", false),
    ] {
        let key = if gated { "taskId" } else { "uri" };
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":2,"method":"{method}","params":{{"{key}":"x"}}}}"#);
        let Some(Message::Request { request, .. }) = session(&body) else {
            panic!("{body} not decoded");
        };
        assert_eq!(request.task_method().is_some(), gated, "{body}");
        assert_eq!(request.name(), Some("x"), "{body}");
    }
    let update = session(
        r#"{"jsonrpc":"2.0","id":3,"method":"tasks/update","params":{"taskId":"x","inputResponses":{}}}"#,
    );
    assert!(matches!(
        update,
        Some(Message::Request {
            request: Request::UpdateTask(_),
            ..
        })
    ));

    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
    let era = Era::Stateless("2026-07-28");
    let discover =
        format!(r#"{{"jsonrpc":"2.0","id":4,"method":"server/discover","params":{{{meta}}}}}"#);
    assert!(matches!(
        decode(discover.as_bytes(), Some("server/discover"), None, era),
        Some(Message::Request {
            request: Request::Discover,
            ..
        })
    ));
    // Anything beside `_meta`, a session's discover, a stateless subscribe: rmcp's.
    let extra = discover.replace("{\"_meta\"", "{\"x\":1,\"_meta\"");
    assert!(decode(extra.as_bytes(), Some("server/discover"), None, era).is_none());
    assert!(session(&discover).is_none());
    let subscribe = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"resources/subscribe","params":{{"uri":"x",{meta}}}}}"#
    );
    assert!(
        decode(
            subscribe.as_bytes(),
            Some("resources/subscribe"),
            Some("x"),
            era
        )
        .is_none()
    );
}

#[test]
fn a_sessions_other_notifications_are_recognised_as_rmcp_reads_them() {
    for body in [
        r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/fedgate/anything","params":{"a":1}}"#,
    ] {
        assert!(
            matches!(
                decode(body.as_bytes(), None, None, Era::Handshake),
                Some(Message::Notification)
            ),
            "{body}"
        );
    }
    let not_one = r#"{"jsonrpc":"2.0","method":"notifications/x","params":3}"#;
    assert!(decode(not_one.as_bytes(), None, None, Era::Handshake).is_none());
}

#[test]
fn answers_and_cancellations_are_recognised() {
    let answer =
        br#"{"jsonrpc":"2.0","id":"fedgate-direct-4","result":{"action":"accept","content":{}}}"#;
    assert!(matches!(
        decode(answer, None, None, Era::Handshake),
        Some(Message::Answer(_))
    ));
    // Any other answer in a session too (routing decides whether someone waits for it); the
    // stateless era has no requests of ours to answer.
    let stray = br#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}"#;
    assert!(matches!(
        decode(stray, None, None, Era::Handshake),
        Some(Message::Answer(_))
    ));
    assert!(decode(stray, Some("x"), None, Era::Stateless("2026-07-28")).is_none());
    let cancel =
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}"#;
    assert!(matches!(
        decode(cancel, None, None, Era::Handshake),
        Some(Message::Cancelled(RequestId::Number(9)))
    ));
}
