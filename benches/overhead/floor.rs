//! The floor: a bare HTTP -> stdio JSON-RPC forwarder, the cheapest reasonable hand-written
//! gateway, as a baseline for fedgate's overhead.
//!
//! One child process speaks newline-delimited JSON-RPC on stdio. Every HTTP POST body is one
//! message. A request (`method` and `id`) gets its id replaced by a fresh counter value, is written
//! to the child, and is answered with the child's response (original id restored) as
//! `application/json`. Anything else (notifications, and responses a client might post) is
//! written to the child and answered `202 Accepted`. The `initialize` response carries
//! `mcp-session-id: floor`. Messages from the child that are not responses are dropped.
//!
//! No `serde_json::Value` is built: a small validating scanner finds the byte spans of the
//! top-level `id` and `method`, and ids are spliced in and out as bytes.

use std::{
    collections::HashMap,
    convert::Infallible,
    io::Write,
    net::SocketAddr,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter},
    net::TcpListener,
    process::{ChildStdin, ChildStdout, Command},
    sync::{mpsc, oneshot},
};

/// A pending request: the id the child sees, and where its response line goes.
type Pending = (u64, oneshot::Sender<Bytes>);

struct Shared {
    next_id: AtomicU64,
    /// Lines (with their `\n`) for the single writer task.
    lines: mpsc::UnboundedSender<Vec<u8>>,
    /// Registrations for the reader task, always sent before the line is written, so the reader
    /// sees a registration before the response it belongs to.
    pending: mpsc::UnboundedSender<Pending>,
}

/// Serves the floor on `listen` (already bound) in front of one `command args…` child, until the
/// child's stdout closes (it exited) or accepting fails.
pub async fn run(
    listen: std::net::TcpListener,
    command: &str,
    args: &[String],
) -> std::io::Result<()> {
    listen.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listen)?;
    let mut child = Command::new(command)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("child has no stdin"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("child has no stdout"))?;
    let (line_tx, line_rx) = mpsc::unbounded_channel();
    let (pending_tx, pending_rx) = mpsc::unbounded_channel();
    tokio::spawn(writer(stdin, line_rx));
    let mut reader = tokio::spawn(reader(stdout, pending_rx));
    let shared = Arc::new(Shared {
        next_id: AtomicU64::new(1),
        lines: line_tx,
        pending: pending_tx,
    });
    let result = loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(a) => a,
                    // Transient (e.g. EMFILE, ECONNABORTED): keep serving.
                    Err(e) if is_transient(&e) => continue,
                    Err(e) => break Err(e),
                };
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| handle(shared.clone(), req));
                    let _ = http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            read = &mut reader => {
                break match read {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e),
                    Err(e) => Err(std::io::Error::other(e)),
                };
            }
        }
    };
    let _ = child.start_kill();
    let _ = child.wait().await;
    result
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted | WouldBlock)
        || e.raw_os_error() == Some(24) // EMFILE
        || e.raw_os_error() == Some(23) // ENFILE
}

/// Writes lines to the child, batching whatever is queued into one flush.
async fn writer(stdin: ChildStdin, mut rx: mpsc::UnboundedReceiver<Vec<u8>>) {
    let mut out = BufWriter::with_capacity(64 * 1024, stdin);
    let mut batch = Vec::with_capacity(64);
    while rx.recv_many(&mut batch, 256).await > 0 {
        for line in batch.drain(..) {
            if out.write_all(&line).await.is_err() {
                return;
            }
        }
        if out.flush().await.is_err() {
            return;
        }
    }
}

/// Reads the child's stdout lines and hands each response to the request waiting for its id.
async fn reader(
    stdout: ChildStdout,
    mut registrations: mpsc::UnboundedReceiver<Pending>,
) -> std::io::Result<()> {
    let mut input = BufReader::with_capacity(64 * 1024, stdout);
    let mut waiting: HashMap<u64, oneshot::Sender<Bytes>> = HashMap::new();
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line).await? == 0 {
            return Ok(()); // child exited; dropping `waiting` fails every pending request (502)
        }
        let msg = trim(&line);
        let Some(spans) = scan(msg) else { continue };
        if spans.method.is_some() {
            continue; // notification or server request: dropped
        }
        let Some(id) = spans
            .id
            .and_then(|(s, e)| std::str::from_utf8(&msg[s..e]).ok()?.parse::<u64>().ok())
        else {
            continue;
        };
        while let Ok((k, tx)) = registrations.try_recv() {
            waiting.insert(k, tx);
        }
        if let Some(tx) = waiting.remove(&id) {
            let _ = tx.send(Bytes::copy_from_slice(msg));
        }
    }
}

type Reply = Response<Full<Bytes>>;

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Reply, Infallible> {
    if req.method() != Method::POST {
        return Ok(status(StatusCode::METHOD_NOT_ALLOWED, Bytes::new()));
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(status(StatusCode::BAD_REQUEST, Bytes::new())),
    };
    let msg = trim(&body);
    let Some(spans) = scan(msg) else {
        return Ok(rpc_error(-32700, "Parse error"));
    };
    let (Some(method), Some((id_s, id_e))) = (spans.method, spans.id) else {
        // Notification (or a client's response): forward as is.
        if shared.lines.send(line_of(msg, None)).is_err() {
            return Ok(status(StatusCode::BAD_GATEWAY, Bytes::new()));
        }
        return Ok(status(StatusCode::ACCEPTED, Bytes::new()));
    };
    if !matches!(msg[id_s], b'"' | b'-' | b'0'..=b'9') {
        return Ok(rpc_error(
            -32600,
            "Invalid Request: id must be a string or a number",
        ));
    }
    let initialize = &msg[method.0..method.1] == b"\"initialize\"";
    let upstream_id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = oneshot::channel();
    if shared.pending.send((upstream_id, tx)).is_err()
        || shared
            .lines
            .send(line_of(msg, Some((id_s, id_e, upstream_id))))
            .is_err()
    {
        return Ok(status(StatusCode::BAD_GATEWAY, Bytes::new()));
    }
    let Ok(answer) = rx.await else {
        return Ok(status(StatusCode::BAD_GATEWAY, Bytes::new()));
    };
    // Restore the original id: the child's line is validated and its id span is ours.
    let Some((s, e)) = scan(&answer).and_then(|sp| sp.id) else {
        return Ok(status(StatusCode::BAD_GATEWAY, Bytes::new()));
    };
    let mut out = Vec::with_capacity(answer.len() + (id_e - id_s));
    out.extend_from_slice(&answer[..s]);
    out.extend_from_slice(&msg[id_s..id_e]);
    out.extend_from_slice(&answer[e..]);
    let mut resp = status(StatusCode::OK, Bytes::from(out));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if initialize {
        resp.headers_mut()
            .insert("mcp-session-id", HeaderValue::from_static("floor"));
    }
    Ok(resp)
}

/// One line for the child: `msg` with the id span replaced by `new_id`, any (insignificant) raw
/// newline turned into a space so the message stays one line, and a final `\n`.
fn line_of(msg: &[u8], rewrite: Option<(usize, usize, u64)>) -> Vec<u8> {
    let mut line = Vec::with_capacity(msg.len() + 24);
    match rewrite {
        Some((s, e, id)) => {
            line.extend_from_slice(&msg[..s]);
            let _ = write!(line, "{id}");
            line.extend_from_slice(&msg[e..]);
        }
        None => line.extend_from_slice(msg),
    }
    // Validated JSON has no raw control characters inside strings, so these are whitespace.
    for b in line.iter_mut() {
        if *b == b'\n' || *b == b'\r' {
            *b = b' ';
        }
    }
    line.push(b'\n');
    line
}

fn status(code: StatusCode, body: Bytes) -> Reply {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = code;
    resp
}

fn rpc_error(code: i32, message: &str) -> Reply {
    let body = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":{code},\"message\":{}}}}}",
        serde_json::Value::from(message)
    );
    let mut resp = status(StatusCode::BAD_REQUEST, Bytes::from(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

/// Byte spans (value start, value end) of a top-level object's `id` and `method` values.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Spans {
    pub id: Option<(usize, usize)>,
    pub method: Option<(usize, usize)>,
}

/// Validates that `b` is exactly one JSON object (RFC 8259; surrounding whitespace allowed) and
/// returns the spans of its top-level `id` and `method` (the last one wins if a key repeats, as in
/// serde_json). Keys are compared as raw bytes, so an escaped key (`"\u0069d"`) is not `id`.
pub fn scan(b: &[u8]) -> Option<Spans> {
    std::str::from_utf8(b).ok()?;
    let mut spans = Spans::default();
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            let key_end = string(b, i)?;
            let key = &b[i + 1..key_end - 1];
            i = ws(b, key_end);
            if b.get(i) != Some(&b':') {
                return None;
            }
            let start = ws(b, i + 1);
            let end = value(b, start, 1)?;
            match key {
                b"id" => spans.id = Some((start, end)),
                b"method" => spans.method = Some((start, end)),
                _ => {}
            }
            i = ws(b, end);
            match b.get(i) {
                Some(b',') => i = ws(b, i + 1),
                Some(b'}') => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    (ws(b, i) == b.len()).then_some(spans)
}

const MAX_DEPTH: usize = 128;

fn ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// End (exclusive) of the JSON value starting at `i`.
fn value(b: &[u8], i: usize, depth: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string(b, i),
        b'{' | b'[' if depth >= MAX_DEPTH => None,
        b'{' => {
            let mut i = ws(b, i + 1);
            if b.get(i) == Some(&b'}') {
                return Some(i + 1);
            }
            loop {
                i = ws(b, string(b, i)?);
                if b.get(i) != Some(&b':') {
                    return None;
                }
                i = ws(b, value(b, ws(b, i + 1), depth + 1)?);
                match b.get(i)? {
                    b',' => i = ws(b, i + 1),
                    b'}' => return Some(i + 1),
                    _ => return None,
                }
            }
        }
        b'[' => {
            let mut i = ws(b, i + 1);
            if b.get(i) == Some(&b']') {
                return Some(i + 1);
            }
            loop {
                i = ws(b, value(b, i, depth + 1)?);
                match b.get(i)? {
                    b',' => i = ws(b, i + 1),
                    b']' => return Some(i + 1),
                    _ => return None,
                }
            }
        }
        b't' => literal(b, i, b"true"),
        b'f' => literal(b, i, b"false"),
        b'n' => literal(b, i, b"null"),
        b'-' | b'0'..=b'9' => number(b, i),
        _ => None,
    }
}

fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    b.get(i..i + word.len())
        .filter(|w| *w == word)
        .map(|_| i + word.len())
}

/// End (exclusive, after the closing quote) of the string starting at `i`.
fn string(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut i = i + 1;
    loop {
        match *b.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => match *b.get(i + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                b'u' => {
                    let hex = b.get(i + 2..i + 6)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    i += 6;
                }
                _ => return None,
            },
            0..=0x1f => return None,
            _ => i += 1,
        }
    }
}

fn number(b: &[u8], mut i: usize) -> Option<usize> {
    let digits = |b: &[u8], mut i: usize| {
        let s = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        (i > s).then_some(i)
    };
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    i = match b.get(i)? {
        b'0' => i + 1,
        b'1'..=b'9' => digits(b, i)?,
        _ => return None,
    };
    if b.get(i) == Some(&b'.') {
        i = digits(b, i + 1)?;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits(b, i)?;
    }
    Some(i)
}

/// Entry point for the re-exec'd floor process: `args` is `__floor <port-file-or-"-"> <command>
/// <args…>` (a leading program name before `__floor` is skipped too). Binds 127.0.0.1:0, prints
/// `floor listening 127.0.0.1:PORT` (and writes `127.0.0.1:PORT` to the port file unless it is
/// `-`), then serves on a 2-worker runtime until the child exits.
pub fn main_from_args(args: &[String]) -> ! {
    let args = match args.iter().position(|a| a == "__floor") {
        Some(p) => &args[p + 1..],
        None => args,
    };
    let (Some(port_file), Some(command)) = (args.first(), args.get(1)) else {
        eprintln!("usage: __floor <port-file|-> <command> [args…]");
        std::process::exit(2);
    };
    let code = match serve(port_file, command, &args[2..]) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("floor: {e}");
            1
        }
    };
    std::process::exit(code)
}

fn serve(port_file: &str, command: &str, args: &[String]) -> std::io::Result<()> {
    let listen = std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let addr = listen.local_addr()?;
    if port_file != "-" {
        let tmp = format!("{port_file}.tmp");
        std::fs::write(&tmp, addr.to_string())?;
        std::fs::rename(&tmp, port_file)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // The socket is bound, so connections made right after the announcement wait in the backlog.
    rt.block_on(async move {
        let mut out = std::io::stdout().lock();
        writeln!(out, "floor listening {addr}")?;
        out.flush()?;
        drop(out);
        run(listen, command, args).await
    })
}
