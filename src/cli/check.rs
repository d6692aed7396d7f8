//! `fedgate check FILE`

use std::{path::Path, process::ExitCode};

pub fn check(file: &Path) -> Result<ExitCode, String> {
    match crate::config::load(file) {
        Ok(snapshot) => {
            println!(
                "{}: ok ({} upstreams)",
                file.display(),
                snapshot.upstreams.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(diags) => {
            for d in &diags {
                eprintln!("{d}");
            }
            eprintln!("{} problem(s) found", diags.len());
            Ok(ExitCode::FAILURE)
        }
    }
}
