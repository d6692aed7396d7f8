//! Opening one connection to an upstream: transport by kind, then the era's handshake.

use std::{collections::HashMap, sync::Arc};

use http::{HeaderName, HeaderValue};
use rmcp::{
    RoleClient,
    model::ProtocolVersion,
    service::{ClientLifecycleMode, ClientServiceExt, RunningService},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};

use super::{
    DetectedEra,
    client::UpstreamClient,
    spawn::{self, ProcessGuard},
    tap::Tap,
};
use crate::config::{Era, TransportSpec, UpstreamSpec};

/// A connected upstream: the rmcp service and, for stdio, the process behind it.
pub struct Established {
    pub service: RunningService<RoleClient, UpstreamClient>,
    pub era: DetectedEra,
    pub protocol_version: String,
    pub server: Option<String>,
}

fn lifecycle(era: Era) -> ClientLifecycleMode {
    let modern = vec![ProtocolVersion::V_2026_07_28];
    match era {
        Era::Legacy => ClientLifecycleMode::Initialize,
        Era::Modern => ClientLifecycleMode::Discover {
            preferred_versions: modern,
        },
        Era::Auto => ClientLifecycleMode::Auto {
            preferred_versions: modern,
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        },
    }
}

/// Spawns a stdio upstream process.
pub fn spawn_stdio(spec: &UpstreamSpec) -> Result<ProcessGuard, String> {
    match &spec.transport {
        TransportSpec::Stdio(p) => spawn::spawn(&spec.name, p, true)
            .map_err(|e| format!("cannot start `{}`: {e}", p.command)),
        _ => Err("not a stdio upstream".into()),
    }
}

/// Handshakes over an already spawned stdio process.
pub async fn connect_stdio(
    spec: &UpstreamSpec,
    proc: &mut ProcessGuard,
    client: UpstreamClient,
) -> Result<Established, String> {
    let stdout = proc.child.stdout.take().ok_or("child has no stdout")?;
    let stdin = proc.child.stdin.take().ok_or("child has no stdin")?;
    let table = client.inflight.clone();
    let transport = Tap::new(
        rmcp::transport::async_rw::AsyncRwTransport::new_client(stdout, stdin),
        table,
    );
    handshake(spec, client, transport).await
}

/// Connects to a Streamable HTTP upstream.
pub async fn connect_http(
    spec: &UpstreamSpec,
    url: &str,
    headers: &std::collections::BTreeMap<String, String>,
    client: UpstreamClient,
) -> Result<Established, String> {
    let mut custom = HashMap::new();
    for (k, v) in headers {
        let name = HeaderName::try_from(k.as_str()).map_err(|e| format!("header `{k}`: {e}"))?;
        let value = HeaderValue::try_from(v.as_str()).map_err(|e| format!("header `{k}`: {e}"))?;
        custom.insert(name, value);
    }
    let config =
        StreamableHttpClientTransportConfig::with_uri(Arc::<str>::from(url)).custom_headers(custom);
    let table = client.inflight.clone();
    let transport = Tap::new(
        StreamableHttpClientTransport::with_client(http_client()?, config),
        table,
    );
    handshake(spec, client, transport).await
}

/// rmcp's default client disables connection pooling (a new TCP connection per request); a
/// gateway forwarding many calls keeps connections alive, and never follows redirects with the
/// credentials it injects.
fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

async fn handshake<T>(
    spec: &UpstreamSpec,
    client: UpstreamClient,
    transport: T,
) -> Result<Established, String>
where
    T: rmcp::transport::Transport<RoleClient> + 'static,
{
    let service = client
        .serve_with_lifecycle(transport, lifecycle(spec.era))
        .await
        .map_err(|e| format!("handshake failed: {e}"))?;
    // One connection serves many clients: rmcp's response cache would mix them up.
    service
        .peer()
        .set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
        .await;
    let info = service.peer().peer_info();
    let protocol_version = info
        .as_ref()
        .map(|i| i.protocol_version.to_string())
        .unwrap_or_default();
    let era = if info
        .as_ref()
        .is_some_and(|i| i.protocol_version.has_initialize())
    {
        DetectedEra::Handshake
    } else {
        DetectedEra::Stateless
    };
    let server = info
        .as_ref()
        .and_then(|i| i.server_info.as_ref())
        .map(|s| format!("{} {}", s.name, s.version));
    Ok(Established {
        service,
        era,
        protocol_version,
        server,
    })
}

/// Connects to a legacy HTTP+SSE upstream (always the handshake era).
pub async fn connect_sse(
    spec: &UpstreamSpec,
    url: &str,
    headers: &std::collections::BTreeMap<String, String>,
    client: UpstreamClient,
) -> Result<Established, String> {
    let inner = super::sse::SseTransport::connect(url, headers)
        .await
        .map_err(|e| e.to_string())?;
    let table = client.inflight.clone();
    let mut legacy = spec.clone();
    legacy.era = Era::Legacy;
    handshake(&legacy, client, Tap::new(inner, table)).await
}
