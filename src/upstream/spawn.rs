//! Starting upstream processes so that none outlives fedgate.
//!
//! Each child gets its own process group (so the whole tree can be signalled at once) and the
//! Linux parent-death signal SIGKILL, so it dies even when fedgate is killed with SIGKILL and no
//! cleanup code runs. Grandchildren are reached through the process group on every orderly exit;
//! the parent-death signal itself only covers the direct child.

use std::{collections::VecDeque, process::Stdio, sync::Arc};

use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use parking_lot::Mutex;
use tokio::process::{Child, ChildStderr, Command};

use crate::config::{ProcessSpec, defaults::SELF_COMMAND};

/// Longest stderr line forwarded to the logs; longer lines are cut so a flooding child cannot
/// grow fedgate's memory.
const MAX_STDERR_LINE_BYTES: usize = 8 * 1024;

/// How many of a child's last stderr lines are kept for its `last_error`, and how long each.
const STDERR_TAIL_LINES: usize = 5;
const STDERR_TAIL_CHARS: usize = 200;

/// The last lines a child wrote to stderr (bounded), and whether its stderr has ended.
#[derive(Debug, Clone)]
pub struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    ended: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for StderrTail {
    fn default() -> Self {
        Self {
            lines: Arc::default(),
            ended: Arc::new(tokio::sync::watch::Sender::new(false)),
        }
    }
}

impl StderrTail {
    /// Waits (bounded) until the child's stderr is read to its end: a process that exited has
    /// usually written its last words, which the reader may not have seen yet.
    pub async fn settle(&self, limit: std::time::Duration) {
        let mut rx = self.ended.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|ended| *ended)).await;
    }

    fn push(&self, line: &str) {
        let line: String = line
            .chars()
            .take(STDERR_TAIL_CHARS)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let mut tail = self.lines.lock();
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }

    /// `": line | line"`, or nothing when the child wrote nothing.
    pub fn suffix(&self) -> String {
        let tail = self.lines.lock();
        if tail.is_empty() {
            return String::new();
        }
        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
        format!(": {}", lines.join(" | "))
    }
}

/// A running child and its process group; dropping it kills the group.
#[derive(Debug)]
pub struct ProcessGuard {
    pub child: Child,
    pgid: Option<Pid>,
    /// What the child said last on stderr, for the reason it stopped.
    pub stderr_tail: StderrTail,
}

/// How long a stop waits for a killed child to be gone.
const REAP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl ProcessGuard {
    /// Kills the process group and waits (bounded) until the child has exited and is reaped,
    /// so a stopped upstream's process is gone when its state says `stopped` — also when the
    /// gateway exits right after.
    pub async fn stop(mut self) {
        if let Some(pgid) = self.pgid.take() {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        let _ = tokio::time::timeout(REAP_WAIT, self.child.wait()).await;
    }
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// What every process fedgate starts gets of fedgate's own environment (unless the upstream
/// says `inherit_env = true`): where programs are, the user and home, language and time zone,
/// the temporary directory — nothing that holds a secret.
pub const BASE_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
];

fn is_base(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .is_some_and(|n| BASE_ENV.contains(&n) || n.starts_with("LC_"))
}

/// Resolves `@self` to this executable.
pub fn program(command: &str) -> std::io::Result<std::path::PathBuf> {
    if command == SELF_COMMAND {
        std::env::current_exe()
    } else {
        Ok(std::path::PathBuf::from(command))
    }
}

/// Spawns `spec` with piped stdio; stderr is forwarded to the logs tagged with `upstream`.
pub fn spawn(
    upstream: &str,
    spec: &ProcessSpec,
    pipe_stdio: bool,
) -> std::io::Result<ProcessGuard> {
    let program = program(&spec.command)?;
    let mut cmd = match &spec.sandbox {
        Some(sandbox) => {
            let program = super::sandbox::resolve(program, spec.cwd.as_deref())?;
            let mut cmd = super::sandbox::command(&program, sandbox, spec.cwd.as_deref());
            super::sandbox::limit(&mut cmd, sandbox);
            cmd
        }
        None => Command::new(program),
    };
    if !spec.inherit_env {
        // Only what it is given: a small base, then its own `env` and credential.
        cmd.env_clear();
        for (k, v) in std::env::vars_os().filter(|(k, _)| is_base(k)) {
            cmd.env(k, v);
        }
    }
    if spec.sandbox.is_some() {
        // Its home and temporary files are in its own /tmp; the others are not there.
        cmd.env("HOME", super::sandbox::TMP)
            .env("TMPDIR", super::sandbox::TMP);
    }
    // `env:NAME` / `file:PATH` values are resolved now, at each start (rotation needs no
    // reload); the error names the reference, never a value.
    for (k, v) in &spec.env {
        let v = v.raw();
        if crate::secret::is_reference(v) {
            let value = crate::secret::resolve(v).map_err(|why| {
                std::io::Error::other(format!("environment variable `{k}` of the process: {why}"))
            })?;
            cmd.env(k, value.expose());
        } else {
            cmd.env(k, v);
        }
    }
    cmd.args(&spec.args)
        .stdin(if pipe_stdio {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(if pipe_stdio {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    set_parent_death_signal(&mut cmd);
    let mut child = cmd.spawn()?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let stderr_tail = StderrTail::default();
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(forward_stderr(
            upstream.to_owned(),
            stderr,
            stderr_tail.clone(),
        ));
    }
    Ok(ProcessGuard {
        child,
        pgid,
        stderr_tail,
    })
}

#[allow(unsafe_code)]
fn set_parent_death_signal(cmd: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and only makes two
    // async-signal-safe syscalls (prctl, getppid); it allocates nothing and takes no locks.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            // The parent may have died between fork and prctl; then nobody would send the signal.
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::other("parent exited during spawn"));
            }
            Ok(())
        });
    }
}

/// Forwards the child's stderr line by line, whatever it writes: a line longer than
/// [`MAX_STDERR_LINE_BYTES`] is cut (and says how much was cut), secrets are masked, and reading goes on — a child
/// whose stderr pipe closed would die of the next write (EPIPE, SIGPIPE).
async fn forward_stderr(upstream: String, stderr: ChildStderr, tail: StderrTail) {
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(stderr);
    let mut line: Vec<u8> = Vec::new();
    let mut cut = 0usize;
    let emit = |line: &[u8], cut: usize| {
        let text = String::from_utf8_lossy(line);
        // An upstream may log the token it refused: fedgate's log and status never repeat it.
        let text = crate::guard::masked(text.trim_end_matches('\r'));
        tail.push(&text);
        if cut == 0 {
            tracing::info!(target: "fedgate::upstream::stderr", upstream = %upstream, "{text}");
        } else {
            tracing::warn!(target: "fedgate::upstream::stderr", upstream = %upstream, "{text}… ({cut} more bytes of this line cut)");
        }
    };
    loop {
        let (used, ended_line) = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buf) => {
                let end = buf.iter().position(|b| *b == b'\n');
                let chunk = &buf[..end.unwrap_or(buf.len())];
                let room = MAX_STDERR_LINE_BYTES.saturating_sub(line.len());
                let keep = chunk.len().min(room);
                line.extend_from_slice(&chunk[..keep]);
                cut += chunk.len() - keep;
                (end.map_or(buf.len(), |i| i + 1), end.is_some())
            }
        };
        reader.consume(used);
        if ended_line {
            emit(&line, cut);
            line.clear();
            cut = 0;
        }
    }
    if !line.is_empty() || cut > 0 {
        emit(&line, cut);
    }
    tail.ended.send_replace(true);
}
