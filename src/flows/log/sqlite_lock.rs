//! One driver per SQLite run log. The process that drives a log's runs (resumes them, starts
//! new ones, appends their events) holds an exclusive lock on `<db>.lock`, which names it. Any
//! other process that opens the same log — a `fedgate stdio` a desktop client spawned with the
//! serving gateway's config, a second `serve` — reads it but drives nothing: it resumes no run
//! and records none, and says which process does. The lock goes with its process (the kernel
//! releases it), so a crashed driver leaves nothing to clean up. A shared PostgreSQL log has
//! leases per run instead (`postgres`).

use std::{
    fs::{File, OpenOptions, TryLockError},
    io::{Read, Seek, Write},
    path::{Path, PathBuf},
};

use super::LogError;

/// Who drives the runs of a log, as this process found it.
#[derive(Debug)]
pub enum Driver {
    /// This process: the open, locked lock file (held for the life of the log).
    This(#[allow(dead_code)] File),
    /// Another process, as its lock file names it.
    Other(String),
    /// Nobody was asked: this process only reads (the CLI's `list`, `show`).
    Reader,
}

/// The lock file of the log at `db`.
fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the driver's lock of the log at `db`, or finds who holds it.
pub fn take(db: &Path) -> Result<Driver, LogError> {
    let path = lock_path(db);
    let named = |e: std::io::Error| LogError(format!("{}: {e}", path.display()));
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(named)?;
    match file.try_lock() {
        Ok(()) => {
            let what = std::env::args().nth(1).unwrap_or_default();
            file.set_len(0).map_err(named)?;
            file.rewind().map_err(named)?;
            write!(file, "pid {} (fedgate {what})", std::process::id()).map_err(named)?;
            file.flush().map_err(named)?;
            Ok(Driver::This(file))
        }
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            // What it says is only for the message; an unreadable file still means "locked".
            let _ = file.take(200).read_to_string(&mut holder);
            let holder = crate::names::shown(holder.trim());
            Ok(Driver::Other(if holder.is_empty() {
                "another process".into()
            } else {
                holder
            }))
        }
        Err(TryLockError::Error(e)) => Err(named(e)),
    }
}

impl Driver {
    pub fn drives(&self) -> bool {
        matches!(self, Driver::This(_))
    }

    /// Why this process may not record runs in the log at `db`.
    pub fn refusal(&self, db: &Path) -> LogError {
        match self {
            Driver::Other(who) => LogError(format!(
                "the flow run log {} is driven by {who}: this process records no runs in it — call the flow through that gateway, or give this process its own `[flows] db`",
                db.display()
            )),
            _ => LogError(format!(
                "the flow run log {} is open for reading only here",
                db.display()
            )),
        }
    }
}
