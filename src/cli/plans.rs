//! `fedgate plans list|approve|deny`: the operator sees and decides plans waiting for
//! approval. Plans live in the serving gateway (and in Redis with `[cluster] redis`), so these
//! go through its admin API; without one answering they say so, and `fedgate flows run --wait`
//! asks in the terminal instead.

use std::{path::Path, process::ExitCode};

use clap::Subcommand;
use serde_json::Value;

use super::{CliError, admin_api::AdminApi};

#[derive(Debug, Subcommand)]
pub enum PlansCommand {
    /// Plans waiting for a decision: id, tool, caller, approver roles, expiry.
    List {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve a plan (the operator is the decider of last resort; see `[admin] approve_plans`).
    Approve { plan_id: String },
    /// Deny a plan: its call never runs.
    Deny { plan_id: String },
}

pub async fn run(config: &Path, command: PlansCommand) -> Result<ExitCode, CliError> {
    let api = AdminApi::of(config, "plans")?;
    let (method, path, verb) = match &command {
        PlansCommand::List { .. } => (reqwest::Method::GET, "/admin/plans".to_owned(), None),
        PlansCommand::Approve { plan_id } => (
            reqwest::Method::POST,
            format!("/admin/plans/{}/approve", segment(plan_id)?),
            Some("approved"),
        ),
        PlansCommand::Deny { plan_id } => (
            reqwest::Method::POST,
            format!("/admin/plans/{}/deny", segment(plan_id)?),
            Some("denied"),
        ),
    };
    let body = api
        .send(
            method,
            &path,
            "start it with `fedgate serve`, or run the flow with `fedgate flows run ID --wait` to decide in this terminal",
        )
        .await?;
    match command {
        PlansCommand::List { json: true } => println!("{body}"),
        PlansCommand::List { json: false } => print_list(&body),
        _ => println!(
            "plan {} {}: {}",
            body["plan"].as_str().unwrap_or("?"),
            verb.unwrap_or("decided"),
            body["tool"].as_str().unwrap_or("?")
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// A plan id as one URL path segment (ids are `plan_` and hex; anything else is refused here).
fn segment(id: &str) -> Result<&str, CliError> {
    if !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        Ok(id)
    } else {
        Err(CliError::Message(format!(
            "`{}` is not a plan id (plan ids look like plan_0123…)",
            crate::names::shown(id)
        )))
    }
}

fn print_list(plans: &Value) {
    let plans = plans.as_array().cloned().unwrap_or_default();
    if plans.is_empty() {
        println!("no plans waiting");
        return;
    }
    for p in plans {
        let approvers = p["approvers"]
            .as_array()
            .filter(|a| !a.is_empty())
            .map(|a| {
                let roles: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
                format!("role {}", roles.join(" or "))
            })
            .unwrap_or_else(|| "its caller".into());
        println!(
            "{}  {:<8}  {}  ({})  caller {}  decided by {}",
            p["id"].as_str().unwrap_or("?"),
            p["state"]["state"].as_str().unwrap_or("?"),
            p["tool"].as_str().unwrap_or("?"),
            p["summary"].as_str().unwrap_or(""),
            p["caller"].as_str().unwrap_or("?"),
            approvers,
        );
    }
}
