//! The release executable is linked with the functions its start-up runs placed first, in
//! the order they first run (`scripts/startup-order.txt`, written by
//! `scripts/startup-order.sh`): start-up then faults in a few contiguous megabytes of code
//! instead of pages spread over the whole text, which fault-around would map in 64 KiB at a
//! time (docs/benchmark.md, "Idle RSS"). Names the list does not know are placed as before,
//! so a list older than the code only orders less.
//!
//! Only where the linker is LLD (rustc's default on x86_64 Linux since 1.90) and only for
//! release builds; `FEDGATE_NO_STARTUP_ORDER=1` turns it off (another linker, say). Mangled
//! names carry a hash of the compiler and the features a crate was built with, so the list
//! orders fully only builds like the one it was written from (same rustc, `cargo build
//! --release`); others are ordered less, down to not at all.

use std::{env, process::Command};

fn main() {
    println!("cargo:rerun-if-changed=scripts/startup-order.txt");
    println!("cargo:rerun-if-env-changed=FEDGATE_NO_STARTUP_ORDER");
    let release = env::var("PROFILE").is_ok_and(|p| p == "release");
    let target = env::var("TARGET").unwrap_or_default();
    let off = env::var_os("FEDGATE_NO_STARTUP_ORDER").is_some_and(|v| v != "0");
    if !release || off || target != "x86_64-unknown-linux-gnu" || !rustc_links_with_lld() {
        return;
    }
    let dir = env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let list = format!("{dir}/scripts/startup-order.txt");
    if !std::path::Path::new(&list).is_file() {
        return;
    }
    println!("cargo:rustc-link-arg-bin=fedgate=-Wl,--symbol-ordering-file={list}");
    println!("cargo:rustc-link-arg-bin=fedgate=-Wl,--no-warn-symbol-ordering");
}

/// Whether this rustc links with LLD by default (1.90 and later on this target).
fn rustc_links_with_lld() -> bool {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let Ok(out) = Command::new(rustc).arg("--version").output() else {
        return false;
    };
    let version = String::from_utf8_lossy(&out.stdout);
    let minor = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok());
    minor.is_some_and(|m| m >= 90)
}
