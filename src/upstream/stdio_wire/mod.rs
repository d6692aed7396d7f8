//! A stdio upstream's wire: newline-delimited JSON-RPC over the child's pipes, as an rmcp
//! transport of fedgate's own.
//!
//! rmcp's line transport writes each message with its own flush behind an async mutex, and
//! decodes every answer through two untagged enums (the message, then `ServerResult`, where a
//! tool call's result is the sixteenth variant tried). Here a message is serialized when it
//! is sent and queued; one writer task drains whatever queued meanwhile in one write. The
//! answer to a `tools/call` is decoded as a call result directly when it holds only a call
//! result's members (exactly the case rmcp's decoding ends at `CallToolResult`); anything else
//! takes rmcp's decoding unchanged.
//!
//! Stdout must carry only JSON-RPC: a line that is not JSON is dropped and reported (the first,
//! then at powers of two; the last one for the error of a failed handshake). An answer no one
//! can read — longer than the limit, nested deeper than the parser goes, or not a message —
//! is replaced by an error for the request it answers, so the call ends at once with the
//! reason instead of at its timeout.

use std::{collections::HashSet, future::Future, sync::Arc};

use parking_lot::Mutex;
use rmcp::{
    RoleClient,
    model::{
        CallToolResult, ClientRequest, ContentBlock, ErrorCode, ErrorData, JsonRpcError,
        JsonRpcMessage, JsonRpcResponse, JsonRpcVersion2_0, MetaObject, RequestId, ResultType,
        ServerResult,
    },
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};

use self::outbox::{BACKLOG, Outbox, write_queued};
use super::line_scan::{self, MAX_DEPTH};

mod outbox;

/// How much is read from the pipe at once.
const READ_BUFFER: usize = 64 * 1024;

/// Ids of calls whose answers are read as call results; ids of calls that never got an answer
/// (timed out, cancelled) are forgotten past this many, which only costs them the general path.
const EXPECTED_CALLS: usize = 4096;

/// How much of a non-JSON line is kept to show.
const SHOWN: usize = 200;

/// The last non-JSON line an upstream wrote, shared with whoever reports its failure.
#[derive(Debug, Clone, Default)]
pub struct NonJson(Arc<Mutex<Option<String>>>);

impl NonJson {
    /// `; it wrote … on stdout` for an error message, when it did.
    pub fn suffix(&self) -> String {
        match self.0.lock().as_deref() {
            Some(line) => format!(
                "; it wrote a line that is not JSON-RPC on stdout (MCP servers must log to stderr): `{line}`"
            ),
            None => String::new(),
        }
    }
}

pub struct StdioWire<R> {
    upstream: Arc<str>,
    read: BufReader<R>,
    /// The line being read (a cancelled read resumes it).
    line: Vec<u8>,
    /// Longest line read.
    limit: usize,
    /// Dropping the rest of a line past the limit.
    skipping: bool,
    outbox: Arc<Outbox>,
    calls: HashSet<RequestId>,
    non_json_seen: u64,
    last_non_json: NonJson,
}

impl<R: AsyncRead + Unpin + Send> StdioWire<R> {
    /// Reads `stdout`; writes go to `stdin` from a task of their own, which ends (closing the
    /// pipe) once the transport is closed or dropped and its queue is written.
    pub fn new<W>(stdout: R, stdin: W, upstream: &str, limit: usize, last: NonJson) -> Self
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let outbox = Arc::new(Outbox::default());
        tokio::spawn(write_queued(outbox.clone(), stdin));
        Self {
            upstream: upstream.into(),
            read: BufReader::with_capacity(READ_BUFFER, stdout),
            line: Vec::new(),
            limit,
            skipping: false,
            outbox,
            calls: HashSet::new(),
            non_json_seen: 0,
            last_non_json: last,
        }
    }

    /// One whole line into `line`, or what ended it.
    async fn read_line(&mut self) -> std::io::Result<LineRead> {
        loop {
            let buf = self.read.fill_buf().await?;
            if buf.is_empty() {
                return Ok(LineRead::Eof);
            }
            let newline = memchr::memchr(b'\n', buf);
            let take = newline.map_or(buf.len(), |i| i + 1);
            if self.skipping {
                self.read.consume(take);
                self.skipping = newline.is_none();
                continue;
            }
            if self.line.len().saturating_add(take) > self.limit.saturating_add(1) {
                let room = line_scan::PREFIX.saturating_sub(self.line.len());
                self.line.extend_from_slice(&buf[..take.min(room)]);
                self.read.consume(take);
                self.skipping = newline.is_none();
                return Ok(LineRead::TooLong);
            }
            self.line.extend_from_slice(&buf[..take]);
            self.read.consume(take);
            if newline.is_some() {
                return Ok(LineRead::Line);
            }
        }
    }

    /// The message on `line`, if it is one to pass on.
    fn decode(&mut self, line: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
        let line = trimmed(line);
        match line.first() {
            None => return None,
            Some(b'{' | b'[') => {}
            Some(_) => {
                self.not_json(line);
                return None;
            }
        }
        if !self.calls.is_empty()
            && let Some(answer) = call_answer(line, &mut self.calls)
        {
            return Some(answer);
        }
        match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line) {
            Ok(msg) => {
                if let JsonRpcMessage::Response(r) = &msg {
                    self.calls.remove(&r.id);
                }
                Some(msg)
            }
            Err(e) => self.unreadable(line, &e),
        }
    }

    fn not_json(&mut self, line: &[u8]) {
        let shown = String::from_utf8_lossy(&line[..line.len().min(SHOWN)])
            .trim()
            .to_owned();
        let shown = crate::names::shown(&shown);
        self.non_json_seen += 1;
        if self.non_json_seen.is_power_of_two() {
            tracing::warn!(upstream = %self.upstream, lines = self.non_json_seen, "upstream wrote a line that is not JSON-RPC on stdout (dropped; MCP servers must log to stderr): {shown}");
        }
        *self.last_non_json.0.lock() = Some(shown);
    }

    /// A JSON line that is no message fedgate reads: an answer becomes an error for its
    /// request; a request is refused to the upstream; anything else is dropped.
    fn unreadable(
        &mut self,
        line: &[u8],
        e: &serde_json::Error,
    ) -> Option<RxJsonRpcMessage<RoleClient>> {
        let what = if line_scan::too_deep(line) {
            format!(
                "its answer nests deeper than {MAX_DEPTH} levels, which no JSON parser here reads"
            )
        } else {
            format!("it is not a JSON-RPC message fedgate reads ({e})")
        };
        if let Some(answer) = self.answer_dropped(line, &what) {
            return Some(answer);
        }
        if let Some(id) = request_id(line) {
            tracing::debug!(upstream = %self.upstream, "refused an unreadable request from the upstream: {e}");
            let refusal = TxJsonRpcMessage::<RoleClient>::error(
                ErrorData::invalid_request("Invalid request", None),
                Some(id),
            );
            // Best effort: a failing pipe shows on the next send.
            let _ = self.outbox.push(&refusal);
        } else {
            tracing::debug!(upstream = %self.upstream, "dropped an unreadable message from the upstream: {e}");
        }
        None
    }

    /// The error that takes the place of a dropped answer, if `line` starts like one.
    fn answer_dropped(&mut self, line: &[u8], what: &str) -> Option<RxJsonRpcMessage<RoleClient>> {
        let prefix = &line[..line.len().min(line_scan::PREFIX)];
        let id = line_scan::response_id(prefix);
        tracing::warn!(upstream = %self.upstream, answers = id.as_deref().unwrap_or("(no request)"), "dropped a line from the upstream: {what}");
        let id: RequestId = serde_json::from_str(&id?).ok()?;
        self.calls.remove(&id);
        Some(JsonRpcMessage::Error(JsonRpcError {
            jsonrpc: JsonRpcVersion2_0,
            id: Some(id),
            error: ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                format!("the upstream's answer was dropped: {what}"),
                None,
            ),
        }))
    }
}

enum LineRead {
    Line,
    /// Past the limit: `line` holds its first bytes, the rest is being skipped.
    TooLong,
    Eof,
}

fn trimmed(line: &[u8]) -> &[u8] {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    line.trim_ascii()
}

/// The id of a request (`method` and `id`) on a line that did not decode.
fn request_id(line: &[u8]) -> Option<RequestId> {
    #[derive(Deserialize)]
    struct Request<'a> {
        id: RequestId,
        #[serde(borrow)]
        #[allow(dead_code)] // only its presence matters
        method: &'a RawValue,
    }
    serde_json::from_slice::<Request<'_>>(line)
        .ok()
        .map(|r| r.id)
}

/// The answer to a call in flight, decoded as a call result, when the line is one and its
/// result holds nothing but a call result's members.
fn call_answer(
    line: &[u8],
    calls: &mut HashSet<RequestId>,
) -> Option<RxJsonRpcMessage<RoleClient>> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer<'a> {
        #[allow(dead_code)] // checked by decoding
        jsonrpc: JsonRpcVersion2_0,
        id: RequestId,
        #[serde(borrow)]
        result: &'a RawValue,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct CallOnly {
        #[serde(default)]
        result_type: Option<ResultType>,
        content: Option<Vec<ContentBlock>>,
        #[serde(default, deserialize_with = "present")]
        structured_content: Option<serde_json::Value>,
        is_error: Option<bool>,
        #[serde(rename = "_meta")]
        meta: Option<MetaObject>,
    }
    fn present<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<serde_json::Value>, D::Error> {
        serde_json::Value::deserialize(d).map(Some)
    }
    let answer: Answer<'_> = serde_json::from_slice(line).ok()?;
    if !calls.contains(&answer.id) {
        return None;
    }
    let r: CallOnly = serde_json::from_str(answer.result.get()).ok()?;
    // rmcp's own conditions for a call result (otherwise a later variant decodes it).
    if r.result_type.as_ref().is_some_and(|t| !t.is_complete())
        || (r.content.is_none() && r.structured_content.is_none() && r.is_error.is_none())
    {
        return None;
    }
    calls.remove(&answer.id);
    let mut result = CallToolResult::default();
    result.result_type = r.result_type;
    result.content = r.content.unwrap_or_default();
    result.structured_content = r.structured_content;
    result.is_error = r.is_error;
    result.meta = r.meta;
    Some(JsonRpcMessage::Response(JsonRpcResponse {
        jsonrpc: JsonRpcVersion2_0,
        id: answer.id,
        result: ServerResult::CallToolResult(result),
    }))
}

impl<R: AsyncRead + Unpin + Send> Transport<RoleClient> for StdioWire<R> {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(r) = &item
            && matches!(r.request, ClientRequest::CallToolRequest(_))
        {
            if self.calls.len() >= EXPECTED_CALLS {
                self.calls.clear();
            }
            self.calls.insert(r.id.clone());
        }
        let queued = self.outbox.push(&item);
        let outbox = self.outbox.clone();
        async move {
            if queued? > BACKLOG {
                outbox.drained().await?;
            }
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let read = match self.read_line().await {
                Ok(read) => read,
                Err(e) => {
                    tracing::error!(upstream = %self.upstream, "reading the upstream's stdout failed: {e}");
                    return None;
                }
            };
            // Out of `self` while it is read, and back (its capacity kept) once it is.
            let line = std::mem::take(&mut self.line);
            let msg = match read {
                LineRead::Eof => return None,
                LineRead::Line => self.decode(&line),
                LineRead::TooLong => {
                    let what = format!(
                        "its answer is longer than {} bytes, the most fedgate reads from it",
                        self.limit
                    );
                    match trimmed(&line).first() {
                        Some(b'{') => self.answer_dropped(&line, &what),
                        _ => {
                            self.not_json(trimmed(&line));
                            None
                        }
                    }
                }
            };
            self.line = line;
            self.line.clear();
            if msg.is_some() {
                return msg;
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.outbox.close();
        Ok(())
    }
}

impl<R> Drop for StdioWire<R> {
    fn drop(&mut self) {
        self.outbox.close();
    }
}

#[cfg(test)]
mod tests;
