//! `fedgate serve` and `fedgate stdio`.

use super::CliError;
use std::{path::Path, process::ExitCode, sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    config::{self, Snapshot},
    server::core::Core,
    server::{http, mcp::Gateway, reload::Reloader},
    telemetry::{audit::Audit, traces},
    upstream::pool::Pool,
};

/// How long shutdown waits for upstream processes to be stopped.
const STOP_GRACE: Duration = Duration::from_secs(5);

pub(super) fn load(path: &Path) -> Result<Snapshot, CliError> {
    config::load(path).map_err(invalid)
}

/// For commands that only read: secrets not resolvable here are warnings (printed).
pub(super) fn load_for_reading(path: &Path) -> Result<Snapshot, CliError> {
    let snapshot = config::load_for_reading(path).map_err(invalid)?;
    for w in &snapshot.warnings {
        eprintln!("warning: {w}");
    }
    Ok(snapshot)
}

fn invalid(diags: Vec<config::Diagnostic>) -> CliError {
    let mut msg = String::from("invalid config:");
    for d in diags {
        msg.push_str(&format!("\n  {d}"));
    }
    CliError::Message(msg)
}

/// The longest startup timeout of any upstream: the bound for "settled".
pub(super) fn settle_bound(s: &Snapshot) -> Duration {
    s.upstreams
        .iter()
        .map(|u| u.startup_timeout)
        .max()
        .unwrap_or_default()
}

pub async fn serve(path: &Path, listen: Option<&str>) -> Result<ExitCode, CliError> {
    let mut snapshot = load(path)?;
    let _traces = start_tracing(&snapshot)?;
    if let Some(l) = listen {
        snapshot.gateway.listen = l
            .parse()
            .map_err(|_| format!("--listen: `{l}` is not an address like 127.0.0.1:8930"))?;
    }
    let listener = TcpListener::bind(snapshot.gateway.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", snapshot.gateway.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    let auth = &snapshot.auth;
    if auth.open {
        if addr.ip().is_loopback() {
            tracing::info!(
                "no [auth] configured: every caller has full access (listening on loopback only)"
            );
        } else {
            tracing::warn!("no [auth] configured: every caller on {addr} has full access");
        }
    } else if auth.anonymous.is_some() {
        tracing::info!("callers without credentials are accepted as `anonymous` with its roles");
    }
    let core = Core::new(&snapshot).await?;
    crate::server::core::report_flow_problems(&snapshot);
    core.adopt_credential_kinds(&snapshot).await;
    core.start();
    let pool = core.pool().clone();
    let audit = match &snapshot.audit {
        Some(cfg) => Some(
            Audit::start(cfg, Some(core.metrics().audit_dropped.clone()))
                .await
                .map_err(CliError::from)?,
        ),
        None => None,
    };
    let stack = core.stack(audit.clone());
    let gateway = Gateway::new(
        core.mcp_parts(),
        stack.clone(),
        snapshot.gateway.page_size.get(),
    );
    let reloader = Reloader::new(path, core.clone(), snapshot.clone());
    let stop_accepting = CancellationToken::new();
    tokio::spawn(reloader.clone().on_sighup(stop_accepting.clone()));
    if snapshot.gateway.watch_config {
        tokio::spawn(reloader.clone().on_file_change(stop_accepting.clone()));
    }
    let close_all = CancellationToken::new();
    let server = tokio::spawn({
        let parts = core.edge_parts();
        let settings = snapshot.gateway.clone();
        let (stop_accepting, close_all) = (stop_accepting.clone(), close_all.clone());
        async move {
            http::serve(
                listener,
                gateway,
                parts,
                &settings,
                stop_accepting,
                close_all,
            )
            .await
        }
    });
    pool.wait_settled(settle_bound(&snapshot)).await;
    if let Some(flows) = core.flows() {
        flows.report_catalog_problems();
        flows.resume_all().await;
        flows.start_leases();
    }
    let ready = pool
        .upstreams()
        .iter()
        .filter(|u| u.connection().is_some())
        .count();
    let admin_note = match &snapshot.admin {
        Some(a) => {
            let l = TcpListener::bind(a.listen)
                .await
                .map_err(|e| format!("cannot listen on {} (admin): {e}", a.listen))?;
            let admin_addr = l
                .local_addr()
                .map_err(|e| format!("cannot read the admin address: {e}"))?;
            tokio::spawn(crate::server::admin::serve(
                l,
                core.admin_parts(stack),
                reloader.clone(),
                audit.clone(),
                close_all.clone(),
            ));
            // The console is what an operator opens in a browser; `/admin` needs the token.
            let console = if a.console {
                format!(", console at http://{admin_addr}/console")
            } else {
                String::new()
            };
            format!("{console}, admin at http://{admin_addr}/admin")
        }
        None => String::new(),
    };
    let scheme = if snapshot.gateway.tls.is_some() {
        "https"
    } else {
        "http"
    };
    println!(
        "fedgate ready: listening on {scheme}://{addr}{} ({ready}/{} upstreams ready{admin_note})",
        http::MCP_PATH,
        pool.upstreams().len()
    );
    super::startup_pages::release_after_startup();
    wait_for_signal().await;
    // Stop taking connections, let calls in flight finish (bounded), then close sessions and
    // stop the upstreams.
    tracing::info!("shutting down: draining calls in flight");
    stop_accepting.cancel();
    let grace = reloader.current().gateway.shutdown_grace;
    if !core.wait_idle(grace).await {
        tracing::warn!(
            ?grace,
            "calls still in flight after the shutdown grace period"
        );
    }
    close_all.cancel();
    if let Some(flows) = core.flows() {
        flows.close().await;
    }
    stop(&pool).await;
    let _ = server.await;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

pub async fn stdio(path: &Path, view: Option<&str>) -> Result<ExitCode, CliError> {
    alone(path, view, |gateway| async move {
        crate::server::stdio::serve(gateway)
            .await
            .map_err(CliError::from)
    })
    .await
}

/// Runs the gateway on the config at `path` with `front` as its only front end, until `front`
/// ends or a signal comes: `fedgate stdio`, and the transport tests' reference edge (rmcp's own
/// Streamable HTTP service over the same handler, `fedgate-testkit rmcp-edge`).
pub async fn alone<F, Fut>(path: &Path, view: Option<&str>, front: F) -> Result<ExitCode, CliError>
where
    F: FnOnce(Gateway) -> Fut,
    Fut: std::future::Future<Output = Result<(), CliError>>,
{
    let snapshot = load(path)?;
    let scope = match view {
        None => None,
        Some(name) => Some(
            snapshot
                .views
                .get(name)
                .map(|v| v.scope.clone())
                .ok_or_else(|| {
                    format!(
                        "no view is named `{name}` (views: {})",
                        snapshot.views.names().join(", ")
                    )
                })?,
        ),
    };
    let _traces = start_tracing(&snapshot)?;
    let core = Core::new(&snapshot).await?;
    core.start();
    let pool = core.pool().clone();
    pool.wait_settled(settle_bound(&snapshot)).await;
    let audit = match &snapshot.audit {
        Some(cfg) => Some(
            Audit::start(cfg, Some(core.metrics().audit_dropped.clone()))
                .await
                .map_err(CliError::from)?,
        ),
        None => None,
    };
    let mut gateway = Gateway::new(
        core.mcp_parts(),
        core.stack(audit),
        snapshot.gateway.page_size.get(),
    );
    if let Some(scope) = scope {
        gateway = gateway.through(scope);
    }
    if let Some(flows) = core.flows() {
        flows.resume_all().await;
        flows.start_leases();
    }
    let watch = snapshot.gateway.watch_config;
    let reloader = Reloader::new(path, core.clone(), snapshot);
    let stop_watching = CancellationToken::new();
    tokio::spawn(reloader.clone().on_sighup(stop_watching.clone()));
    if watch {
        tokio::spawn(reloader.on_file_change(stop_watching.clone()));
    }
    let result = tokio::select! {
        r = front(gateway) => r,
        _ = wait_for_signal() => Ok(()),
    };
    stop_watching.cancel();
    if let Some(flows) = core.flows() {
        flows.close().await;
    }
    stop(&pool).await;
    result.map(|()| ExitCode::SUCCESS)
}

/// Starts the OTLP exporter when tracing is configured; it flushes when the guard drops.
fn start_tracing(s: &Snapshot) -> Result<Option<traces::TracingGuard>, CliError> {
    s.tracing
        .as_ref()
        .map(traces::start)
        .transpose()
        .map_err(CliError::from)
}

/// Stops every upstream and waits (bounded) until their processes are gone.
pub(super) async fn stop(pool: &Arc<Pool>) {
    pool.shutdown();
    pool.wait_stopped(STOP_GRACE).await;
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => {}
                _ = i.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
