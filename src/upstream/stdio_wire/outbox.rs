//! The stdio wire's outgoing side: messages serialized into one queue, which a writer task
//! drains into the upstream's stdin with one write for whatever queued meanwhile.

use std::sync::Arc;

use parking_lot::Mutex;
use rmcp::{RoleClient, service::TxJsonRpcMessage};
use tokio::{
    io::{AsyncWrite, AsyncWriteExt},
    sync::Notify,
};

/// Bytes queued and not yet taken by the pipe past which sending waits: an upstream that
/// stopped reading holds its callers (each up to its deadline) instead of fedgate's memory.
pub(super) const BACKLOG: usize = 256 * 1024;

/// Messages serialized and waiting for the pipe.
#[derive(Default)]
pub(super) struct Outbox {
    state: Mutex<OutState>,
    /// Something was queued, or the outbox closed.
    queued: Notify,
    /// A write ended.
    written: Notify,
}

#[derive(Default)]
struct OutState {
    queued: Vec<u8>,
    /// Bytes taken by the writer and not yet through the pipe.
    writing: usize,
    closed: bool,
    failed: Option<std::io::ErrorKind>,
}

fn write_failed(kind: std::io::ErrorKind) -> std::io::Error {
    std::io::Error::new(kind, "writing to the upstream's stdin failed")
}

impl OutState {
    /// Bytes waiting for the pipe: queued, or taken by the writer and not yet through.
    fn waiting(&self) -> usize {
        self.queued.len() + self.writing
    }

    fn refusal(&self) -> Option<std::io::Error> {
        match (self.failed, self.closed) {
            (Some(kind), _) => Some(write_failed(kind)),
            (None, true) => Some(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the upstream's stdin is closed",
            )),
            (None, false) => None,
        }
    }
}

impl Outbox {
    /// Queues `msg` as one line; how many bytes are then waiting for the pipe.
    pub(super) fn push(&self, msg: &TxJsonRpcMessage<RoleClient>) -> std::io::Result<usize> {
        let mut state = self.state.lock();
        if let Some(e) = state.refusal() {
            return Err(e);
        }
        let before = state.queued.len();
        if let Err(e) = serde_json::to_writer(&mut state.queued, msg) {
            state.queued.truncate(before);
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
        }
        state.queued.push(b'\n');
        let waiting = state.waiting();
        drop(state);
        self.queued.notify_one();
        Ok(waiting)
    }

    /// Waits until the backlog is down to [`BACKLOG`], or the pipe failed.
    pub(super) async fn drained(&self) -> std::io::Result<()> {
        loop {
            let written = self.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            {
                let state = self.state.lock();
                if let Some(kind) = state.failed {
                    return Err(write_failed(kind));
                }
                if state.waiting() <= BACKLOG {
                    return Ok(());
                }
            }
            written.await;
        }
    }

    pub(super) fn close(&self) {
        self.state.lock().closed = true;
        self.queued.notify_one();
    }
}

/// Writes what is queued, all of it at once, until the outbox closes (after writing what it
/// still holds) or the pipe fails; the pipe closes when this ends.
pub(super) async fn write_queued<W: AsyncWrite + Unpin>(outbox: Arc<Outbox>, mut stdin: W) {
    let mut batch = Vec::new();
    loop {
        let closed = {
            let mut state = outbox.state.lock();
            std::mem::swap(&mut state.queued, &mut batch);
            state.writing = batch.len();
            state.closed
        };
        if batch.is_empty() {
            if closed {
                break;
            }
            outbox.queued.notified().await;
            continue;
        }
        let result = stdin.write_all(&batch).await;
        batch.clear();
        // A burst's buffer is not kept for good.
        if batch.capacity() > 4 * BACKLOG {
            batch = Vec::new();
        }
        let failed = {
            let mut state = outbox.state.lock();
            state.writing = 0;
            if let Err(e) = &result {
                state.failed = Some(e.kind());
            }
            result.is_err()
        };
        outbox.written.notify_waiters();
        if failed {
            break;
        }
    }
    let _ = stdin.shutdown().await;
}
