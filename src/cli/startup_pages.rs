//! After start-up, fedgate lets go of what only start-up needed: the pages of its own code
//! that start-up ran (config parsing and validation, the command line, the flow store's
//! SQLite, regex compilation — about 5.5 MiB of the 7 MiB of code resident at ready, see
//! docs/benchmark.md, "Idle RSS") and the allocator's freed pages.
//!
//! The code pages are clean pages of the executable: dropping this process's mappings of
//! them (`MADV_DONTNEED` on its `r-xp` mapping) leaves them in the page cache, shared with
//! any other process running the same executable (the shipped config's `@self` upstreams),
//! and a function that runs again maps its page back with a minor fault. Only the executable
//! mapping is touched: the read-only data mapped beside it holds relocated pages (RELRO),
//! which must never be dropped.

use std::time::Duration;

/// How long after the ready line start-up's last steps (upstreams still connecting, the
/// first health checks) are given before its pages go.
const SETTLE: Duration = Duration::from_secs(3);

/// Releases start-up's pages once it has settled (a task of its own).
pub(super) fn release_after_startup() {
    tokio::spawn(async {
        tokio::time::sleep(SETTLE).await;
        let dropped = drop_code_mappings();
        // Freed memory the allocator kept for reuse goes back to the system.
        collect_allocator();
        tracing::info!(code_kib = dropped / 1024, "start-up's pages released");
    });
}

/// Drops this process's mappings of its executable's code; the bytes it covered.
fn drop_code_mappings() -> usize {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return 0;
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return 0;
    };
    let mut dropped = 0;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let path = fields.nth(3);
        if perms != "r-xp" || path.map(std::path::Path::new) != Some(exe.as_path()) {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        if advise_dontneed(start, end - start) {
            dropped += end - start;
        }
    }
    dropped
}

#[allow(unsafe_code)]
fn advise_dontneed(start: usize, len: usize) -> bool {
    use nix::sys::mman::{MmapAdvise, madvise};
    let Some(addr) = std::ptr::NonNull::new(start as *mut std::ffi::c_void) else {
        return false;
    };
    // SAFETY: the range is exactly one private, read-only, executable file mapping of this
    // process's own executable, as /proc/self/maps lists it. Its pages are never written
    // (no relocations in text), so dropping them loses nothing: the next access maps the
    // same bytes from the page cache again.
    unsafe { madvise(addr, len, MmapAdvise::MADV_DONTNEED).is_ok() }
}

#[allow(unsafe_code)]
fn collect_allocator() {
    // SAFETY: mi_collect takes no pointers and may be called from any thread at any time;
    // with another global allocator it only visits mimalloc's own (empty) heap.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
