//! `fedgate connect|disconnect CLIENT`: this gateway's entry in a client's own config file
//! (Claude Desktop, Cursor, VS Code), merged without touching the other servers — their text is
//! kept byte for byte — with a backup of the file as it was.

use super::CliError;
use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use indexmap::IndexMap;
use serde_json::{json, value::RawValue};

/// What `connect` and `disconnect` take.
#[derive(Debug, clap::Args)]
pub struct ConnectArgs {
    /// The client whose config file to change.
    #[arg(value_parser = ["claude-desktop", "cursor", "vscode"])]
    client: String,
    /// Connect by URL to a serving gateway (without a value: the URL of `--config`'s listen
    /// address). Default: the client starts `fedgate stdio` itself.
    #[arg(long, num_args = 0..=1, default_missing_value = "", conflicts_with = "stdio")]
    url: Option<String>,
    /// The client starts `fedgate stdio --config …` (the default).
    #[arg(long)]
    stdio: bool,
    /// The gateway's config.
    #[arg(long, short, default_value = super::DEFAULT_CONFIG)]
    config: PathBuf,
    /// The client's config file (default: where the client reads it).
    #[arg(long)]
    file: Option<PathBuf>,
    /// The server's name in the client.
    #[arg(long, default_value = "fedgate")]
    name: String,
    /// Print the entry and the file it belongs in; change nothing.
    #[arg(long)]
    print: bool,
}

/// A client's file format.
struct Client {
    /// The object servers live under.
    key: &'static str,
    /// Whether its file may name a URL (Claude Desktop adds remote servers elsewhere).
    urls: bool,
    /// Whether entries carry `"type"` (VS Code).
    typed: bool,
    /// Whether its file may say `${env:NAME}` (the client's own environment).
    expands_env: bool,
}

fn client(name: &str) -> Client {
    match name {
        "claude-desktop" => Client {
            key: "mcpServers",
            urls: false,
            typed: false,
            expands_env: false,
        },
        "vscode" => Client {
            key: "servers",
            urls: true,
            typed: true,
            expands_env: true,
        },
        _ => Client {
            key: "mcpServers",
            urls: true,
            typed: false,
            expands_env: true,
        },
    }
}

/// Where the client reads its servers.
fn default_file(name: &str) -> Result<PathBuf, CliError> {
    let home = || {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .ok_or_else(|| "HOME is not set: name the file with --file".to_owned())
    };
    Ok(match name {
        "claude-desktop" if cfg!(target_os = "macos") => {
            home()?.join("Library/Application Support/Claude/claude_desktop_config.json")
        }
        "claude-desktop" => match std::env::var_os("XDG_CONFIG_HOME") {
            Some(x) => PathBuf::from(x),
            None => home()?.join(".config"),
        }
        .join("Claude/claude_desktop_config.json"),
        "cursor" => home()?.join(".cursor/mcp.json"),
        // A workspace's servers: the folder `connect` runs in.
        _ => PathBuf::from(".vscode/mcp.json"),
    })
}

pub fn connect(args: ConnectArgs) -> Result<ExitCode, CliError> {
    let c = client(&args.client);
    let entry = entry(&args, &c)?;
    let file = target(&args)?;
    if args.print {
        println!("{}", file.display());
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({c.key: {&args.name: entry}})).unwrap_or_default()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let raw =
        serde_json::value::to_raw_value(&entry).map_err(|e| CliError::Message(e.to_string()))?;
    if let Changed::Yes(backup) = change(&file, c.key, |servers| {
        servers.insert(args.name.clone(), raw);
        true
    })? {
        report(&file, &args.name, "written", backup);
    }
    Ok(ExitCode::SUCCESS)
}

pub fn disconnect(args: ConnectArgs) -> Result<ExitCode, CliError> {
    let c = client(&args.client);
    let file = target(&args)?;
    if !file.exists() {
        return Err(CliError::Message(format!(
            "{}: no such file, nothing to remove",
            file.display()
        )));
    }
    // Nothing to remove: the file stays as it is, not even rewritten.
    match change(&file, c.key, |servers| {
        servers.shift_remove(&args.name).is_some()
    })? {
        Changed::Yes(backup) => report(&file, &args.name, "removed", backup),
        Changed::No => println!("{}: no server `{}`; unchanged", file.display(), args.name),
    }
    Ok(ExitCode::SUCCESS)
}

/// One server as a client's file holds it, fields in the order clients document them.
#[derive(Debug, serde::Serialize)]
struct Entry {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<[String; 3]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    /// What `fedgate stdio` needs of the client's environment: the variables the config
    /// references, as the client's own references (never their values).
    #[serde(skip_serializing_if = "Option::is_none")]
    env: Option<std::collections::BTreeMap<String, String>>,
}

/// The entry for this gateway: a URL, or the command that starts `fedgate stdio`.
fn entry(args: &ConnectArgs, c: &Client) -> Result<Entry, CliError> {
    let config =
        std::path::absolute(&args.config).map_err(|e| format!("{}: {e}", args.config.display()))?;
    // The config must load: a client would otherwise start a gateway that exits at once.
    let snapshot = super::serve::load_for_reading(&config)?;
    if let Some(url) = &args.url {
        if !c.urls {
            return Err(CliError::Message(format!(
                "{} starts the servers of its config file over stdio (remote servers are added in \
                 its settings); use --stdio",
                args.client
            )));
        }
        let url = if url.is_empty() {
            let scheme = if snapshot.gateway.tls.is_some() {
                "https"
            } else {
                "http"
            };
            format!("{scheme}://{}/mcp", snapshot.gateway.listen)
        } else {
            url.clone()
        };
        return Ok(Entry {
            kind: c.typed.then_some("http"),
            command: None,
            args: None,
            url: Some(url),
            env: None,
        });
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate fedgate itself: {e}"))?;
    Ok(Entry {
        kind: c.typed.then_some("stdio"),
        command: Some(exe.display().to_string()),
        args: Some([
            "stdio".into(),
            "--config".into(),
            config.display().to_string(),
        ]),
        url: None,
        env: stdio_env(&args.client, c, &config),
    })
}

/// The `env` block of a stdio entry: every `env:NAME` the config references. A client that
/// expands `${env:NAME}` (VS Code, Cursor) gets those, so no secret is written into its file;
/// one that does not (Claude Desktop) gets nothing, and the names it must be given are said.
fn stdio_env(
    client_name: &str,
    c: &Client,
    config: &Path,
) -> Option<std::collections::BTreeMap<String, String>> {
    let text = std::fs::read_to_string(config).ok()?;
    let names = referenced_env(&text);
    if names.is_empty() {
        return None;
    }
    if c.expands_env {
        return Some(
            names
                .into_iter()
                .map(|n| (n.clone(), format!("${{env:{n}}}")))
                .collect(),
        );
    }
    eprintln!(
        "warning: {client_name} starts `fedgate stdio` with only the environment its file gives \
         it, and its file cannot refer to variables: add {} under this server's \"env\" there \
         (fedgate does not copy secrets into it), or connect by --url to a serving gateway",
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    None
}

/// The names of the `env:NAME` references anywhere in a config's text.
fn referenced_env(text: &str) -> std::collections::BTreeSet<String> {
    fn walk(v: &toml::Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            toml::Value::String(s) => {
                if let Some(name) = s.strip_prefix("env:").filter(|n| !n.is_empty()) {
                    out.insert(name.to_owned());
                }
            }
            toml::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            toml::Value::Table(t) => t.values().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = std::collections::BTreeSet::new();
    if let Ok(v) = text.parse::<toml::Table>() {
        walk(&toml::Value::Table(v), &mut out);
    }
    out
}

type Servers = IndexMap<String, Box<RawValue>>;

/// A top-level value as written back: the edited servers laid out anew, anything else as read.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Node {
    Servers(Servers),
    Raw(Box<RawValue>),
}

/// Reads `file` (a missing one is empty), lets `edit` change the servers under `key`, and
/// writes it back through a temporary file, after copying the old one to `<file>.bak`. Nothing
/// is written when the file is not JSON, holds no object under `key`, or is read-only.
fn change(
    file: &Path,
    key: &str,
    edit: impl FnOnce(&mut Servers) -> bool,
) -> Result<Changed, CliError> {
    let shown = file.display();
    let old = match std::fs::read_to_string(file) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(CliError::Message(format!("cannot read {shown}: {e}"))),
    };
    if old.is_some() && std::fs::metadata(file).is_ok_and(|m| m.permissions().readonly()) {
        return Err(CliError::Message(format!(
            "{shown} is read-only: nothing was changed"
        )));
    }
    let top: IndexMap<String, Box<RawValue>> = match old.as_deref() {
        Some(text) if !text.trim().is_empty() => serde_json::from_str(text)
            .map_err(|e| format!("{shown} is not a JSON object ({e}): left untouched"))?,
        _ => IndexMap::new(),
    };
    let mut servers: Servers = match top.get(key) {
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|_| format!("{shown}: `{key}` is not an object: left untouched"))?,
        None => IndexMap::new(),
    };
    if !edit(&mut servers) {
        return Ok(Changed::No);
    }
    let mut out: IndexMap<String, Node> = top.into_iter().map(|(k, v)| (k, Node::Raw(v))).collect();
    out.insert(key.to_owned(), Node::Servers(servers));
    let mut text =
        serde_json::to_string_pretty(&out).map_err(|e| CliError::Message(e.to_string()))?;
    text.push('\n');
    super::replace_file::replace(file, old.as_deref(), &text, |_| Ok(())).map(Changed::Yes)
}

/// Whether `change` wrote the file, and where the old one went.
enum Changed {
    No,
    Yes(Option<PathBuf>),
}

/// "FILE: server `NAME` VERB", with where the file as it was is kept.
fn report(file: &Path, name: &str, verb: &str, backup: Option<PathBuf>) {
    println!(
        "{}: server `{name}` {verb}{}",
        file.display(),
        backup
            .map(|b| format!(" (the file as it was: {})", b.display()))
            .unwrap_or_default()
    );
}

/// The client's file: `--file`, else where the client reads it.
fn target(args: &ConnectArgs) -> Result<PathBuf, CliError> {
    match &args.file {
        Some(f) => Ok(f.clone()),
        None => default_file(&args.client),
    }
}
