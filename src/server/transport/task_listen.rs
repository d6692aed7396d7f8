//! `notifications/tasks` for a stateless-era `subscriptions/listen` that names `taskIds`
//! (rmcp's subscription filter has no such field, so its transport would drop them).
//!
//! The stream acknowledges the handles this caller may read (each opened and read once with
//! `tasks/get` through the whole stack — authorization, tier, rate limit, audit — as any
//! `tasks/get` of the caller's would be), then sends each task's state as `tasks/get` would
//! return it: at once, and again whenever its status or `lastUpdatedAt` changes, until it is
//! terminal. fedgate reads the state by polling through the stack at the task's
//! `pollIntervalMs` (bounded), so upstreams that push nothing are covered too. Such a stream
//! carries task notifications only: list changes and resource updates are accepted on a
//! stream that does not name `taskIds` (the acknowledgement says what was accepted).

use std::{sync::Arc, time::Duration};

use futures::{StreamExt, future::BoxFuture};
use http::{Response, request::Parts};
use rmcp::model::{
    ClientResult, ErrorCode, GetTaskParams, NotificationMetaObject, RequestId, RequestMetaObject,
    ServerJsonRpcMessage, ServerNotification, ServerRequest, TaskStatusNotification,
    TaskStatusNotificationParams,
};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Direct, era_check::single, http_answers::http_sse};
use crate::{
    policy::identity::Identity,
    server::{http::Body, request_of::Incoming},
    telemetry::traces,
    to_client::{ClientChannel, NotSent, Unanswered},
};

/// The protocol version whose listen streams this path serves.
const VERSION: &str = "2026-07-28";
/// Bounds of the interval between two reads of a task's state.
const FASTEST: Duration = Duration::from_millis(500);
const SLOWEST: Duration = Duration::from_secs(5);
/// Most task ids one stream follows, and how many of them are first read at once.
const MAX_TASKS: usize = 16;
const READS_AT_ONCE: usize = 4;
/// Notifications a stream holds for a client that reads slowly; past it the stream ends.
const BACKLOG: usize = 64;

#[derive(Deserialize)]
struct ListenRequest {
    jsonrpc: String,
    id: RequestId,
    method: String,
    params: ListenParams,
}

#[derive(Deserialize)]
struct ListenParams {
    #[serde(rename = "_meta")]
    meta: RequestMetaObject,
    notifications: serde_json::Value,
}

#[derive(Deserialize)]
struct Filter {
    #[serde(rename = "taskIds", default)]
    task_ids: Vec<String>,
}

/// A task followed by a listen stream: what was last sent of it, and a state read but not
/// yet sent.
struct Followed {
    handle: String,
    seen: Option<(rmcp::model::TaskStatus, String)>,
    next: Option<rmcp::model::GetTaskResult>,
}

/// Reading a task's state (or holding a listen stream) asks the client nothing.
#[derive(Debug)]
struct NoClient;

impl ClientChannel for NoClient {
    fn notify(&self, _: ServerNotification) -> BoxFuture<'static, Result<(), NotSent>> {
        Box::pin(futures::future::ready(Err(NotSent::Closed)))
    }

    fn request(
        &self,
        _: ServerRequest,
        _: RequestId,
    ) -> BoxFuture<'static, Result<ClientResult, Unanswered>> {
        Box::pin(futures::future::ready(Err(Unanswered::Client(
            "a task's state is read without a client to ask".to_owned(),
        ))))
    }

    fn is_closed(&self) -> bool {
        false
    }
}

/// A listen stream's request as the gateway reads it: the stateless era, no client to ask,
/// ended by `ct`.
pub(super) fn listen_incoming(
    parts: &Parts,
    id: RequestId,
    meta: RequestMetaObject,
    ct: CancellationToken,
) -> Incoming {
    Incoming {
        id,
        parent: traces::parent(&meta, Some(&parts.headers)),
        capabilities: meta.client_capabilities(),
        meta,
        ct,
        client: Arc::new(NoClient),
        identity: parts.extensions.get::<Identity>().cloned(),
        session: None,
        session_key: crate::server::request_of::LOCAL_SESSION.to_owned(),
        workspace: parts
            .headers
            .get(crate::stages::WORKSPACE_HEADER)
            .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned()),
        modern: true,
        stateless: true,
    }
}

impl Direct {
    /// Serves a stateless-era `subscriptions/listen` — one that names `taskIds` here, any other
    /// in `listen` — or `None`: `rare` answers it (one whose headers or body are not
    /// plain).
    pub(in crate::server) async fn listen(
        &self,
        parts: &Parts,
        body: &[u8],
    ) -> Option<Response<Body>> {
        let text = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        if text("mcp-method") != Some("subscriptions/listen")
            || text("mcp-protocol-version") != Some(VERSION)
            || !single(parts, "mcp-method")
        {
            return None;
        }
        let r: ListenRequest = serde_json::from_slice(body).ok()?;
        let meta = r.params.meta;
        if r.jsonrpc != "2.0"
            || r.method != "subscriptions/listen"
            || meta.protocol_version().map(|v| v.to_string()).as_deref() != Some(VERSION)
        {
            return None;
        }
        let tasks: Filter = serde_json::from_value(r.params.notifications.clone()).ok()?;
        if tasks.task_ids.is_empty() {
            // rmcp's checks: every key the era requires, a filter of its shape.
            let complete = meta
                .missing_required_keys(&rmcp::model::ProtocolVersion::V_2026_07_28)
                .is_empty();
            let filter = serde_json::from_value(r.params.notifications).ok()?;
            let listen = super::listen::Listen {
                id: r.id,
                meta,
                filter,
            };
            return complete.then(|| self.listen_changes(parts, listen));
        }
        let capabilities = meta.client_capabilities()?;
        let closed = CancellationToken::new();
        let incoming = listen_incoming(parts, r.id.clone(), meta, closed.clone());
        // Only a caller that declared the extension reads tasks; a handle it may not read is
        // left out of the acknowledgement, as if it named no task.
        let mut accepted = Vec::new();
        let mut first = Vec::new();
        if capabilities.supports_tasks() {
            let mut named = tasks.task_ids;
            named.dedup();
            let reads = named.into_iter().take(MAX_TASKS).map(|handle| {
                let params = GetTaskParams::new(handle.clone());
                let incoming = &incoming;
                async move { (handle, self.gateway.tasks_get(params, incoming).await) }
            });
            let read: Vec<_> = futures::stream::iter(reads)
                .buffered(READS_AT_ONCE)
                .collect()
                .await;
            for (handle, got) in read {
                if let Ok(state) = got
                    && !accepted.contains(&handle)
                {
                    accepted.push(handle);
                    first.push(state);
                }
            }
        }
        let (tx, rx) = mpsc::channel(BACKLOG);
        let ack = json!({
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {
                "notifications": {"taskIds": accepted},
                "_meta": {"io.modelcontextprotocol/subscriptionId": r.id},
            },
        });
        let _ = tx.try_send(ack.to_string());
        let shutdown = self.shared.shutdown.clone();
        let gateway = self.gateway.clone();
        let subscription = r.id;
        let mut followed: Vec<Followed> = accepted
            .into_iter()
            .zip(first)
            .map(|(handle, state)| Followed {
                handle,
                seen: None,
                next: Some(state),
            })
            .collect();
        tokio::spawn(async move {
            let _closed = closed.drop_guard();
            loop {
                let mut wait = SLOWEST;
                let mut still = Vec::with_capacity(followed.len());
                for mut f in std::mem::take(&mut followed) {
                    let state = match f.next.take() {
                        Some(s) => s,
                        None => {
                            let params = GetTaskParams::new(f.handle.clone());
                            match gateway.tasks_get(params, &incoming).await {
                                Ok(s) => s,
                                // Expired, or no longer this caller's to read: nothing more
                                // will come of it.
                                Err(e) if e.code == ErrorCode::INVALID_PARAMS => continue,
                                // Anything else (a rate limit, an upstream restarting) may
                                // pass: read it again later.
                                Err(_) => {
                                    still.push(f);
                                    continue;
                                }
                            }
                        }
                    };
                    let task = &state.task.task;
                    let seen = (task.status, task.last_updated_at.clone());
                    let terminal = task.status.is_terminal();
                    let every = task.poll_interval_ms.map_or(SLOWEST, Duration::from_millis);
                    if f.seen.as_ref() != Some(&seen) {
                        f.seen = Some(seen);
                        // A client that does not read its stream loses it.
                        if tx
                            .try_send(notification(state.task, &subscription))
                            .is_err()
                        {
                            return;
                        }
                    }
                    if !terminal {
                        wait = wait.min(every.clamp(FASTEST, SLOWEST));
                        still.push(f);
                    }
                }
                followed = still;
                // Nothing left to follow: the stream stays open until the client ends it.
                if followed.is_empty() {
                    tokio::select! {
                        _ = tx.closed() => {}
                        _ = shutdown.cancelled() => {}
                    }
                    return;
                }
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        });
        Some(http_sse(rx))
    }
}

/// `notifications/tasks` with the task as `tasks/get` returned it, naming the subscription.
fn notification(task: rmcp::model::DetailedTask, subscription: &RequestId) -> String {
    let mut meta = NotificationMetaObject::new();
    meta.set_subscription_id(subscription.clone());
    let n = TaskStatusNotification::new(TaskStatusNotificationParams::new(task).with_meta(meta));
    let m = ServerJsonRpcMessage::notification(ServerNotification::TaskStatusNotification(n));
    serde_json::to_string(&m).unwrap_or_default()
}
