//! Hot reload (F15): SIGHUP, a change to the config file or a tier file, or the admin API load
//! the config again. The new snapshot is validated in full before anything changes; a bad one
//! keeps the running config, is logged with its diagnostics and counted in
//! `fedgate_config_reloads_total{result="error"}`.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use arc_swap::ArcSwap;
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    config::{self, Snapshot},
    server::core::Core,
    upstream::reload::Applied,
};

/// Editors write a file in several steps (truncate, write, rename): changes are collected
/// until the files have been quiet this long.
const SETTLE: Duration = Duration::from_millis(300);

/// Loads and applies the config file; one reload at a time.
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    core: Arc<Core>,
    current: ArcSwap<Snapshot>,
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl Reloader {
    pub fn new(path: &Path, core: Arc<Core>, loaded: Snapshot) -> Arc<Self> {
        Arc::new(Self {
            path: path.to_owned(),
            core,
            current: ArcSwap::from_pointee(loaded),
            one_at_a_time: tokio::sync::Mutex::new(()),
        })
    }

    /// The snapshot in force.
    pub fn current(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Loads the config file again and applies it; on any error the running config stays.
    pub async fn reload(&self, trigger: &str) -> Result<Applied, super::error::ReloadError> {
        let _one = self.one_at_a_time.lock().await;
        let path = self.path.clone();
        let loaded = tokio::task::spawn_blocking(move || config::load(&path))
            .await
            .map_err(|e| super::error::ReloadError::Task(e.to_string()))?;
        let mut next = match loaded {
            Ok(s) => s,
            Err(diags) => {
                let why = diags
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                self.core.metrics().reloaded(false);
                tracing::error!(
                    trigger,
                    "config reload refused, the running config stays: {why}"
                );
                return Err(super::error::ReloadError::Invalid(why));
            }
        };
        let cur = self.current();
        // Bound at start: the listeners, the audit file and the trace exporter.
        next.gateway.listen = cur.gateway.listen;
        for (what, changed) in [
            ("[gateway]", !same_gateway(&cur, &next)),
            (
                "[admin]",
                format!("{:?}", cur.admin.as_ref().map(|a| a.listen))
                    != format!("{:?}", next.admin.as_ref().map(|a| a.listen)),
            ),
            (
                "[audit]",
                format!("{:?}", cur.audit) != format!("{:?}", next.audit),
            ),
            ("[tracing]", cur.tracing != next.tracing),
        ] {
            if changed {
                tracing::warn!(
                    trigger,
                    "{what} settings changed: they take effect at the next restart"
                );
            }
        }
        // What is bound at start stays as it runs, so `/admin/config` shows what is in force
        // and the next reload warns again.
        next.gateway = cur.gateway.clone();
        next.admin = cur.admin.clone();
        next.audit = cur.audit.clone();
        next.tracing = cur.tracing.clone();
        next.tiers_dir = cur.tiers_dir.clone();
        // The flow folder, run log and permits are bound at start; the flows themselves reload.
        next.flows = crate::config::snapshot::FlowSettings {
            set: std::mem::take(&mut next.flows.set),
            ..cur.flows.clone()
        };
        let applied = self.core.apply(&next);
        self.current.store(Arc::new(next));
        self.core.metrics().reloaded(true);
        tracing::info!(
            trigger,
            added = ?applied.added,
            removed = ?applied.removed,
            restarted = ?applied.restarted,
            updated = ?applied.updated,
            "config reloaded"
        );
        Ok(applied)
    }

    /// Reloads on every SIGHUP until `stop`. The handler is installed when this is called
    /// (not when the future first runs), so a SIGHUP right after the ready line cannot kill
    /// the process.
    pub fn on_sighup(
        self: Arc<Self>,
        stop: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send {
        use tokio::signal::unix::{SignalKind, signal};
        let hup = signal(SignalKind::hangup());
        async move {
            let mut hup = match hup {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("cannot listen for SIGHUP, reload by signal is off: {e}");
                    return;
                }
            };
            self.sighup_loop(&mut hup, stop).await;
        }
    }

    async fn sighup_loop(&self, hup: &mut tokio::signal::unix::Signal, stop: CancellationToken) {
        loop {
            tokio::select! {
                Some(()) = hup.recv() => { let _ = self.reload("SIGHUP").await; }
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Reloads when the config file or a file in the tier folder changes, until `stop`. The
    /// watches are set when this is called, so no change after the ready line is missed.
    pub fn on_file_change(
        self: Arc<Self>,
        stop: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send {
        let (tx, mut rx) = mpsc::unbounded_channel::<()>();
        let config_file = self.path.clone();
        let tiers_dir = std::fs::canonicalize(&self.current().tiers_dir).ok();
        let flows_dir = self
            .current()
            .flows
            .dir
            .as_ref()
            .and_then(|d| std::fs::canonicalize(d).ok());
        let relevant = {
            let (config_file, tiers_dir) = (config_file.clone(), tiers_dir.clone());
            let flows_dir = flows_dir.clone();
            let config_dir = dir_of(&config_file);
            move |p: &Path| {
                // `..data` is the symlink Kubernetes swaps when a mounted ConfigMap changes.
                let name = p.file_name();
                (p.parent() == config_dir.as_deref()
                    && (name == config_file.file_name() || name == Some("..data".as_ref())))
                    || (tiers_dir.is_some() && p.parent() == tiers_dir.as_deref())
                    || (flows_dir.is_some() && p.parent() == flows_dir.as_deref())
            }
        };
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(ev) = res
                && matches!(
                    ev.kind,
                    EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_)
                )
                && ev.paths.iter().any(|p| relevant(p))
            {
                let _ = tx.send(());
            }
        });
        let watcher = watcher.map(|mut w| {
            // Directories, not files: an editor's rename-over would drop a watch on the file.
            for dir in [dir_of(&config_file), tiers_dir, flows_dir]
                .into_iter()
                .flatten()
            {
                if dir.is_dir()
                    && let Err(e) = w.watch(&dir, RecursiveMode::NonRecursive)
                {
                    tracing::warn!(dir = %dir.display(), "cannot watch: {e}");
                }
            }
            w
        });
        async move {
            let _watcher = match watcher {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!("cannot watch the config files, reload on change is off: {e}");
                    return;
                }
            };
            self.change_loop(&mut rx, stop).await;
        }
    }

    async fn change_loop(&self, rx: &mut mpsc::UnboundedReceiver<()>, stop: CancellationToken) {
        loop {
            tokio::select! {
                got = rx.recv() => if got.is_none() { return },
                _ = stop.cancelled() => return,
            }
            // Quiet period: swallow the rest of this burst of writes.
            loop {
                match tokio::time::timeout(SETTLE, rx.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            let _ = self.reload("file change").await;
        }
    }
}

/// The folder of a file (the current folder for a bare name), absolute where possible so it
/// compares with the paths the watcher reports.
fn dir_of(file: &Path) -> Option<PathBuf> {
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    std::fs::canonicalize(dir).ok()
}

/// `[gateway]` settings other than what a reload applies.
fn same_gateway(a: &Snapshot, b: &Snapshot) -> bool {
    let (a, b) = (&a.gateway, &b.gateway);
    a.listen == b.listen
        && a.separator == b.separator
        && a.names == b.names
        && a.page_size == b.page_size
        && a.allowed_origins == b.allowed_origins
        && a.allowed_hosts == b.allowed_hosts
        && a.max_body_bytes == b.max_body_bytes
        && a.idempotency_ttl == b.idempotency_ttl
        && a.idempotency_max_bytes == b.idempotency_max_bytes
        && a.shutdown_grace == b.shutdown_grace
        && a.state_key == b.state_key
        && a.cursor_ttl == b.cursor_ttl
        && a.session_ttl == b.session_ttl
        && a.input_wait == b.input_wait
        && a.max_parked_calls == b.max_parked_calls
        && a.resource_default == b.resource_default
        && a.sse_retry == b.sse_retry
        && a.replay == b.replay
        && a.tls.is_some() == b.tls.is_some()
}
