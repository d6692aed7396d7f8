//! `fedgate import FILE`

use super::CliError;
use std::{path::Path, process::ExitCode};

pub fn import(file: &Path) -> Result<ExitCode, CliError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let toml = crate::config::import::from_mcp_servers(&text, Some(file)).map_err(|e| e.0)?;
    print!("{toml}");
    Ok(ExitCode::SUCCESS)
}
