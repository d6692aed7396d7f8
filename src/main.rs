//! fedgate binary: parse the command line and hand over to `cli::run`.

fn main() -> std::process::ExitCode {
    fedgate::cli::run()
}
