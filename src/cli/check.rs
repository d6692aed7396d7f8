//! `fedgate check FILE`

use super::CliError;
use std::{path::Path, process::ExitCode};

pub fn check(file: &Path) -> Result<ExitCode, CliError> {
    match crate::config::load(file) {
        Ok(snapshot) => {
            for w in &snapshot.warnings {
                eprintln!("warning: {w}");
            }
            for w in portability_warnings(&snapshot) {
                eprintln!("warning: {w}");
            }
            // A bad flow does not stop the gateway, but a check reports it as a failure.
            let flow_problems = &snapshot.flows.set.problems;
            for d in flow_problems {
                eprintln!("{d}");
            }
            let flows = match snapshot.flows.dir {
                Some(_) => format!(", {} flows", snapshot.flows.set.flows.len()),
                None => String::new(),
            };
            if !flow_problems.is_empty() {
                eprintln!(
                    "{} problem(s) found in flows; the rest of the config is valid",
                    flow_problems.len()
                );
                return Ok(ExitCode::FAILURE);
            }
            println!(
                "{}: ok ({} upstreams{flows})",
                file.display(),
                snapshot.upstreams.len()
            );
            // Which state holds across replicas, and which stays in this process.
            for line in snapshot.cluster.describe() {
                println!("  {line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(mut diags) => {
            // In file order, whichever check found them.
            diags.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
            for d in &diags {
                eprintln!("{d}");
            }
            let errors = diags
                .iter()
                .filter(|d| !d.message.starts_with(crate::config::WARNING))
                .count();
            eprintln!("{errors} problem(s) found");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// With `names = "mcp"`: names that valid MCP clients accept but some model APIs do not
/// (warnings, not errors: the operator chose MCP's rules). The portable default needs none.
fn portability_warnings(snapshot: &crate::config::Snapshot) -> Vec<String> {
    use crate::names::unportable;
    let sep = &snapshot.gateway.separator;
    let mut out = Vec::new();
    if snapshot.gateway.names == crate::names::NameRule::Portable {
        return out;
    }
    let prefixed = snapshot
        .upstreams
        .iter()
        .any(|u| u.prefix == crate::names::PrefixMode::Always);
    if prefixed && let Some(why) = unportable(&format!("a{sep}b")) {
        out.push(format!(
            "separator `{sep}` {why} in every namespaced tool name; the function-calling APIs of \
             OpenAI and Anthropic accept only ^[a-zA-Z0-9_-]{{1,64}}$ — for clients that pass MCP \
             tool names to them unchanged, drop [gateway] names = \"mcp\" (portable names, separator `__`)"
        ));
    }
    // Beyond the separator: renamed tools whose own alias, or whole exposed name, is refused.
    for u in &snapshot.upstreams {
        for alias in u.rename.values() {
            let exposed = crate::names::expose(&u.name, sep, u.prefix, alias);
            let len = exposed.chars().count();
            if let Some(why) = unportable(alias) {
                out.push(format!(
                    "exposed name `{exposed}`: its alias {why}; some clients' model APIs reject it"
                ));
            } else if len > crate::names::PORTABLE_NAME_CHARS {
                out.push(format!(
                    "exposed name `{exposed}` is {len} characters long; some clients' model APIs accept at most {}",
                    crate::names::PORTABLE_NAME_CHARS
                ));
            }
        }
    }
    out
}
