//! `[tracing]`: the OTLP exporter settings.

use super::Ctx;
use crate::telemetry::traces::TracingConfig;

pub(super) fn validate_tracing(
    cx: &mut Ctx<'_>,
    t: toml::Spanned<crate::config::RawTracing>,
) -> Option<TracingConfig> {
    use crate::telemetry::traces::Protocol;
    let at = t.span().start;
    let t = t.into_inner();
    let before = cx.errors.len();
    if !cfg!(feature = "otlp") {
        cx.err_at(
            at,
            format!(
                "[tracing]: {}",
                crate::config::cluster::without_feature("otlp")
            ),
        );
    }
    let protocol = match t.protocol.as_deref() {
        None => None,
        Some("http/protobuf") => Some(Protocol::Protobuf),
        Some("http/json") => Some(Protocol::Json),
        Some(other) => {
            cx.err_at(
                at,
                format!("[tracing] protocol `{other}`: use `http/protobuf` or `http/json`"),
            );
            None
        }
    };
    if let Some(e) = &t.otlp_endpoint
        && !(e.starts_with("http://") || e.starts_with("https://"))
    {
        cx.err_at(
            at,
            format!("[tracing] otlp_endpoint `{e}` is not an http(s) URL"),
        );
    }
    let sample_ratio = t.sample_ratio.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&sample_ratio) {
        cx.err_at(
            at,
            "[tracing] sample_ratio must be between 0.0 and 1.0".into(),
        );
    }
    (cx.errors.len() == before).then(|| TracingConfig {
        endpoint: t.otlp_endpoint,
        protocol,
        service_name: t.service_name.unwrap_or_else(|| "fedgate".into()),
        sample_ratio,
    })
}
