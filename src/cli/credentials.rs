//! `fedgate credentials list|revoke`: the operator sees who connected which per-user upstream
//! and forgets accounts (revoked at their authorization server where it can be), through the
//! serving gateway's admin API — the credentials are sealed in its store.

use std::{path::Path, process::ExitCode};

use clap::Subcommand;
use serde_json::Value;

use super::{CliError, admin_api::AdminApi};

#[derive(Debug, Subcommand)]
pub enum CredentialsCommand {
    /// Connected accounts: person, upstream, provider account, when connected, refreshed,
    /// last used, expiry, scopes (never a token).
    List {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Forget a person's account for one upstream, or all of theirs; revoked at the
    /// authorization server too where it has a revocation endpoint.
    Revoke {
        /// The person as the list names them (`api_key:alice`, `jwt:alice@example.com`).
        person: String,
        /// Only this upstream's account.
        upstream: Option<String>,
    },
}

pub async fn run(config: &Path, command: CredentialsCommand) -> Result<ExitCode, CliError> {
    let api = AdminApi::of(config, "per-user credentials")?;
    let unreachable = "start it with `fedgate serve`";
    match command {
        CredentialsCommand::List { json } => {
            let body = api
                .send(reqwest::Method::GET, "/admin/credentials", unreachable)
                .await?;
            if json {
                println!("{body}");
            } else {
                print_list(&body);
            }
        }
        CredentialsCommand::Revoke { person, upstream } => {
            let mut path = format!("/admin/credentials/{}", segment(&person));
            if let Some(u) = &upstream {
                path.push('/');
                path.push_str(&segment(u));
            }
            let body = api
                .send(reqwest::Method::DELETE, &path, unreachable)
                .await?;
            let forgot = body["upstreams"].as_array().cloned().unwrap_or_default();
            if forgot.is_empty() {
                println!("{person} had no connected account to forget");
            }
            for f in forgot {
                println!(
                    "forgot {person}'s {} account (at the provider: {})",
                    f["upstream"].as_str().unwrap_or("?"),
                    f["at_provider"].as_str().unwrap_or("?")
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A name as one percent-encoded URL path segment.
fn segment(name: &str) -> String {
    form_urlencoded::byte_serialize(name.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// Milliseconds since the epoch as an RFC 3339 time, or `-`.
fn when(v: &Value) -> String {
    v.as_i64()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || "-".to_owned(),
            |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
}

fn print_list(body: &Value) {
    let list = body["connections"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!("no connected accounts");
        return;
    }
    for c in list {
        let scopes: Vec<&str> = c["scopes"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        println!(
            "{}  {}  account {}  connected {}  refreshed {}  used {}  expires {}  scopes {}",
            c["owner"].as_str().unwrap_or("?"),
            c["upstream"].as_str().unwrap_or("?"),
            c["account"].as_str().unwrap_or("-"),
            when(&c["connected_at_ms"]),
            when(&c["refreshed_at_ms"]),
            when(&c["last_used_ms"]),
            when(&c["expires_at_ms"]),
            if scopes.is_empty() {
                "-".to_owned()
            } else {
                scopes.join(" ")
            },
        );
    }
}
