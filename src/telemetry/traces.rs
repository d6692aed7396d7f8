//! OpenTelemetry traces (F14): OTLP over HTTP (protobuf or JSON), off unless `[tracing]` or
//! `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT` turns it on.
//!
//! Every routed request gets a server span, every attempt at an upstream a client span under
//! it. W3C trace context comes in from the request's `_meta.traceparent` (MCP-level, SEP-414)
//! or the HTTP `traceparent` header, and goes out in the forwarded request's `_meta` and, for
//! HTTP upstreams, the `traceparent` header. The trace id is the call's correlation id. With
//! tracing off the spans are no-ops but context still passes through, so a caller's trace
//! continues past fedgate either way.

use std::collections::HashMap;

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::{
    Context,
    propagation::{Extractor, Injector, TextMapPropagator},
    trace::TraceContextExt,
};
use opentelemetry_sdk::{propagation::TraceContextPropagator, trace::SdkTracerProvider};
use rmcp::model::{ClientJsonRpcMessage, GetMeta};

pub use opentelemetry::{
    KeyValue,
    trace::{Span, SpanKind, Status, Tracer},
};

/// The W3C trace context keys, in `_meta` and in HTTP headers alike.
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";
/// W3C baggage: not fedgate's to change; passed on as the caller sent it.
pub const BAGGAGE: &str = "baggage";

/// The instrumentation scope of fedgate's spans.
const SCOPE: &str = "fedgate";

/// How spans are encoded over OTLP/HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `http/protobuf`
    Protobuf,
    /// `http/json`
    Json,
}

/// `[tracing]` after validation.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingConfig {
    /// OTLP/HTTP base URL (`/v1/traces` is appended); `None` = from the OTEL_* environment.
    pub endpoint: Option<String>,
    /// `None` = from `OTEL_EXPORTER_OTLP_PROTOCOL`, else protobuf.
    pub protocol: Option<Protocol>,
    pub service_name: String,
    /// Share of new traces recorded; a caller's sampling decision is followed.
    pub sample_ratio: f64,
}

impl TracingConfig {
    /// Tracing from the environment alone, when no `[tracing]` section is configured.
    pub fn from_env() -> Option<Self> {
        let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
        (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")).then(
            || Self {
                endpoint: None,
                protocol: None,
                service_name: std::env::var("OTEL_SERVICE_NAME")
                    .unwrap_or_else(|_| SCOPE.to_owned()),
                sample_ratio: 1.0,
            },
        )
    }
}

/// Flushes and stops the exporter when dropped (at the end of `serve`/`stdio`).
#[derive(Debug)]
pub struct TracingGuard(SdkTracerProvider);

impl Drop for TracingGuard {
    fn drop(&mut self) {
        // Shutting down waits for the processor's last export, a task of the runtime: a worker
        // that waits hands its other tasks over first (`block_in_place`), so the export runs.
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let done = match multi_thread {
            true => tokio::task::block_in_place(|| self.0.shutdown()),
            false => self.0.shutdown(),
        };
        if let Err(e) = done {
            tracing::warn!("trace export did not finish: {e}");
        }
    }
}

/// Installs the OTLP exporter as the global tracer provider; its batches are exported by a
/// task of the current runtime with the async HTTP client (nothing blocks a worker). Call it
/// from within the runtime.
#[cfg(feature = "otlp")]
pub fn start(cfg: &TracingConfig) -> Result<TracingGuard, super::TelemetryError> {
    use opentelemetry_otlp::WithExportConfig;
    use opentelemetry_sdk::{
        Resource, runtime,
        trace::{Sampler, span_processor_with_async_runtime::BatchSpanProcessor},
    };
    let mut builder = opentelemetry_otlp::SpanExporter::builder().with_http();
    if let Some(endpoint) = &cfg.endpoint {
        builder = builder.with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')));
    }
    match cfg.protocol {
        Some(Protocol::Json) => {
            builder = builder.with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        }
        Some(Protocol::Protobuf) => {
            builder = builder.with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        }
        None if std::env::var_os("OTEL_EXPORTER_OTLP_PROTOCOL").is_none() => {
            builder = builder.with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        }
        None => {}
    }
    let exporter = builder
        .build()
        .map_err(|e| super::TelemetryError::Traces(e.to_string()))?;
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(exporter, runtime::Tokio).build())
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            cfg.sample_ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(cfg.service_name.clone())
                .build(),
        )
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    let _ = tracer();
    ENABLED.store(true, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(
        endpoint = cfg
            .endpoint
            .as_deref()
            .unwrap_or("(from OTEL_* environment)"),
        "exporting traces over OTLP/HTTP"
    );
    Ok(TracingGuard(provider))
}

/// A build without the `otlp` feature exports nothing: asking for it is an error at start.
#[cfg(not(feature = "otlp"))]
pub fn start(_cfg: &TracingConfig) -> Result<TracingGuard, super::TelemetryError> {
    Err(super::TelemetryError::Traces(
        "this fedgate was built without the `otlp` feature; build it with `cargo build --features otlp` (it is on by default)".into(),
    ))
}

/// Set by [`start`]: whether spans are recorded at all.
static ENABLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether an exporter is installed. Without one a span would be a no-op carrying its
/// parent's context, so callers skip making spans and pass the parent on as it is.
pub fn enabled() -> bool {
    ENABLED.load(std::sync::atomic::Ordering::Relaxed)
}

/// fedgate's tracer: made once, after [`start`] installed the provider (spans are only made
/// while serving, which begins after `start`), so calls do not look the provider up each time.
pub fn tracer() -> &'static opentelemetry::global::BoxedTracer {
    static TRACER: std::sync::OnceLock<opentelemetry::global::BoxedTracer> =
        std::sync::OnceLock::new();
    TRACER.get_or_init(|| opentelemetry::global::tracer(SCOPE))
}

/// A new span of fedgate's under `parent`, as the context calls below it run in.
pub fn child(
    parent: &Context,
    name: impl Into<std::borrow::Cow<'static, str>>,
    kind: SpanKind,
    attributes: Vec<KeyValue>,
) -> Context {
    let tracer = tracer();
    let span = tracer
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attributes)
        .start_with_context(tracer, parent);
    parent.with_span(span)
}

/// The caller's trace context: `_meta` first (it travels with the message across any
/// transport), else the HTTP headers of the request that carried it.
pub fn parent(
    meta: &serde_json::Map<String, serde_json::Value>,
    headers: Option<&HeaderMap>,
) -> Context {
    let propagator = TraceContextPropagator::new();
    if meta.contains_key(TRACEPARENT) {
        let cx = propagator.extract(&MetaCarrier(meta));
        if cx.span().span_context().is_valid() {
            return cx;
        }
    }
    match headers {
        Some(h) => propagator.extract(&HeaderCarrier(h)),
        None => Context::new(),
    }
}

/// The trace id of a context, as the 32-hex-digit correlation id; `None` if it has none.
pub fn trace_id(cx: &Context) -> Option<String> {
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

/// Writes the context into a forwarded request's `_meta`, replacing the caller's.
pub fn inject(cx: &Context, meta: &mut serde_json::Map<String, serde_json::Value>) {
    meta.remove(TRACEPARENT);
    meta.remove(TRACESTATE);
    TraceContextPropagator::new().inject_context(cx, &mut MetaCarrier(meta));
}

/// The `traceparent`/`tracestate`/`baggage` headers for an outgoing HTTP message: copied from the
/// request's `_meta`, so the HTTP hop and the MCP hop carry the same context.
pub fn headers_for(message: &ClientJsonRpcMessage, headers: &mut HashMap<HeaderName, HeaderValue>) {
    let ClientJsonRpcMessage::Request(req) = message else {
        return;
    };
    // Read from the request's own `_meta`: no copy of the request per call.
    let meta = req.request.get_meta();
    for key in [TRACEPARENT, TRACESTATE, BAGGAGE] {
        if let Some(value) = meta
            .get(key)
            .and_then(|v| v.as_str())
            .and_then(|s| HeaderValue::from_str(s).ok())
        {
            headers.insert(HeaderName::from_static(key), value);
        }
    }
}

struct MetaCarrier<M>(M);

impl<M: std::ops::Deref<Target = serde_json::Map<String, serde_json::Value>>> Extractor
    for MetaCarrier<M>
{
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

impl Injector for MetaCarrier<&mut serde_json::Map<String, serde_json::Value>> {
    fn set(&mut self, key: &str, value: String) {
        self.0
            .insert(key.to_owned(), serde_json::Value::String(value));
    }
}

struct HeaderCarrier<'a>(&'a HeaderMap);

impl Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn meta_wins_over_headers_and_round_trips() {
        let mut meta = serde_json::Map::new();
        meta.insert(TRACEPARENT.into(), TP.into());
        let mut headers = HeaderMap::new();
        headers.insert(
            TRACEPARENT,
            HeaderValue::from_static("00-11111111111111111111111111111111-2222222222222222-01"),
        );
        let cx = parent(&meta, Some(&headers));
        assert_eq!(
            trace_id(&cx).as_deref(),
            Some("0af7651916cd43dd8448eb211c80319c")
        );
        let mut out = serde_json::Map::new();
        inject(&cx, &mut out);
        assert_eq!(out[TRACEPARENT], TP);
    }

    #[test]
    fn malformed_context_is_ignored() {
        let mut meta = serde_json::Map::new();
        meta.insert(TRACEPARENT.into(), "00-zz-yy-01".into());
        let cx = parent(&meta, None);
        assert_eq!(trace_id(&cx), None);
        let mut headers = HeaderMap::new();
        headers.insert(TRACEPARENT, HeaderValue::from_static("garbage"));
        assert_eq!(trace_id(&parent(&meta, Some(&headers))), None);
    }
}
