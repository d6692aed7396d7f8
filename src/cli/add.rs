//! `fedgate catalog [search WORD]` and `fedgate add NAME`: popular servers from the catalog in
//! the binary, added to a gateway.toml as an upstream with the tier, read-only tools, declared
//! writes and credential references that fit them.

use super::CliError;
use std::{path::Path, process::ExitCode};

use crate::server_catalog::{self, Entry};

pub fn catalog(word: Option<&str>) -> Result<ExitCode, CliError> {
    let entries = match word {
        Some(w) => server_catalog::search(w)?,
        None => server_catalog::all()?.into_iter().collect(),
    };
    if entries.is_empty() {
        println!("no server matches; `fedgate catalog` lists them all");
        return Ok(ExitCode::SUCCESS);
    }
    let w = entries
        .iter()
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:<w$}  {:<6}  {:<6}  DESCRIPTION",
        "NAME", "RUNNER", "TIER"
    );
    for (name, e) in &entries {
        let runner = format!("{:?}", e.runner).to_lowercase();
        println!("{name:<w$}  {runner:<6}  {:<6}  {}", e.tier, e.description);
    }
    Ok(ExitCode::SUCCESS)
}

/// What `fedgate add` takes.
#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// A server of `fedgate catalog`.
    name: String,
    /// The upstream's name in the config (its tools' namespace); default: the catalog name.
    #[arg(long = "as")]
    alias: Option<String>,
    /// The config to add it to (created when missing).
    #[arg(long, short, default_value = super::DEFAULT_CONFIG)]
    config: std::path::PathBuf,
    /// Print the upstream's table; change nothing.
    #[arg(long)]
    print: bool,
    /// Arguments the server needs (after `--`), e.g. `fedgate add filesystem -- ~/notes`.
    #[arg(last = true)]
    args: Vec<String>,
}

pub fn add(a: AddArgs) -> Result<ExitCode, CliError> {
    let all = server_catalog::all()?;
    let Some(entry) = all.get(&a.name) else {
        let hint = crate::names::did_you_mean(&a.name, all.keys().map(String::as_str));
        return Err(CliError::Message(format!(
            "no server `{}` in the catalog{hint} (`fedgate catalog` lists them, `fedgate catalog search WORD` finds one)",
            crate::names::shown(&a.name)
        )));
    };
    let alias = a.alias.clone().unwrap_or_else(|| a.name.clone());
    if let Some(why) = crate::names::unportable(&alias).or_else(|| {
        alias
            .contains("__")
            .then(|| "contains the separator `__`".to_owned())
    }) {
        return Err(CliError::Message(format!(
            "upstream name `{}` {why}: use --as with A-Z a-z 0-9 _ -",
            crate::names::shown(&alias)
        )));
    }
    if let (Some(needs), true) = (&entry.needs_args, a.args.is_empty()) {
        return Err(CliError::Message(format!("`{}` needs {needs}", a.name)));
    }
    let (table, notes) = upstream_table(&a.name, &alias, entry, &a.args)?;
    if a.print {
        print!("{table}");
        for n in &notes {
            eprintln!("{n}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let old = match std::fs::read_to_string(&a.config) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(CliError::Message(format!(
                "cannot read {}: {e}",
                a.config.display()
            )));
        }
    };
    let base = old
        .clone()
        .unwrap_or_else(|| "[gateway]\nlisten = \"127.0.0.1:8930\"\n".to_owned());
    let parsed: toml::Table = base
        .parse()
        .map_err(|e| format!("{} is not valid TOML: {e}", a.config.display()))?;
    if parsed
        .get("upstreams")
        .and_then(|u| u.get(&alias))
        .is_some()
    {
        return Err(CliError::Message(format!(
            "{} already has an upstream `{alias}`: add it under another name with --as",
            a.config.display()
        )));
    }
    let text = format!("{}\n{}\n", base.trim_end(), table.trim_end());
    write_checked(&a.config, old.as_deref(), &text)?;
    println!(
        "{}: upstream `{alias}` added ({})",
        a.config.display(),
        entry.source
    );
    for n in &notes {
        println!("{n}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The upstream's TOML, and what the user should know (credentials to set, how it starts).
fn upstream_table(
    name: &str,
    alias: &str,
    e: &Entry,
    extra: &[String],
) -> Result<(String, Vec<String>), CliError> {
    let (command, args) = e.command(|bin| crate::config::command::found(bin, None), extra);
    let mut notes = Vec::new();
    if Some(&command) == e.bin.as_ref() {
        notes.push(format!(
            "  starts the installed `{command}` (found on PATH)"
        ));
    } else if e.runner == crate::server_catalog::Runner::Docker {
        notes.push(format!(
            "  starts the image `{}` with docker (pulled on first start)",
            e.package
        ));
    } else {
        notes.push(format!(
            "  starts it with `{command}` (fetched on first start; install `{}` to start it without)",
            e.package
        ));
    }
    let mut t = toml::Table::new();
    t.insert("kind".into(), "stdio".into());
    t.insert("command".into(), command.into());
    if !args.is_empty() {
        t.insert("args".into(), args.into());
    }
    t.insert("tier".into(), e.tier.clone().into());
    if !e.read_only.is_empty() {
        t.insert("read_only".into(), e.read_only.clone().into());
    }
    if !e.writable.is_empty() {
        t.insert("writable".into(), e.writable.clone().into());
    }
    if !e.env.is_empty() {
        let mut env = toml::Table::new();
        for (k, what) in &e.env {
            env.insert(k.clone(), format!("env:{k}").into());
            notes.push(format!("  set {k} in fedgate's environment: {what}"));
        }
        t.insert("env".into(), toml::Value::Table(env));
    }
    let mut ups = toml::Table::new();
    ups.insert(alias.to_owned(), toml::Value::Table(t));
    let mut root = toml::Table::new();
    root.insert("upstreams".into(), toml::Value::Table(ups));
    let body = toml::to_string(&root).map_err(|e| format!("cannot write TOML: {e}"))?;
    Ok((
        format!(
            "\n# {name} (fedgate catalog): {}\n# {}\n{body}",
            e.description, e.source
        ),
        notes,
    ))
}

/// Writes `text` to `config` only if it loads, keeping the old file as `<config>.bak`.
fn write_checked(config: &Path, old: Option<&str>, text: &str) -> Result<(), CliError> {
    super::replace_file::replace(config, old, text, |tmp| {
        crate::config::load_for_reading(tmp)
            .map(drop)
            .map_err(|diags| {
                let all: Vec<String> = diags.iter().map(|d| format!("  {d}")).collect();
                CliError::Message(format!(
                    "the config would not load with it, so {} is unchanged:\n{}",
                    config.display(),
                    all.join("\n")
                ))
            })
    })
    .map(drop)
}
