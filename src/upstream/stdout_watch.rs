//! A stdio upstream's stdout must carry only JSON-RPC; servers that print banners or logs there
//! break or confuse the protocol (rmcp drops such lines silently). This reader passes every byte
//! on unchanged and reports lines that are not JSON: a warning (the first, then at powers of
//! two), and the last such line for the error of a failed handshake.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, ReadBuf};

/// How much of a line is kept to show.
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

pub struct WatchedStdout<R> {
    inner: R,
    upstream: Arc<str>,
    /// The start of the line being read (at most `SHOWN` bytes).
    line: Vec<u8>,
    seen: u64,
    last: NonJson,
}

impl<R> WatchedStdout<R> {
    pub fn new(inner: R, upstream: &str, last: NonJson) -> Self {
        Self {
            inner,
            upstream: upstream.into(),
            line: Vec::new(),
            seen: 0,
            last,
        }
    }

    fn scan(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                self.line_done();
            } else if self.line.len() < SHOWN {
                self.line.push(b);
            }
        }
    }

    fn line_done(&mut self) {
        let text = String::from_utf8_lossy(&self.line).trim().to_owned();
        self.line.clear();
        if text.is_empty() || text.starts_with('{') || text.starts_with('[') {
            return;
        }
        self.seen += 1;
        let shown = crate::names::shown(&text);
        if self.seen.is_power_of_two() {
            tracing::warn!(upstream = %self.upstream, lines = self.seen, "upstream wrote a line that is not JSON-RPC on stdout (dropped; MCP servers must log to stderr): {shown}");
        }
        *self.last.0.lock() = Some(shown);
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for WatchedStdout<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            self.scan(&buf.filled()[before..]);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn bytes_pass_unchanged_and_non_json_lines_are_noted() {
        let input: &[u8] = b"Server starting...\n{\"jsonrpc\":\"2.0\"}\n\n[1]\n";
        let last = NonJson::default();
        let mut r = WatchedStdout::new(input, "u", last.clone());
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, input);
        assert!(
            last.suffix().contains("`Server starting...`"),
            "{}",
            last.suffix()
        );
        let clean = NonJson::default();
        let mut r = WatchedStdout::new(&b"{}\n"[..], "u", clean.clone());
        r.read_to_end(&mut Vec::new()).await.unwrap();
        assert_eq!(clean.suffix(), "");
    }
}
