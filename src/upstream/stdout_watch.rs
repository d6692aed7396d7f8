//! A stdio upstream's stdout must carry only JSON-RPC; servers that print banners or logs there
//! break or confuse the protocol (rmcp drops such lines silently). This reader passes the bytes
//! on and reports lines that are not JSON: a warning (the first, then at powers of two), and the
//! last such line for the error of a failed handshake.
//!
//! A line no peer can read — longer than the limit, or nested deeper than the parser goes — is
//! cut where that shows, its rest skipped, and an error response for the request it answers put
//! in its place, so the caller learns at once what happened (rmcp would drop the line silently
//! and the call would wait for its timeout).

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, ReadBuf};

use super::line_scan::{self, LineScan, MAX_DEPTH, Unreadable};

/// How much of a line is kept to show.
const SHOWN: usize = 200;

/// How much is read from the pipe at once.
const READ_CHUNK: usize = 8 * 1024;

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
    /// Longest line passed on (rmcp's line limit for this upstream).
    limit: usize,
    scan: LineScan,
    /// Dropping the rest of a line that cannot be read.
    skipping: bool,
    /// Read from `inner`, not yet passed on.
    input: Vec<u8>,
    at: usize,
    /// Written in place of an unreadable line, passed on before anything else.
    injected: Vec<u8>,
    injected_at: usize,
    seen: u64,
    last: NonJson,
}

impl<R> WatchedStdout<R> {
    pub fn new(inner: R, upstream: &str, limit: usize, last: NonJson) -> Self {
        Self {
            inner,
            upstream: upstream.into(),
            limit,
            scan: LineScan::default(),
            skipping: false,
            input: Vec::new(),
            at: 0,
            injected: Vec::new(),
            injected_at: 0,
            seen: 0,
            last,
        }
    }

    fn line_done(&mut self) {
        let shown: Vec<u8> = self.scan.prefix.iter().take(SHOWN).copied().collect();
        self.scan.reset();
        let text = String::from_utf8_lossy(&shown).trim().to_owned();
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

    /// A line no peer can read: it ends here for rmcp (which drops it), the rest of it is
    /// skipped, and if it answers a request, an error response takes its place, so the call
    /// ends now with what happened instead of running into its timeout.
    fn cut(&mut self, why: Unreadable) {
        let what = match why {
            Unreadable::TooLong => format!(
                "its answer is longer than {} bytes, the most fedgate reads from it",
                self.limit
            ),
            Unreadable::TooDeep => format!(
                "its answer nests deeper than {MAX_DEPTH} levels, which no JSON parser here reads"
            ),
        };
        let id = line_scan::response_id(&self.scan.prefix);
        tracing::warn!(upstream = %self.upstream, answers = id.as_deref().unwrap_or("(no request)"), "dropped a line from the upstream: {what}");
        self.injected.clear();
        self.injected_at = 0;
        self.injected.push(b'\n');
        if let Some(id) = id {
            let error = serde_json::json!({"code": -32603, "message": format!("the upstream's answer was dropped: {what}")});
            self.injected.extend_from_slice(
                format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#).as_bytes(),
            );
            self.injected.push(b'\n');
        }
        self.skipping = true;
        self.scan.reset();
    }

    /// The part of `input` to pass on next, at most `room` bytes: up to a cut (whose error
    /// line goes out before anything after it), or nothing while the rest of a cut line is
    /// skipped (its newline too: the injected text ended the line for rmcp).
    fn process(&mut self, room: usize) -> (usize, usize) {
        if self.skipping {
            match self.input[self.at..].iter().position(|b| *b == b'\n') {
                Some(p) => {
                    self.at += p + 1;
                    self.skipping = false;
                }
                None => self.at = self.input.len(),
            }
            return (self.at, self.at);
        }
        let start = self.at;
        let end = self.input.len().min(start.saturating_add(room));
        let mut i = start;
        while i < end {
            let b = self.input[i];
            i += 1;
            if b == b'\n' {
                self.line_done();
                continue;
            }
            if let Err(why) = self.scan.push(b, self.limit) {
                self.cut(why);
                self.at = i;
                return (start, i - 1);
            }
        }
        self.at = i;
        (start, i)
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for WatchedStdout<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.injected_at < this.injected.len() {
                let n = (this.injected.len() - this.injected_at).min(buf.remaining());
                buf.put_slice(&this.injected[this.injected_at..this.injected_at + n]);
                this.injected_at += n;
                return Poll::Ready(Ok(()));
            }
            if this.at < this.input.len() {
                let (from, to) = this.process(buf.remaining());
                if to > from {
                    buf.put_slice(&this.input[from..to]);
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            this.input.resize(READ_CHUNK, 0);
            this.at = 0;
            let mut rb = ReadBuf::new(&mut this.input);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    this.input.truncate(n);
                    if n == 0 {
                        return Poll::Ready(Ok(()));
                    }
                }
                Poll::Ready(Err(e)) => {
                    this.input.clear();
                    return Poll::Ready(Err(e));
                }
                Poll::Pending => {
                    this.input.clear();
                    return Poll::Pending;
                }
            }
        }
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
        let mut r = WatchedStdout::new(input, "u", 1 << 20, last.clone());
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, input);
        assert!(
            last.suffix().contains("`Server starting...`"),
            "{}",
            last.suffix()
        );
        let clean = NonJson::default();
        let mut r = WatchedStdout::new(&b"{}\n"[..], "u", 1 << 20, clean.clone());
        r.read_to_end(&mut Vec::new()).await.unwrap();
        assert_eq!(clean.suffix(), "");
    }

    #[tokio::test]
    async fn an_unreadable_answer_is_replaced_by_an_error_for_its_request() {
        let long = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{\"text\":\"{}\"}}}}\n",
            "x".repeat(5000)
        );
        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"d\",\"result\":{}\n",
            "[".repeat(MAX_DEPTH + 10)
        );
        let input = format!("{long}{deep}{{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{{}}}}\n");
        let mut r = WatchedStdout::new(input.as_bytes(), "u", 1000, NonJson::default());
        let mut out = String::new();
        r.read_to_string(&mut out).await.unwrap();
        let lines: Vec<&str> = out.lines().filter(|l| l.starts_with('{')).collect();
        // The cut lines reach rmcp shorter than its limit or unparsable, each followed by the
        // error for its id; the next answer is untouched.
        assert_eq!(lines.len(), 5, "{out}");
        let errors: Vec<serde_json::Value> = lines
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v.get("error").is_some())
            .collect();
        assert_eq!(errors[0]["id"], 7);
        assert!(
            errors[0]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("longer than 1000 bytes")
        );
        assert_eq!(errors[1]["id"], "d");
        assert!(
            errors[1]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("deeper than 128")
        );
        assert_eq!(lines[4], r#"{"jsonrpc":"2.0","id":8,"result":{}}"#);
        assert!(lines[0].len() <= 1000);
    }
}
