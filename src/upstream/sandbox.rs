//! Running a stdio upstream under bubblewrap: a read-only view of the system's programs and
//! libraries, only the paths its `[sandbox]` names, its own `/tmp`, `/proc` and `/dev`, no
//! network unless allowed, new namespaces (user, pid, ipc, uts, cgroup), and resource limits.
//!
//! What it does not protect against: a kernel exploit, what the process does with the paths
//! it was given, and (with `network = true`) anything reachable on the network.

use std::path::{Path, PathBuf};

use tokio::process::Command;

use crate::config::{defaults::BWRAP, snapshot::Sandbox};

/// The system's programs, libraries and the few `/etc` files programs need to start and to
/// resolve users, certificates and time zones — not `/etc` as a whole (it holds secrets).
const SYSTEM: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/hosts",
];

/// Only with `network = true`: name resolution.
const NETWORK: &[&str] = &["/etc/resolv.conf", "/etc/host.conf", "/etc/gai.conf"];

/// Where the sandboxed process's home and temporary files are: its own, emptied each start.
pub const TMP: &str = "/tmp";

/// `bwrap <what the sandbox allows> -- <program>`; the caller adds the program's arguments.
pub fn command(program: &Path, sandbox: &Sandbox, cwd: Option<&str>) -> Command {
    let mut cmd = Command::new(BWRAP);
    cmd.args(["--die-with-parent", "--new-session", "--unshare-all"]);
    if sandbox.network {
        cmd.arg("--share-net");
    }
    let system = SYSTEM
        .iter()
        .chain(if sandbox.network { NETWORK } else { &[] });
    for path in system {
        bind_system(&mut cmd, Path::new(path));
    }
    cmd.args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", TMP]);
    for p in &sandbox.read {
        cmd.arg("--ro-bind").arg(p).arg(p);
    }
    for p in &sandbox.write {
        cmd.arg("--bind").arg(p).arg(p);
    }
    // A program outside the system's directories (`@self`, a build output) is made visible as
    // itself, read-only.
    if !SYSTEM.iter().any(|s| program.starts_with(s)) && !within(program, sandbox) {
        cmd.arg("--ro-bind").arg(program).arg(program);
    }
    cmd.arg("--chdir").arg(cwd.unwrap_or(TMP));
    cmd.arg("--").arg(program);
    cmd
}

fn within(path: &Path, sandbox: &Sandbox) -> bool {
    sandbox
        .read
        .iter()
        .chain(&sandbox.write)
        .any(|p| path.starts_with(p))
}

/// A system path as it is here: a symlink stays a symlink (merged-`/usr` systems link `/bin`
/// to `usr/bin`), a missing one is skipped.
fn bind_system(cmd: &mut Command, path: &Path) {
    match std::fs::read_link(path) {
        Ok(target) => {
            cmd.arg("--symlink").arg(target).arg(path);
        }
        Err(_) if path.exists() => {
            cmd.arg("--ro-bind").arg(path).arg(path);
        }
        Err(_) => {}
    }
}

/// The program as a path bubblewrap can run: `@self` and paths as they are (relative ones
/// against `cwd`), a bare name looked up on PATH.
pub fn resolve(program: PathBuf, cwd: Option<&str>) -> std::io::Result<PathBuf> {
    if program.components().count() > 1 || program.is_absolute() {
        let path = match cwd {
            Some(dir) if program.is_relative() => Path::new(dir).join(program),
            _ => program,
        };
        return std::path::absolute(path);
    }
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(&program))
                .find(|c| c.is_file())
        })
        .ok_or_else(|| {
            std::io::Error::other(format!(
                "`{}` is not on PATH",
                crate::names::shown(&program.to_string_lossy())
            ))
        })
}

/// Resource limits, set in the child before it runs bubblewrap (which passes them on).
#[allow(unsafe_code)]
pub fn limit(cmd: &mut Command, sandbox: &Sandbox) {
    use nix::sys::resource::{Resource, setrlimit};
    let limits: Vec<(Resource, u64)> = [
        (
            Resource::RLIMIT_AS,
            sandbox.memory_mb.map(|m| m.saturating_mul(1 << 20)),
        ),
        (Resource::RLIMIT_CPU, sandbox.cpu_seconds),
        (Resource::RLIMIT_NOFILE, sandbox.open_files),
    ]
    .into_iter()
    .filter_map(|(r, v)| Some((r, v?)))
    .collect();
    if limits.is_empty() {
        return;
    }
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit, which
    // is async-signal-safe; `limits` was built before the fork, nothing is allocated here.
    unsafe {
        cmd.pre_exec(move || {
            for (resource, value) in &limits {
                setrlimit(*resource, *value, *value).map_err(std::io::Error::from)?;
            }
            Ok(())
        });
    }
}
