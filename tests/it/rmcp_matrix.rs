//! rmcp's client in both lifecycle modes against upstreams of both eras: every combination of
//! (handshake-era | stateless-era client) × (handshake-era | stateless-era upstream) for
//! progress, sampling, elicitation, roots, resource updates, list changes, logging and
//! cancellation — the same matrix `tests/it/sdk_clients.rs` runs with the Python and TypeScript
//! SDKs. Each feature gets a fresh client, so levels and subscriptions do not carry over.
#![allow(deprecated)] // sampling, roots, logging and resources/subscribe are deprecated by SEP-2577

use crate::common;

use std::time::Duration;

use common::*;
use rmcp::{
    model::{
        CallToolRequest, CallToolRequestParams, ClientRequest, LoggingLevel, RequestMetaObject,
        ServerNotification, SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter,
    },
    service::PeerRequestOptions,
};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Legacy,
    Modern,
}

async fn connect(gw: &Gateway, mode: Mode) -> (Client, std::sync::Arc<Seen>) {
    let handler = TestClient::new();
    let seen = handler.seen.clone();
    let client = match mode {
        Mode::Legacy => connect_legacy(&gw.url, handler).await,
        Mode::Modern => connect_modern(&gw.url, handler).await,
    };
    (client, seen)
}

/// Calls a tool the way an application does: rmcp fulfils input-required rounds through the
/// client's handler.
async fn run(client: &Client, tool: &str, args: serde_json::Value) -> String {
    let p = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    first_text(&client.call_tool(p).await.unwrap())
}

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(15), f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

async fn progress(gw: &Gateway, mode: Mode, up: &str) {
    let (client, seen) = connect(gw, mode).await;
    assert_eq!(
        run(
            &client,
            &format!("{up}__progress"),
            serde_json::json!({"steps": 3})
        )
        .await,
        "done 3"
    );
    bounded("3 progress notifications", async {
        while seen.progress.lock().len() < 3 {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

async fn input(gw: &Gateway, mode: Mode, up: &str) {
    let (client, _) = connect(gw, mode).await;
    let t = |name: &str| format!("{up}__{name}");
    assert_eq!(
        run(&client, &t("sample"), serde_json::json!({})).await,
        "sampled: hi from rmcp"
    );
    assert_eq!(
        run(&client, &t("ask"), serde_json::json!({})).await,
        "hello ada"
    );
    assert_eq!(
        run(&client, &t("roots"), serde_json::json!({})).await,
        "file:///work/project"
    );
}

async fn resource_updates(gw: &Gateway, mode: Mode, up: &str) {
    let (client, seen) = connect(gw, mode).await;
    let uri = format!("{up}://notes/k");
    let note_tool = format!("{up}__write_note");
    let write = || {
        run(
            &client,
            &note_tool,
            serde_json::json!({"key": "k", "value": "v"}),
        )
    };
    match mode {
        Mode::Legacy => {
            client
                .peer()
                .subscribe(SubscribeRequestParams::new(uri.clone()))
                .await
                .unwrap();
            bounded("resources/updated", async {
                // Written again while nothing came: the upstream side may still be subscribing.
                while !seen.resource_updates.lock().contains(&uri) {
                    write().await;
                    let _ =
                        tokio::time::timeout(Duration::from_millis(500), seen.updated.notified())
                            .await;
                }
            })
            .await;
        }
        Mode::Modern => {
            let filter = SubscriptionFilter::builder()
                .resource_subscriptions(vec![uri.clone()])
                .build();
            let mut sub = client.peer().listen(filter).await.unwrap();
            let note = bounded("resources/updated on the listen stream", async {
                loop {
                    write().await;
                    if let Ok(Ok(Some(n))) =
                        tokio::time::timeout(Duration::from_millis(500), sub.next()).await
                    {
                        return n;
                    }
                }
            })
            .await;
            assert!(
                matches!(&note, ServerNotification::ResourceUpdatedNotification(n) if n.params.uri == uri),
                "{note:?}"
            );
        }
    }
}

async fn list_changed(gw: &Gateway, mode: Mode, up: &str) {
    let (client, seen) = connect(gw, mode).await;
    let toggle = format!("{up}__toggle_extra");
    match mode {
        Mode::Legacy => {
            let before = *seen.tool_changes.lock();
            run(&client, &toggle, serde_json::json!({})).await;
            wait_for(&seen.tools_changed, "tools/list_changed", || {
                *seen.tool_changes.lock() > before
            })
            .await;
        }
        Mode::Modern => {
            let filter = SubscriptionFilter::builder().tools_list_changed().build();
            let mut sub = client.peer().listen(filter).await.unwrap();
            run(&client, &toggle, serde_json::json!({})).await;
            let note = bounded("tools/list_changed", sub.next()).await.unwrap();
            assert!(
                matches!(
                    note,
                    Some(ServerNotification::ToolListChangedNotification(_))
                ),
                "{note:?}"
            );
        }
    }
}

async fn logging(gw: &Gateway, mode: Mode, up: &str) {
    let (client, seen) = connect(gw, mode).await;
    let tool = CallToolRequestParams::new(format!("{up}__log"));
    let want: &[&str] = match mode {
        Mode::Legacy => {
            client
                .peer()
                .set_level(SetLevelRequestParams::new(LoggingLevel::Info))
                .await
                .unwrap();
            client.call_tool(tool).await.unwrap();
            &["log-info", "log-warning"]
        }
        Mode::Modern => {
            let mut meta = RequestMetaObject::default();
            meta.set_log_level(LoggingLevel::Warning);
            call_with_meta(&client, tool, meta).await;
            &["log-warning"]
        }
    };
    wait_for(&seen.logged, "log messages", || {
        seen.logs.lock().len() >= want.len()
    })
    .await;
    let mut got = seen.logs.lock().clone();
    got.sort();
    assert_eq!(got, want);
}

async fn cancellation(gw: &Gateway, mode: Mode, up: &str) {
    let (client, _) = connect(gw, mode).await;
    let stats = || async {
        let r = call(&client, &format!("{up}__stats"), serde_json::json!({}))
            .await
            .unwrap();
        r.structured_content.unwrap()
    };
    let before = stats().await;
    let req = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new(format!("{up}__slow")).with_arguments(
            serde_json::json!({"ms": 60000})
                .as_object()
                .cloned()
                .unwrap(),
        ),
    ));
    let handle = client
        .peer()
        .send_request_with_option(req, PeerRequestOptions::no_options())
        .await
        .unwrap();
    // The stats call before and one after the slow call: the slow call is at the upstream.
    let calls = before["calls"].as_u64().unwrap();
    bounded("the slow call reaches the upstream", async {
        while stats().await["calls"].as_u64().unwrap() < calls + 2 {}
    })
    .await;
    handle.cancel(Some("test".into())).await.unwrap();
    let cancelled = before["cancelled"].as_u64().unwrap();
    bounded("the upstream sees the cancellation", async {
        while stats().await["cancelled"].as_u64().unwrap() <= cancelled {}
    })
    .await;
}

/// One gateway per client mode; the features run one after another (the cancellation check
/// reads the upstream's counters, and a handshake-era stdio upstream's requests are tied to a
/// call only while it is the only one in flight).
async fn matrix(mode: Mode) {
    let gw = Gateway::start(&format!(
        "{}{}",
        stdio_upstream("old", &["--scheme", "old"], "era = \"legacy\""),
        stdio_upstream("new", &["--scheme", "new"], "era = \"modern\"")
    ));
    for up in ["old", "new"] {
        println!("{mode:?} client -> {up}");
        progress(&gw, mode, up).await;
        input(&gw, mode, up).await;
        resource_updates(&gw, mode, up).await;
        list_changed(&gw, mode, up).await;
        logging(&gw, mode, up).await;
        cancellation(&gw, mode, up).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn handshake_era_rmcp_client_against_upstreams_of_both_eras() {
    matrix(Mode::Legacy).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stateless_era_rmcp_client_against_upstreams_of_both_eras() {
    matrix(Mode::Modern).await;
}
