use super::*;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage};
use tokio::io::AsyncReadExt;

fn call(id: i64) -> ClientJsonRpcMessage {
    JsonRpcMessage::request(
        ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("t"))),
        RequestId::Number(id),
    )
}

/// A result holding only a call result's members decodes as rmcp decodes it; any other
/// (a task, a request for input, extra members, no known member) is left to rmcp.
#[test]
fn call_answers_decode_as_rmcp_decodes_them() {
    let cases = [
        (r#"{"content":[{"type":"text","text":"hi"}]}"#, true),
        (r#"{"content":[],"isError":true,"_meta":{"a":1}}"#, true),
        (r#"{"structuredContent":null}"#, true),
        (r#"{"content":[],"resultType":"complete"}"#, true),
        (r#"{"resultType":"incomplete","inputRequests":{}}"#, false),
        (r#"{"task":{"taskId":"t1","status":"working"}}"#, false),
        (r#"{"content":[],"tools":[]}"#, false),
        (r#"{}"#, false),
        (r#"{"_meta":{}}"#, false),
    ];
    for (result, direct) in cases {
        let line = format!(r#"{{"jsonrpc":"2.0","id":3,"result":{result}}}"#);
        let mut calls = HashSet::from([RequestId::Number(3)]);
        let got = call_answer(line.as_bytes(), &mut calls);
        assert_eq!(got.is_some(), direct, "{result}");
        let Some(got) = got else { continue };
        let rmcp: RxJsonRpcMessage<RoleClient> = serde_json::from_str(&line).unwrap();
        let JsonRpcMessage::Response(r) = &rmcp else {
            panic!("{result}")
        };
        assert!(
            matches!(r.result, ServerResult::CallToolResult(_)),
            "{result}"
        );
        assert_eq!(
            serde_json::to_value(&got).unwrap(),
            serde_json::to_value(&rmcp).unwrap(),
            "{result}"
        );
        assert!(calls.is_empty(), "answered calls are forgotten");
    }
    // Not a call in flight: left to rmcp's decoding.
    let line = r#"{"jsonrpc":"2.0","id":4,"result":{"content":[]}}"#;
    assert!(call_answer(line.as_bytes(), &mut HashSet::new()).is_none());
}

#[tokio::test]
async fn messages_go_out_as_lines_and_answers_come_back() {
    let (to_server, mut server_in) = tokio::io::duplex(1 << 16);
    let answers: &[u8] = b"starting up\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}\r\n\n";
    let last = NonJson::default();
    let mut wire = StdioWire::new(answers, to_server, "u", 1 << 20, last.clone());
    wire.send(call(1)).await.unwrap();
    wire.send(call(2)).await.unwrap();
    let msg = wire.receive().await.unwrap();
    let JsonRpcMessage::Response(r) = msg else {
        panic!("{msg:?}")
    };
    assert_eq!(r.id, RequestId::Number(1));
    assert!(matches!(r.result, ServerResult::CallToolResult(_)));
    assert!(wire.receive().await.is_none());
    assert!(last.suffix().contains("`starting up`"), "{}", last.suffix());
    wire.close().await.unwrap();
    let mut written = String::new();
    server_in.read_to_string(&mut written).await.unwrap();
    let lines: Vec<serde_json::Value> = written
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{written}");
    assert_eq!(lines[0]["method"], "tools/call");
    assert_eq!(lines[1]["id"], 2);
    assert!(wire.send(call(3)).await.is_err(), "closed");
}

#[tokio::test]
async fn an_unreadable_answer_is_replaced_by_an_error_for_its_request() {
    let long = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{\"text\":\"{}\"}}}}\n",
        "x".repeat(5000)
    );
    let deep = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":\"d\",\"result\":{}\n",
        "[".repeat(MAX_DEPTH + 10)
    );
    let input =
        format!("{long}{deep}{{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{{\"content\":[]}}}}\n");
    let (to_server, _server_in) = tokio::io::duplex(1 << 16);
    let mut wire = StdioWire::new(input.as_bytes(), to_server, "u", 1000, NonJson::default());
    let mut got = Vec::new();
    while let Some(msg) = wire.receive().await {
        got.push(serde_json::to_value(&msg).unwrap());
    }
    assert_eq!(got.len(), 3, "{got:#?}");
    assert_eq!(got[0]["id"], 7);
    let long_error = got[0]["error"]["message"].as_str().unwrap();
    assert!(
        long_error.contains("longer than 1000 bytes"),
        "{long_error}"
    );
    assert_eq!(got[1]["id"], "d");
    let deep_error = got[1]["error"]["message"].as_str().unwrap();
    assert!(deep_error.contains("deeper than 128"), "{deep_error}");
    assert_eq!(got[2]["id"], 8);
    assert_eq!(got[2]["result"]["content"], serde_json::json!([]));
}

#[tokio::test]
async fn a_reader_that_stops_holds_senders_past_the_backlog() {
    let (to_server, server_in) = tokio::io::duplex(1024);
    let mut wire = StdioWire::new(&b""[..], to_server, "u", 1 << 20, NonJson::default());
    let big = JsonRpcMessage::request(
        ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new("t").with_arguments(
                serde_json::json!({"x": "y".repeat(BACKLOG)})
                    .as_object()
                    .cloned()
                    .unwrap(),
            ),
        )),
        RequestId::Number(1),
    );
    let send = wire.send(big);
    tokio::pin!(send);
    // However often the writer runs, the pipe takes 1 KiB of the message and no more.
    for _ in 0..20 {
        assert!(
            futures::poll!(&mut send).is_pending(),
            "the send waits for the pipe"
        );
        tokio::task::yield_now().await;
    }
    // Once the reader goes away the pipe fails, and so does the send.
    drop(server_in);
    assert!(send.await.is_err());
}
