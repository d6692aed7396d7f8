//! The demo upstream MCP server that fedgate builds and its shipped config runs.
//!
//! It exercises what a gateway must forward: read-only and writing tools, progress, a slow tool
//! that honours cancellation, elicitation (request in the handshake era, input-required result
//! in the stateless era), a tool list that changes at runtime, prompts with completion,
//! resources and a template. Flags make it start slowly, fail to start or crash on demand.
#![allow(deprecated)] // resources/subscribe is legacy-only but still served

mod flow_tools;
pub mod guardrail;
mod handler;
mod input;
mod per_user;
mod research;
mod schemas;
mod sse;
mod tools;
pub use tools::filler_word;

/// Why a demo server could not start or serve (the operator's terminal shows it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DemoError(pub String);

impl From<String> for DemoError {
    fn from(s: String) -> Self {
        DemoError(s)
    }
}

impl From<&str> for DemoError {
    fn from(s: &str) -> Self {
        DemoError(s.to_owned())
    }
}

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64},
    },
    time::Duration,
};

use parking_lot::Mutex;
use rmcp::{RoleServer, ServiceExt, service::Peer};

/// The demo as the product ships it: the shipped config's and the examples' upstream.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Serve Streamable HTTP on this address instead of stdio.
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Serve the legacy HTTP+SSE protocol on this address (GET /sse, POST /message).
    #[arg(long)]
    sse: Option<SocketAddr>,
    /// Name reported in serverInfo.
    #[arg(long, default_value = "fedgate-demo")]
    name: String,
    /// URI scheme of its resources (default: the name).
    #[arg(long)]
    scheme: Option<String>,
    /// Also serve the fault-injection and protocol-probe tools the tests use (`crash`, `freeze`,
    /// `huge`, `pid`, `stray`, …); without it the server offers only its product tools.
    #[arg(long)]
    faults: bool,
    /// Serve a poisoned tool (`fetch_page`: hidden tag characters and an exfiltration
    /// instruction in its description), and make `evolve` poison `echo`'s description.
    #[arg(long)]
    poisoned: bool,
    /// Serve the research-decision tools (`collect`, `verify`, `compare`, `decide`;
    /// examples/stages) instead of the demo's own.
    #[arg(long)]
    research: bool,
    /// HTTP only: act as the person whose personal token comes with a call (`person=token`
    /// lines, read per request); serves `whoami` instead of the demo's own tools.
    #[arg(long)]
    user_tokens: Option<std::path::PathBuf>,
}

/// What only the tests ask of the demo (slow or failing starts, crashes, changed or broken
/// definitions, a bearer gate, an OAuth resource server, a filler catalogue): flags of
/// `fedgate-testkit demo-upstream`, never of `fedgate`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TestModes {
    /// Wait this long before serving (a slow upstream).
    #[arg(long, default_value_t = 0)]
    start_delay_ms: u64,
    /// Exit with an error instead of serving (an upstream that fails to start).
    #[arg(long)]
    fail_start: bool,
    /// Fail to start while this file exists (an upstream whose cause gets fixed).
    #[arg(long)]
    fail_start_while: Option<std::path::PathBuf>,
    /// HTTP only: answer 401 unless `Authorization: Bearer <content of this file>`.
    #[arg(long)]
    require_bearer_file: Option<std::path::PathBuf>,
    /// Start with the changed ("v2") definition of `echo`.
    #[arg(long)]
    evolved: bool,
    /// Ask the client for its roots as soon as a session is initialized (before any call).
    #[arg(long)]
    roots_at_start: bool,
    /// Also serve `broken_schema`, a tool whose input schema does not compile.
    #[arg(long)]
    broken_schema: bool,
    /// Exit after this many tool calls (crash on demand).
    #[arg(long)]
    crash_after: Option<u64>,
    /// Serve this many generated tools (`tool_000`, …) instead of the demo's own: a large
    /// catalogue for scale measurements.
    #[arg(long, default_value_t = 0)]
    filler_tools: usize,
    /// HTTP only: act as the person whose OAuth access token (of this issuer, checked at its
    /// userinfo endpoint) comes with a call; publishes RFC 9728 metadata naming the issuer.
    #[arg(long, conflicts_with = "user_tokens")]
    oauth_issuer: Option<String>,
    /// With `--oauth-issuer`: a token must carry the `profile` scope (its userinfo names the
    /// person); one without gets 403 `insufficient_scope` naming `openid profile`.
    #[arg(long, requires = "oauth_issuer")]
    oauth_require_profile: bool,
}

#[derive(Debug, Default)]
struct State {
    notes: Mutex<BTreeMap<String, String>>,
    extra: AtomicBool,
    evolved: AtomicBool,
    calls: AtomicU64,
    cancelled: AtomicU64,
    crash_after: Option<u64>,
    broken_schema: bool,
    roots_at_start: bool,
    filler_tools: usize,
    /// `--faults`: the test tools are served too.
    faults: bool,
    /// `--poisoned`.
    poisoned: bool,
    /// `--research`.
    research: bool,
    /// `--user-tokens` or `--oauth-issuer`: `whoami` only, acting as the caller's person.
    people: bool,
    /// What asking for roots at startup gave (with `--roots-at-start`).
    startup_roots: Mutex<Option<String>>,
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// Resource subscriptions held now (`resources/subscribe` minus `unsubscribe`).
    subscriptions: std::sync::atomic::AtomicI64,
    /// Open subscriptions/listen streams (stateless era).
    sinks: Mutex<Vec<rmcp::service::SubscriptionSink>>,
}

#[derive(Debug, Clone)]
struct Demo {
    name: String,
    scheme: String,
    state: Arc<State>,
}

/// Serves the demo; `modes` is [`TestModes::default`] for the product.
pub async fn run(args: DemoArgs, modes: TestModes) -> Result<ExitCode, DemoError> {
    if modes.start_delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(modes.start_delay_ms)).await;
    }
    if modes.fail_start {
        eprintln!("demo upstream: failing to start as asked (--fail-start)");
        return Ok(ExitCode::from(2));
    }
    if let Some(path) = modes.fail_start_while.as_ref().filter(|p| p.exists()) {
        eprintln!(
            "demo upstream: failing to start while {} exists",
            path.display()
        );
        return Ok(ExitCode::from(2));
    }
    let demo = Demo {
        name: args.name.clone(),
        scheme: args.scheme.clone().unwrap_or_else(|| args.name.clone()),
        state: Arc::new(State {
            crash_after: modes.crash_after,
            broken_schema: modes.broken_schema,
            roots_at_start: modes.roots_at_start,
            filler_tools: modes.filler_tools,
            faults: args.faults,
            poisoned: args.poisoned,
            research: args.research,
            people: args.user_tokens.is_some() || modes.oauth_issuer.is_some(),
            evolved: AtomicBool::new(modes.evolved),
            ..Default::default()
        }),
    };
    if let Some(addr) = args.http {
        let (gate, issuer) = match (&args.user_tokens, &modes.oauth_issuer) {
            (Some(file), _) => (Some(per_user::token_gate(file.clone())), None),
            (None, Some(issuer)) => (
                Some(per_user::oauth_gate(issuer, modes.oauth_require_profile).await?),
                Some(issuer),
            ),
            (None, None) => (None, None),
        };
        let bearer_file = modes.require_bearer_file.clone();
        return serve_http(addr, demo, bearer_file, gate, issuer.cloned()).await;
    }
    if let Some(addr) = args.sse {
        return sse::serve(addr, demo).await;
    }
    let running = demo
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("demo upstream: {e}"))?;
    let _ = running.waiting().await;
    Ok(ExitCode::SUCCESS)
}

async fn serve_http(
    addr: SocketAddr,
    demo: Demo,
    require_bearer: Option<std::path::PathBuf>,
    gate: Option<crate::server::http::Gate>,
    oauth_issuer: Option<String>,
) -> Result<ExitCode, DemoError> {
    use rmcp::transport::{
        StreamableHttpServerConfig, StreamableHttpService,
        streamable_http_server::session::local::LocalSessionManager,
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("demo upstream: cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let service = StreamableHttpService::new(
        move || Ok(demo.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    println!("demo upstream listening on http://{local}/mcp");
    // `--require-bearer-file`: only `Authorization: Bearer <file content>` gets through, read
    // per request, so a test can rotate the accepted token.
    let gate = gate.or(require_bearer.map(|path| -> crate::server::http::Gate {
        Arc::new(move |headers: &http::HeaderMap| {
            let want = std::fs::read_to_string(&path).unwrap_or_default();
            let ok = headers
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v == format!("Bearer {}", want.trim()));
            let verdict = if ok {
                crate::server::http::Verdict::Pass
            } else {
                crate::server::http::Verdict::Refuse
            };
            Box::pin(async move { verdict })
        })
    }));
    let metadata = oauth_issuer.map(|i| per_user::resource_metadata(local, &i));
    crate::server::http::serve_plain(listener, service, gate, metadata)
        .await
        .map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
