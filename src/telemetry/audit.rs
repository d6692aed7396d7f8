//! The audit log (F14): one JSON line per routed call — who, what, decision, outcome, latency,
//! correlation id, and the arguments as a hash (in full only when configured). Writing never
//! blocks a call: records go through a bounded queue to a writer task; when the queue is full or
//! the disk refuses, records are dropped, counted and reported in the log, and calls go on.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use serde::Serialize;
use tokio::{io::AsyncWriteExt, sync::mpsc};

/// Records waiting for the writer before new ones are dropped.
pub const DEFAULT_AUDIT_QUEUE: usize = 10_000;

/// One audited call.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub time: String,
    pub identity: String,
    pub identity_kind: &'static str,
    pub method: &'static str,
    pub name: String,
    pub upstream: Option<String>,
    pub decision: &'static str,
    /// Why a call was refused or failed (a stable code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    pub outcome: &'static str,
    pub latency_ms: f64,
    pub correlation_id: String,
    pub arguments_sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// The approval plan the record is about (held, approved, denied, executed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<String>,
    /// Who decided the plan (`kind:name`, or `admin`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approver: Option<String>,
    /// For a peer gateway's call: the caller it says it calls for (a claim, recorded, never
    /// used to authorize).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_behalf_of: Option<String>,
    /// What the guardrails found (detector, field, direction, action), never the value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guardrails: Option<serde_json::Value>,
    /// What was left out of a record past [`MAX_RECORD`] bytes, and how large it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
}

/// Largest record written; a larger one loses its arguments, then its guardrail findings
/// (their count kept), and says so in `cut`.
pub const MAX_RECORD: usize = 64 << 10;

/// Writes `r` as one line of at most [`MAX_RECORD`] bytes (plus the newline).
fn write_bounded(buf: &mut Vec<u8>, r: &Record) {
    let start = buf.len();
    if serde_json::to_writer(&mut *buf, r).is_err() {
        buf.truncate(start);
        return;
    }
    let size = buf.len() - start;
    if size > MAX_RECORD {
        buf.truncate(start);
        let mut small = r.clone();
        small.arguments = None;
        let mut left_out = vec!["arguments"];
        if serde_json::to_vec(&small).map_or(true, |v| v.len() > MAX_RECORD) {
            let n = small
                .guardrails
                .as_ref()
                .and_then(|g| g.as_array())
                .map_or(0, Vec::len);
            small.guardrails = Some(serde_json::json!([{"detector": "more_findings", "more": n}]));
            small.name = small.name.chars().take(256).collect();
            left_out.push("guardrail findings");
        }
        small.cut = Some(format!(
            "{} left out: the record was {size} bytes",
            left_out.join(" and ")
        ));
        if serde_json::to_writer(&mut *buf, &small).is_err() {
            buf.truncate(start);
            return;
        }
    }
    buf.push(b'\n');
}

/// Audit settings.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    pub path: PathBuf,
    pub full_arguments: bool,
    pub queue: usize,
}

/// The sending half; cheap to clone.
#[derive(Debug, Clone)]
pub struct Audit {
    tx: mpsc::Sender<Record>,
    pub full_arguments: bool,
    dropped: Arc<AtomicU64>,
    dropped_metric: Option<prometheus::IntCounter>,
}

impl Audit {
    /// Opens (appends to) the file and starts the writer task.
    pub async fn start(
        cfg: &AuditConfig,
        dropped_metric: Option<prometheus::IntCounter>,
    ) -> Result<Self, super::TelemetryError> {
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&cfg.path)
            .await
            .map_err(|e| {
                super::TelemetryError::Audit(cfg.path.display().to_string(), e.to_string())
            })?;
        let (tx, rx) = mpsc::channel(cfg.queue.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        tokio::spawn(write_loop(
            file,
            rx,
            dropped.clone(),
            dropped_metric.clone(),
            cfg.path.clone(),
        ));
        Ok(Self {
            tx,
            full_arguments: cfg.full_arguments,
            dropped,
            dropped_metric,
        })
    }

    /// Queues a record; never waits.
    pub fn record(&self, r: Record) {
        if self.tx.try_send(r).is_err() {
            if let Some(m) = &self.dropped_metric {
                m.inc();
            }
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::error!(dropped = n, "audit queue full: records dropped");
            }
        }
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// SHA-256 (hex) of the arguments' canonical JSON (the same arguments in another key order
/// hash the same).
pub fn hash_arguments(args: &serde_json::Value) -> String {
    crate::json_digest::sha256_hex(args)
}

async fn write_loop(
    mut file: tokio::fs::File,
    mut rx: mpsc::Receiver<Record>,
    dropped: Arc<AtomicU64>,
    dropped_metric: Option<prometheus::IntCounter>,
    path: PathBuf,
) {
    let mut buf = Vec::new();
    let mut failing = false;
    while let Some(first) = rx.recv().await {
        buf.clear();
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        for r in &batch {
            write_bounded(&mut buf, r);
        }
        let written = async {
            file.write_all(&buf).await?;
            file.flush().await
        }
        .await;
        match written {
            Ok(()) if failing => {
                failing = false;
                tracing::info!(path = %path.display(), "audit log writable again");
            }
            Ok(()) => {}
            Err(e) => {
                dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
                if let Some(m) = &dropped_metric {
                    m.inc_by(batch.len() as u64);
                }
                if !failing {
                    tracing::error!(path = %path.display(), "audit log write failed, records dropped: {e}");
                }
                failing = true;
            }
        }
    }
}
