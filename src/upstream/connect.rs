//! Opening one connection to an upstream: transport by kind, then the era's handshake.

use super::error::UpstreamError;
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
use crate::{
    config::{Era, TransportSpec, UpstreamSpec},
    policy::token::Placement,
    upstream::http_client::{Injection, UpstreamHttpClient},
};

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
/// Spawns a stdio upstream process; its credential, if any, goes into its environment.
pub async fn spawn_stdio(spec: &UpstreamSpec) -> Result<ProcessGuard, UpstreamError> {
    let TransportSpec::Stdio(p) = &spec.transport else {
        return Err(UpstreamError::NotStdio);
    };
    let mut process = p.clone();
    if let Some(inj) = &spec.credential {
        let var = inj.env_var.clone().unwrap_or_else(|| "MCP_TOKEN".into());
        let token = inj.credential.token().await?;
        process.env.insert(var, token.expose().to_owned().into());
    }
    spawn::spawn(&spec.name, &process, true).map_err(|e| UpstreamError::Spawn {
        command: p.command.clone(),
        detail: e.to_string(),
    })
}

/// How much earlier than the startup timeout a stdio handshake gives up: room for the
/// supervisor to collect the process's exit status and last words.
const HANDSHAKE_MARGIN: std::time::Duration = std::time::Duration::from_millis(800);

/// Handshakes over an already spawned stdio process.
pub async fn connect_stdio(
    spec: &UpstreamSpec,
    proc: &mut ProcessGuard,
    client: UpstreamClient,
) -> Result<Established, UpstreamError> {
    let stdout = proc
        .child
        .stdout
        .take()
        .ok_or(UpstreamError::NoPipe("stdout"))?;
    let stdin = proc
        .child
        .stdin
        .take()
        .ok_or(UpstreamError::NoPipe("stdin"))?;
    let table = client.inflight.clone();
    let non_json = super::stdio_wire::NonJson::default();
    let limit = transport_limit(spec).unwrap_or(rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH);
    let wire =
        super::stdio_wire::StdioWire::new(stdout, stdin, &spec.name, limit, non_json.clone());
    let transport = Tap::new(wire, table);
    // Bounded inside the supervisor's startup timeout, leaving time to collect the exit status
    // after a failure, so a server that never speaks MCP is reported with what it wrote.
    let limit = spec
        .startup_timeout
        .saturating_sub(HANDSHAKE_MARGIN)
        .max(spec.startup_timeout / 2);
    match tokio::time::timeout(limit, handshake(spec, client, transport)).await {
        Ok(r) => r.map_err(|e| match e {
            UpstreamError::Handshake { detail, .. } => UpstreamError::Handshake {
                detail,
                stdout: non_json.suffix(),
            },
            other => other,
        }),
        Err(_) => Err(UpstreamError::NoHandshake {
            limit,
            stdout: non_json.suffix(),
        }),
    }
}

/// Connects to a Streamable HTTP upstream: shared, or as one person (`person`: their token,
/// on every request of the connection). A 401 to a request without a credential, or to the
/// person's, is [`UpstreamError::Unauthorized`] / [`UpstreamError::PersonRefused`].
pub async fn connect_http(
    spec: &UpstreamSpec,
    url: &str,
    headers: &std::collections::BTreeMap<String, crate::secret::Configured>,
    client: UpstreamClient,
    person: Option<Arc<arc_swap::ArcSwap<crate::secret::Secret>>>,
) -> Result<Established, UpstreamError> {
    let mut custom = HashMap::new();
    for (k, v) in headers {
        let bad = |e: &dyn std::fmt::Display| UpstreamError::Header(k.clone(), e.to_string());
        let name = HeaderName::try_from(k.as_str()).map_err(|e| bad(&e))?;
        let value = HeaderValue::try_from(v.raw()).map_err(|e| bad(&e))?;
        custom.insert(name, value);
    }
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(Arc::<str>::from(url)).custom_headers(custom);
    if let Some(limit) = transport_limit(spec) {
        config = config
            .max_json_response_size(limit)
            .max_sse_event_size(limit);
    }
    let table = client.inflight.clone();
    let refused = Arc::new(parking_lot::Mutex::new(None));
    let personal = person.is_some();
    let http = UpstreamHttpClient {
        inner: http_client(spec)?,
        injection: spec.credential.as_ref().map(|inj| Injection {
            credential: inj.credential.clone(),
            placement: inj.placement.clone(),
        }),
        person,
        refused: refused.clone(),
    };
    let transport = Tap::new(
        StreamableHttpClientTransport::with_client(http, config),
        table,
    );
    handshake(spec, client, transport).await.map_err(|e| {
        use crate::upstream::http_client::Refused;
        match (refused.lock().take(), personal) {
            (Some(Refused::Unauthorized), true) => UpstreamError::PersonRefused,
            (Some(Refused::Scope(s)), true) => UpstreamError::PersonNeedsScope(s),
            (Some(Refused::Unauthorized), false) => UpstreamError::Unauthorized,
            _ => e,
        }
    })
}

/// The most an upstream message may hold before the transport drops it, so a tier's response
/// limit also bounds buffering. Generous against the tier limit, which `forward` enforces with
/// a clear error; a message beyond this one never completes (the call then times out).
pub(super) fn transport_limit(spec: &UpstreamSpec) -> Option<usize> {
    const FLOOR_BYTES: usize = 64 * 1024;
    spec.tier
        .max_response_bytes
        .map(|b| b.saturating_mul(2).max(FLOOR_BYTES))
}

/// rmcp's default client disables connection pooling (a new TCP connection per request); a
/// gateway forwarding many calls keeps connections alive, and never follows redirects with the
/// credentials it injects.
fn http_client(spec: &UpstreamSpec) -> Result<reqwest::Client, UpstreamError> {
    let builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    let builder = match &spec.tls {
        Some(tls) => builder.tls_backend_preconfigured(
            crate::config::tls::client_config(tls).map_err(|e| UpstreamError::HttpClient(e.0))?,
        ),
        None => builder,
    };
    builder
        .build()
        .map_err(|e| UpstreamError::HttpClient(e.to_string()))
}

async fn handshake<T>(
    spec: &UpstreamSpec,
    client: UpstreamClient,
    transport: T,
) -> Result<Established, UpstreamError>
where
    T: rmcp::transport::Transport<RoleClient> + 'static,
{
    let service = client
        .serve_with_lifecycle(transport, lifecycle(spec.era))
        .await
        .map_err(|e| UpstreamError::Handshake {
            detail: crate::error::plain(&e),
            stdout: String::new(),
        })?;
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
    headers: &std::collections::BTreeMap<String, crate::secret::Configured>,
    client: UpstreamClient,
) -> Result<Established, UpstreamError> {
    // Legacy SSE: the credential is fixed for the connection (taken at connect).
    let mut headers: std::collections::BTreeMap<String, String> = headers
        .iter()
        .map(|(k, v)| (k.clone(), v.raw().to_owned()))
        .collect();
    if let Some(inj) = &spec.credential {
        let token = inj.credential.token().await?;
        let (name, value) = match &inj.placement {
            Placement::Bearer => (
                "authorization".to_owned(),
                format!("Bearer {}", token.expose()),
            ),
            Placement::Header(h) => (h.as_str().to_owned(), token.expose().to_owned()),
        };
        headers.insert(name, value);
    }
    // The upstream's own client: its `tls` (private CA, client certificate), no redirects.
    let inner = super::sse::SseTransport::connect(http_client(spec)?, url, &headers)
        .await
        .map_err(|e| UpstreamError::Sse(e.to_string()))?;
    let table = client.inflight.clone();
    let mut legacy = spec.clone();
    legacy.era = Era::Legacy;
    handshake(&legacy, client, Tap::new(inner, table)).await
}
