//! One task per upstream: connect, serve, notice the end, restart with backoff and jitter.
#![allow(deprecated)] // logging/setLevel is deprecated by SEP-2577 but handshake-era upstreams use it

use super::error::UpstreamError;
use std::{sync::Arc, time::Duration};

use rmcp::{
    RoleClient,
    model::{LoggingLevel, SetLevelRequestParams},
    service::Peer,
};
use tokio::{sync::mpsc, time::Instant};

use super::Changed;
use super::{
    Connection, DetectedEra, Phase, Upstream,
    client::{UpstreamClient, UpstreamEvent},
    connect::{self, Established},
    inflight::Inflight,
    pool::Pool,
    spawn::ProcessGuard,
};
use crate::{config::TransportSpec, policy::retry::backoff, router::catalog::Lists};

/// How long a closed connection waits for its process's exit status.
const EXIT_STATUS_WAIT: Duration = Duration::from_millis(500);

/// A connection (or listen stream) that stayed up this long resets the consecutive-failure
/// count: what fails after it starts a new episode, logged anew.
pub(super) const STABLE_AFTER: Duration = Duration::from_secs(30);
/// First pause between connection attempts to an http upstream that is not listening yet.
const CONNECT_RETRY_START: Duration = Duration::from_millis(50);
const CONNECT_RETRY_MAX: Duration = Duration::from_millis(1000);

pub(super) async fn run(pool: Arc<Pool>, up: Arc<Upstream>) {
    // What a reload may swap without a restart is read from `up.spec()` where it is used;
    // everything read from this copy (transport, startup, restart policy) restarts on change.
    let spec = up.spec();
    pool.metrics().know_upstream(up.name());
    let shutdown = up.stop_token().clone();
    let mut consecutive: u32 = 0;
    let mut launched: Option<ProcessGuard> = None;
    loop {
        let inflight = Arc::new(Inflight::default());
        let (ev_tx, mut ev_rx) = mpsc::unbounded_channel();
        let client = UpstreamClient {
            upstream: Arc::from(spec.name.as_str()),
            inflight: inflight.clone(),
            events: ev_tx,
        };
        let attempt = tokio::select! {
            r = tokio::time::timeout(spec.startup_timeout, establish(&up, client, &mut launched)) => r,
            _ = shutdown.cancelled() => break,
        };
        let outcome = match attempt {
            Ok(Ok((est, mut proc))) => {
                let since = Instant::now();
                // A stdio child, or the launched server of an http/sse upstream: its exit ends
                // the connection (and the launch is started again) like a crash of a stdio child.
                let watched = proc.as_mut().or(launched.as_mut());
                let reason = serve(&pool, &up, est, inflight, &mut ev_rx, watched).await;
                if let Some(p) = proc {
                    p.stop().await;
                }
                if since.elapsed() >= STABLE_AFTER {
                    consecutive = 0;
                }
                reason
            }
            Ok(Err(UpstreamError::Unauthorized)) if up.per_user() => {
                let reason = serve_signed_in_only(&pool, &up).await;
                consecutive = 0;
                reason
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("did not become ready within {:?}", spec.startup_timeout),
        };
        if shutdown.is_cancelled() {
            break;
        }
        // Client libraries print the URL in their errors: not its userinfo or secret query.
        let outcome = match spec.transport.url() {
            Some(url) => crate::secret::hide_url_secrets(&outcome, url),
            None => outcome,
        };
        consecutive += 1;
        // Past `max_restarts` in a row the upstream is failed, but parked, not abandoned: it
        // is tried again at the longest backoff, so it comes back once its cause is fixed.
        let parked = consecutive > spec.restart.max_restarts;
        let delay = if parked {
            spec.restart.max
        } else {
            backoff(
                consecutive,
                spec.restart.base,
                spec.restart.max,
                spec.restart.base,
            )
        };
        // One episode of failures (until a connection stays up for STABLE_AFTER) is logged
        // once as a warning and once more if it outlasts `max_restarts`, however long it
        // flaps; every attempt in between is a debug line (and `/readyz` shows the latest).
        if consecutive == spec.restart.max_restarts + 1 {
            tracing::error!(upstream = %spec.name, "upstream failed {consecutive} times in a row; trying again every {:?}: {outcome}", spec.restart.max);
        } else if consecutive == 1 {
            tracing::warn!(upstream = %spec.name, "upstream down: {outcome}; trying again in {delay:?}, then with backoff");
        } else {
            tracing::debug!(upstream = %spec.name, attempt = consecutive, "upstream still down: {outcome}");
        }
        let next = chrono::Utc::now() + delay;
        up.update(|s| {
            s.phase = if parked {
                Phase::Failed
            } else {
                Phase::Restarting
            };
            s.last_error = Some(if parked {
                format!(
                    "{outcome} (failed {consecutive} times in a row; retried every {:?})",
                    spec.restart.max
                )
            } else {
                outcome
            });
            s.next_attempt_at = Some(next.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        });
        pool.status_changed();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.cancelled() => break,
        }
        up.update(|s| s.restarts += 1);
        pool.metrics().upstream_restarted(up.name());
    }
    if let Some(p) = launched.take() {
        p.stop().await;
    }
    up.update(|s| s.phase = Phase::Stopped);
    pool.status_changed();
}

/// Starts the process if any, then connects and handshakes.
async fn establish(
    up: &Upstream,
    client: UpstreamClient,
    launched: &mut Option<ProcessGuard>,
) -> Result<(Established, Option<ProcessGuard>), UpstreamError> {
    let spec = &up.spec();
    match &spec.transport {
        TransportSpec::Stdio(_) => {
            let mut proc = connect::spawn_stdio(spec).await?;
            match connect::connect_stdio(spec, &mut proc, client).await {
                Ok(est) => Ok((est, Some(proc))),
                Err(e) => Err(with_exit(e, &mut proc).await),
            }
        }
        TransportSpec::Http {
            url,
            headers,
            launch,
        }
        | TransportSpec::Sse {
            url,
            headers,
            launch,
        } => {
            if let Some(l) = launch {
                super::launch::ensure(spec, l, url, launched).await?;
                super::launch::wait_listening(url, launched).await?;
            }
            let sse = matches!(spec.transport, TransportSpec::Sse { .. });
            let mut pause = CONNECT_RETRY_START;
            loop {
                let r = if sse {
                    connect::connect_sse(spec, url, headers, client.clone()).await
                } else {
                    connect::connect_http(spec, url, headers, client.clone(), None).await
                };
                match r {
                    Ok(est) => {
                        super::launch::still_running(launched)?;
                        return Ok((est, None));
                    }
                    // A launched server may not listen yet; the startup timeout bounds this.
                    Err(e) if launch.is_some() => {
                        tracing::debug!(upstream = %spec.name, "not reachable yet: {e}");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(CONNECT_RETRY_MAX);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

/// A server that dies during its start usually says why on stderr: its exit status and last
/// lines tell more than the handshake error they caused.
async fn with_exit(error: UpstreamError, proc: &mut ProcessGuard) -> UpstreamError {
    match tokio::time::timeout(EXIT_STATUS_WAIT, proc.child.wait()).await {
        Ok(Ok(status)) => {
            proc.stderr_tail.settle(EXIT_STATUS_WAIT).await;
            UpstreamError::Exited {
                status: status.to_string(),
                tail: proc.stderr_tail.suffix(),
                cause: Box::new(error),
            }
        }
        _ => error,
    }
}

/// Level and lists of a freshly connected upstream.
pub(super) async fn get_ready(
    up: &Upstream,
    peer: &Peer<RoleClient>,
    era: DetectedEra,
) -> Result<Lists, rmcp::ServiceError> {
    // One handshake-era session serves every caller, and each wants its own level (a
    // handshake-era caller's `logging/setLevel`, a stateless-era caller's per-request
    // `logLevel`): the upstream sends everything and fedgate filters per call.
    if era == DetectedEra::Handshake
        && peer
            .peer_info()
            .is_some_and(|i| i.capabilities.logging.is_some())
        && let Err(e) = peer
            .set_level(SetLevelRequestParams::new(LoggingLevel::Debug))
            .await
    {
        tracing::debug!(upstream = %up.name(), "logging/setLevel refused: {e}");
    }
    fetch_lists(peer).await
}

/// Serves one established connection until it ends; returns why it ended.
async fn serve(
    pool: &Arc<Pool>,
    up: &Arc<Upstream>,
    est: Established,
    inflight: Arc<Inflight>,
    events: &mut mpsc::UnboundedReceiver<UpstreamEvent>,
    proc: Option<&mut ProcessGuard>,
) -> String {
    let Established {
        service,
        era,
        protocol_version,
        server,
    } = est;
    let peer = service.peer().clone();
    // Getting ready is bounded like the handshake, and stops with the upstream: an upstream
    // that connects and then never answers must not hang here.
    let startup = up.spec().startup_timeout;
    let ready = tokio::select! {
        r = tokio::time::timeout(startup, get_ready(up, &peer, era)) => r,
        _ = up.stop_token().cancelled() => return "stopped before it was ready".to_owned(),
    };
    let lists = match ready {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return format!("listing failed: {e}"),
        Err(_) => return format!("lists not served within {startup:?}"),
    };
    let lists = index_lists(up, lists);
    let tools = lists.tools.len();
    up.lists.store(Arc::new(lists));
    let conn = Arc::new(Connection {
        peer: peer.clone(),
        inflight,
        era,
        broken: Default::default(),
    });
    up.conn.store(Some(conn.clone()));
    // Into the catalog before the phase says ready: whoever waits for the upstreams to settle
    // (`fedgate call`, the ready line) then finds its tools.
    pool.rebuild(Changed::ALL);
    up.update(|s| {
        s.phase = Phase::Ready;
        s.era = Some(era);
        s.protocol_version = Some(protocol_version.clone());
        s.server = server.clone();
        s.last_error = None;
        s.next_attempt_at = None;
        s.tools = tools;
    });
    tracing::info!(upstream = %up.name(), era = ?era, protocol = %protocol_version, tools, "upstream ready");
    pool.metrics().lists_refreshed(up.name());
    pool.status_changed();

    let listener = (era == DetectedEra::Stateless).then(|| {
        let events = service.service().events.clone();
        tokio::spawn(super::listen::listen_for_changes(
            up.clone(),
            peer.clone(),
            events,
        ))
    });
    // A server fedgate did not start may die or hang without closing anything: ask it.
    let remote = !matches!(up.spec().transport, TransportSpec::Stdio(_));
    let prober = match up.spec().health_interval {
        Some(every) if remote => Some(tokio::spawn(super::health_probe::watch(
            up.clone(),
            conn.clone(),
            peer.clone(),
            era,
            every,
        ))),
        _ => None,
    };
    let ct = service.cancellation_token();
    let shutdown = up.stop_token().clone();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    // What the process said last goes with the reason it stopped (its exit status, else that
    // its connection closed), so `/readyz` shows why without a look at the logs.
    let tail = proc.as_ref().map(|p| p.stderr_tail.clone());
    let last_words = || async {
        match &tail {
            Some(t) => {
                t.settle(EXIT_STATUS_WAIT).await;
                t.suffix()
            }
            None => String::new(),
        }
    };
    let child_exit = async {
        match proc {
            Some(p) => p
                .child
                .wait()
                .await
                .map(|s| s.to_string())
                .unwrap_or_else(|e| e.to_string()),
            None => std::future::pending().await,
        }
    };
    tokio::pin!(child_exit);
    let reason = loop {
        tokio::select! {
            _ = &mut waiting => {
                if tail.is_none() {
                    break "connection closed".to_owned();
                }
                // A process that closed its stdout is usually exiting: wait a moment for its
                // status, which says more than the closed connection.
                break match tokio::time::timeout(EXIT_STATUS_WAIT, &mut child_exit).await {
                    Ok(status) => format!("process exited ({status}){}", last_words().await),
                    Err(_) => format!("connection closed{}", last_words().await),
                };
            }
            status = &mut child_exit => {
                break format!("process exited ({status}){}", last_words().await);
            }
            why = conn.broken.reported() => {
                ct.cancel();
                break why;
            }
            _ = shutdown.cancelled() => {
                ct.cancel();
                break "shutting down".to_owned();
            }
            Some(ev) = events.recv() => {
                // A refresh is bounded like a call, so a stalled upstream cannot hold the loop
                // (and with it, stopping this upstream).
                let limit = up.spec().call_timeout;
                if tokio::time::timeout(limit, handle_event(pool, up, &peer, ev)).await.is_err() {
                    tracing::warn!(upstream = %up.name(), "list refresh took longer than {limit:?}");
                }
            }
        }
    };
    for task in [listener, prober].into_iter().flatten() {
        task.abort();
    }
    up.conn.store(None);
    up.lists.store(Arc::new(Lists::default()));
    up.update(|s| s.tools = 0);
    pool.rebuild(Changed::ALL);
    reason
}

/// A per-user upstream that refuses every request without a credential (the standard OAuth
/// resource server of the MCP SDKs): ready once its sign-in metadata answers (RFC 9728, then
/// its authorization server's), for signed-in people only — each person's own connection
/// lists and calls ([`super::person_sessions`]); nobody else sees any of its tools. It stays so
/// until it is stopped or reloaded; metadata that does not answer is a failed start.
async fn serve_signed_in_only(pool: &Arc<Pool>, up: &Arc<Upstream>) -> String {
    let spec = up.spec();
    let oauth = spec
        .credential
        .as_ref()
        .and_then(|c| c.credential.per_user_oauth());
    if let Some(settings) = oauth {
        let url = spec.transport.url().unwrap_or_default();
        let client = crate::credentials::oauth::OAuthClient::new();
        if let Err(e) = client.endpoints(up.name(), url, settings).await {
            return UpstreamError::NoSignIn(e.to_string()).to_string();
        }
    }
    up.update(|s| {
        s.phase = Phase::Ready;
        s.signed_in_only = true;
        s.era = None;
        s.protocol_version = None;
        s.server = None;
        s.last_error = None;
        s.next_attempt_at = None;
        s.tools = 0;
    });
    pool.rebuild(Changed::ALL);
    tracing::info!(upstream = %up.name(), "upstream ready for signed-in people: it refuses requests without a credential, so each person's own connection lists and calls");
    pool.status_changed();
    up.stop_token().cancelled().await;
    up.update(|s| s.signed_in_only = false);
    up.persons.close_all();
    pool.rebuild(Changed::ALL);
    "shutting down".to_owned()
}

async fn handle_event(
    pool: &Arc<Pool>,
    up: &Arc<Upstream>,
    peer: &Peer<RoleClient>,
    ev: UpstreamEvent,
) {
    let mut lists = (*up.lists()).clone();
    let changed = match ev {
        UpstreamEvent::ResourceUpdated(p) => {
            pool.downstreams().resource_updated(p);
            return;
        }
        UpstreamEvent::ToolsChanged => match peer.list_all_tools().await {
            Ok(t) => {
                let changed = lists.tools != t;
                lists.tools = t;
                Changed {
                    tools: changed,
                    ..Default::default()
                }
            }
            Err(e) => {
                return tracing::warn!(upstream = %up.name(), "tools/list after change failed: {e}");
            }
        },
        UpstreamEvent::PromptsChanged => match peer.list_all_prompts().await {
            Ok(p) => {
                let changed = lists.prompts != p;
                lists.prompts = p;
                Changed {
                    prompts: changed,
                    ..Default::default()
                }
            }
            Err(e) => {
                return tracing::warn!(upstream = %up.name(), "prompts/list after change failed: {e}");
            }
        },
        UpstreamEvent::ResourcesChanged => {
            match (
                peer.list_all_resources().await,
                peer.list_all_resource_templates().await,
            ) {
                (Ok(r), Ok(t)) => {
                    let changed = lists.resources != r || lists.templates != t;
                    lists.resources = r;
                    lists.templates = t;
                    Changed {
                        resources: changed,
                        ..Default::default()
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
                    return tracing::warn!(upstream = %up.name(), "resources/list after change failed: {e}");
                }
            }
        }
    };
    let lists = if changed.tools {
        index_lists(up, lists)
    } else {
        lists
    };
    let tools = lists.tools.len();
    up.lists.store(Arc::new(lists));
    up.update(|s| s.tools = tools);
    pool.metrics().lists_refreshed(up.name());
    pool.rebuild(changed);
}

/// Indexes fresh lists and compiles their tools' input schemas; a schema that does not compile
/// is logged here, once per definition (lists are only re-indexed when the tools changed), and
/// shown in `/readyz`. Its tool is served unchecked.
pub(super) fn index_lists(up: &Upstream, lists: Lists) -> Lists {
    let lists = lists.indexed();
    for (tool, why) in &lists.broken_schemas {
        tracing::warn!(upstream = %up.name(), tool = %tool, "input schema does not compile; arguments are forwarded unchecked: {why}");
    }
    lists
}

/// Everything an upstream lists, according to the capabilities it declared.
pub(super) async fn fetch_lists(peer: &Peer<RoleClient>) -> Result<Lists, rmcp::ServiceError> {
    let caps = peer
        .peer_info()
        .map(|i| i.capabilities.clone())
        .unwrap_or_default();
    let mut lists = Lists::default();
    if caps.tools.is_some() {
        lists.tools = peer.list_all_tools().await?;
    }
    if caps.prompts.is_some() {
        lists.prompts = peer.list_all_prompts().await?;
    }
    if caps.resources.is_some() {
        lists.resources = peer.list_all_resources().await?;
        lists.templates = peer.list_all_resource_templates().await?;
    }
    Ok(lists)
}
