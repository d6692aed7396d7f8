//! OpenTelemetry traces through a real fedgate: spans arrive at an OTLP/HTTP collector run by
//! the test, with the caller's trace continued, a client span per upstream attempt under the
//! server span, and the context passed on to upstreams (HTTP header and `_meta`). The trace id
//! is the correlation id of the audit record and of the log line of a failed call.

use crate::common;

use std::{convert::Infallible, sync::Arc, time::Duration};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, body::Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use rmcp::{
    model::{CallToolRequestParams, RequestMetaObject, ServerResult},
    service::ClientLifecycleMode,
    service::ClientServiceExt,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::Value;
use tokio::sync::Notify;

const TRACE_1: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_1: &str = "00f067aa0ba902b7";
const TRACE_2: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT_2: &str = "b7ad6b7169203331";

/// An OTLP/HTTP trace receiver (protobuf or JSON): records every span it is sent.
#[derive(Default)]
struct Collector {
    spans: Mutex<Vec<Value>>,
    arrived: Notify,
}

impl Collector {
    async fn start() -> (Arc<Collector>, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let me = Arc::new(Collector::default());
        let c = me.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let c = c.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let c = c.clone();
                        async move {
                            let path = req.uri().path().to_owned();
                            let protobuf = req
                                .headers()
                                .get("content-type")
                                .is_some_and(|v| v == "application/x-protobuf");
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            if path == "/v1/traces" {
                                c.record(&body, protobuf);
                            }
                            let mut r = Response::new(Full::new(Bytes::from_static(b"{}")));
                            r.headers_mut()
                                .insert("content-type", "application/json".parse().unwrap());
                            Ok::<_, Infallible>(r)
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        (me, url)
    }

    /// Both OTLP/HTTP encodings; protobuf is decoded and seen through its JSON mapping.
    fn record(&self, body: &[u8], protobuf: bool) {
        let v: Value = if protobuf {
            use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
            use prost::Message;
            let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf body");
            serde_json::to_value(req).unwrap()
        } else {
            serde_json::from_slice(body).expect("OTLP/JSON body")
        };
        let mut spans = self.spans.lock();
        for rs in v["resourceSpans"].as_array().into_iter().flatten() {
            let service = rs["resource"]["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["key"] == "service.name")
                .map(|a| a["value"]["stringValue"].clone());
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for s in ss["spans"].as_array().into_iter().flatten() {
                    let mut s = s.clone();
                    s["service"] = service.clone().unwrap_or(Value::Null);
                    spans.push(s);
                }
            }
        }
        self.arrived.notify_one();
    }

    /// Waits (bounded) until a span matching `pred` has arrived; returns it.
    async fn span(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let fut = async {
            loop {
                if let Some(s) = self.spans.lock().iter().find(|s| pred(s)) {
                    return s.clone();
                }
                self.arrived.notified().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), fut)
            .await
            .unwrap_or_else(|_| panic!("no span {what}; got {:#?}", self.spans.lock()))
    }
}

fn attr(span: &Value, key: &str) -> Option<String> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .and_then(|a| a["value"]["stringValue"].as_str())
        .map(str::to_owned)
}

/// A handshake-era client whose HTTP requests carry the traceparent `TRACE_1`/`PARENT_1`.
async fn traced_client(url: &str) -> Client {
    let headers = [(
        http::HeaderName::from_static("traceparent"),
        http::HeaderValue::from_str(&format!("00-{TRACE_1}-{PARENT_1}-01")).unwrap(),
    )]
    .into_iter()
    .collect();
    let cfg = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).custom_headers(headers);
    TestClient::new()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(cfg),
            ClientLifecycleMode::Initialize,
        )
        .await
        .unwrap()
}

fn traceparent_of(text: &str) -> (Option<String>, Option<String>) {
    let v: Value = serde_json::from_str(text).unwrap();
    (
        v["header"].as_str().map(str::to_owned),
        v["meta"].as_str().map(str::to_owned),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn spans_link_across_fedgate_and_its_upstreams() {
    let (collector, endpoint) = Collector::start().await;
    let (http_toml, _http_demo) = http_upstream("h", "");
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let config = format!(
        "[tracing]\notlp_endpoint = {endpoint:?}\nprotocol = \"http/json\"\nservice_name = \"fedgate-test\"\n\n\
         [audit]\npath = {audit:?}\n\n{http_toml}{}",
        stdio_upstream("s", &[], "")
    );
    let gw = Gateway::start_env(&config, &[("OTEL_BSP_SCHEDULE_DELAY", "50")]);

    let client = traced_client(&gw.url).await;

    // 1. HTTP upstream: the header's trace continues through fedgate to the upstream.
    let r = call(&client, "h__traceparent", serde_json::json!({}))
        .await
        .unwrap();
    let (up_header, up_meta) = traceparent_of(&first_text(&r));
    let server = collector
        .span("server span of h__traceparent", |s| {
            s["name"] == "tools/call h__traceparent"
        })
        .await;
    assert_eq!(server["traceId"], TRACE_1, "{server:#}");
    assert_eq!(server["parentSpanId"], PARENT_1, "{server:#}");
    assert_eq!(server["kind"], 2, "SERVER: {server:#}");
    assert_eq!(server["service"], "fedgate-test");
    assert_eq!(
        attr(&server, "mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        attr(&server, "gen_ai.tool.name").as_deref(),
        Some("h__traceparent")
    );
    assert_eq!(attr(&server, "fedgate.upstream").as_deref(), Some("h"));
    let client_span = collector
        .span("client span under it", |s| {
            s["parentSpanId"] == server["spanId"] && s["kind"] == 3
        })
        .await;
    assert_eq!(client_span["traceId"], TRACE_1);
    assert_eq!(
        attr(&client_span, "gen_ai.tool.name").as_deref(),
        Some("traceparent")
    );
    assert_eq!(
        attr(&client_span, "fedgate.upstream.transport").as_deref(),
        Some("http")
    );
    let expected = format!(
        "00-{TRACE_1}-{}-01",
        client_span["spanId"].as_str().unwrap()
    );
    assert_eq!(
        up_header.as_deref(),
        Some(expected.as_str()),
        "HTTP header upstream"
    );
    assert_eq!(
        up_meta.as_deref(),
        Some(expected.as_str()),
        "_meta upstream"
    );

    // Requests fedgate answers itself get a server span too.
    client.peer().list_all_tools().await.unwrap();
    let list = collector
        .span("server span of tools/list", |s| s["name"] == "tools/list")
        .await;
    assert_eq!(list["traceId"], TRACE_1);
    assert_eq!(list["parentSpanId"], PARENT_1);
    assert_eq!(list["kind"], 2);

    // 2. `_meta.traceparent` wins over the header; a stdio upstream gets it in `_meta`.
    let mut meta = RequestMetaObject::default();
    meta.insert(
        "traceparent".into(),
        format!("00-{TRACE_2}-{PARENT_2}-01").into(),
    );
    let answer = call_with_meta(&client, CallToolRequestParams::new("s__traceparent"), meta).await;
    let ServerResult::CallToolResult(r) = answer else {
        panic!("{answer:?}")
    };
    let (up_header, up_meta) = traceparent_of(&first_text(&r));
    assert_eq!(up_header, None, "stdio has no headers");
    let server2 = collector
        .span("server span of s__traceparent", |s| {
            s["name"] == "tools/call s__traceparent"
        })
        .await;
    assert_eq!(server2["traceId"], TRACE_2);
    assert_eq!(server2["parentSpanId"], PARENT_2);
    let client2 = collector
        .span("client span of the stdio call", |s| {
            s["parentSpanId"] == server2["spanId"]
        })
        .await;
    assert_eq!(
        up_meta,
        Some(format!(
            "00-{TRACE_2}-{}-01",
            client2["spanId"].as_str().unwrap()
        ))
    );

    // 3. A refused call is a server span with error.type, and its log line and audit record
    // carry the trace id.
    let err = call(&client, "h__no_such_tool", serde_json::json!({}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no_such_tool"), "{err}");
    let refused = collector
        .span("span of the refused call", |s| {
            s["traceId"] == TRACE_1 && attr(s, "error.type").as_deref() == Some("unknown_tool")
        })
        .await;
    assert_eq!(
        refused["name"], "tools/call",
        "unknown names stay out of span names"
    );
    assert_eq!(refused["status"]["code"], 2, "ERROR status: {refused:#}");
    let log = gw.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("call failed") && l.contains(TRACE_1)),
        "{log}"
    );
    drop(client);
    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let traced = records
        .iter()
        .find(|r| r["name"] == "s__traceparent")
        .expect("audit record of the stdio call");
    assert_eq!(traced["correlation_id"], TRACE_2);
}

#[tokio::test(flavor = "multi_thread")]
async fn context_passes_through_with_tracing_off() {
    let (http_toml, _http_demo) = http_upstream("h", "");
    let gw = Gateway::start(&http_toml);
    let client = traced_client(&gw.url).await;
    let r = call(&client, "h__traceparent", serde_json::json!({}))
        .await
        .unwrap();
    let (up_header, up_meta) = traceparent_of(&first_text(&r));
    // No spans of its own: the caller's context reaches the upstream unchanged.
    let expected = format!("00-{TRACE_1}-{PARENT_1}-01");
    assert_eq!(up_header.as_deref(), Some(expected.as_str()));
    assert_eq!(up_meta.as_deref(), Some(expected.as_str()));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_observability_example_runs_as_documented() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/observability");
    let example = std::fs::read_to_string(format!("{dir}/gateway.toml")).unwrap();
    let (collector, endpoint) = Collector::start().await;
    let shipped = "otlp_endpoint = \"http://127.0.0.1:4318\"";
    assert!(example.contains(shipped), "the README's collector address");
    let config = example.replace(shipped, &format!("otlp_endpoint = {endpoint:?}"));
    let gw = Gateway::start_env(&config, &[("OTEL_BSP_SCHEDULE_DELAY", "50")]);

    // Prometheus scrapes the address the example listens on.
    let prom: Value =
        serde_norway::from_str(&std::fs::read_to_string(format!("{dir}/prometheus.yml")).unwrap())
            .unwrap();
    let target = prom["scrape_configs"][0]["static_configs"][0]["targets"][0]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        example.contains(&format!("listen = \"{target}\"")),
        "{target}"
    );
    assert_eq!(prom["scrape_configs"][0]["metrics_path"], "/metrics");

    let client = traced_client(&gw.url).await;
    call(&client, "demo__echo", serde_json::json!({"text": "hi"}))
        .await
        .unwrap();
    let slow = call(&client, "flaky__slow", serde_json::json!({"ms": 2000}))
        .await
        .refused();
    assert!(slow.contains("\"code\":\"timeout\""), "{slow}");
    call(&client, "demo__nope", serde_json::json!({}))
        .await
        .unwrap_err();

    let metrics = reqwest::get(format!("{}/metrics", gw.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let count = |labels: &[&str]| -> f64 {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("fedgate_calls_total{") && labels.iter().all(|x| l.contains(x))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        count(&["tool=\"demo__echo\"", "outcome=\"ok\""]),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        count(&["tool=\"flaky__slow\"", "outcome=\"timeout\""]),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        count(&["tool=\"_unknown\"", "outcome=\"unknown_tool\""]),
        1.0,
        "{metrics}"
    );

    let server = collector
        .span("the example's echo span", |s| {
            s["name"] == "tools/call demo__echo"
        })
        .await;
    assert_eq!(server["traceId"], TRACE_1);
    assert_eq!(server["service"], "fedgate");
    let audit = std::fs::read_to_string(gw.dir.path().join("audit.jsonl")).unwrap();
    let echo: Value = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["name"] == "demo__echo")
        .expect("audit record of demo__echo");
    assert_eq!(echo["correlation_id"], TRACE_1);
}
