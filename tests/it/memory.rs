//! What an idle gateway keeps resident: start-up's code pages are let go once it settled, and
//! the gateway serves as before (the code it runs maps back in).

use crate::common::*;

/// Resident KiB of the executable's code mapping (`r-xp` of the fedgate binary) of `pid`.
fn code_resident_kib(pid: u32) -> u64 {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe");
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).expect("smaps");
    let mut ours = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            ours = fields.get(1) == Some(&"r-xp")
                && fields.get(5).map(std::path::Path::new) == Some(exe.as_path());
        } else if ours && fields.first() == Some(&"Rss:") {
            kib += fields
                .get(1)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    kib
}

#[tokio::test(flavor = "multi_thread")]
async fn start_ups_code_pages_are_released_once_it_settled_and_calls_still_run() {
    let gw = Gateway::start(&stdio_upstream("demo", &[], ""));
    let at_ready = code_resident_kib(gw.pid());
    assert!(at_ready > 0, "the code mapping is found");
    let log = gw.wait_stderr("start-up's pages released", 30).await;
    assert!(log.contains("code_kib="), "{log}");
    let released = code_resident_kib(gw.pid());
    assert!(
        released < at_ready,
        "resident code {released} KiB after the release, {at_ready} KiB at ready"
    );
    // The gateway serves as before: a session, a list and a call.
    let sid = gw.raw_session().await;
    let http = reqwest::Client::new();
    let post = |body: &'static str| {
        http.post(&gw.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", "2025-11-25")
            .body(body)
            .send()
    };
    // A JSON body, or an SSE stream when the answer took longer than `stream_after_ms`.
    let list = raw::last_message(
        &post(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
            .await
            .expect("POST")
            .text()
            .await
            .expect("body"),
    );
    assert!(
        list["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{list}"
    );
    let echo = raw::last_message(
        &post(
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"hi"}}}"#,
        )
        .await
        .expect("POST")
        .text()
        .await
        .expect("body"),
    );
    assert!(echo["result"]["content"].is_array(), "{echo}");
}
