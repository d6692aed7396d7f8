//! fedgate binary: parse the command line and hand over to `cli::run`.

/// mimalloc: a call allocates and frees many small buffers across tasks and threads; glibc's
/// allocator spent about a tenth of fedgate's CPU on them (perf, c=64), mimalloc far less.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    fedgate::cli::run()
}
