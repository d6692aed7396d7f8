//! `fedgate flows …`: list flows and runs, start, show, replay, re-run and cancel runs.
//!
//! `list` and `show` read the run log directly. Commands that change runs go to the serving
//! gateway's admin API when `[admin]` is configured and the gateway answers (it drives its
//! runs); otherwise they run in this process, with the upstreams started here, and wait.

use super::CliError;
use std::{path::Path, process::ExitCode, sync::Arc, time::Duration};

use clap::Subcommand;
use serde_json::{Value, json};

use super::serve::{settle_bound, stop};
use crate::{
    config::Snapshot,
    flows::{Engine, events::RunState, report},
    policy::identity::{Identity, IdentityKind},
    server::core::Core,
};

/// How long `--wait` and in-process commands wait for a run.
const WAIT: Duration = Duration::from_secs(300);

#[derive(Debug, Subcommand)]
pub enum FlowsCommand {
    /// The flows that load (and why others do not), and the newest runs.
    List,
    /// Start the upstreams and check every flow against their tools: unknown tools, tiers
    /// that refuse a node, literal params the tool's schema refuses. Exit 1 on a problem.
    Check,
    /// Start a run of flow ID with --input; --wait prints its result and timeline.
    Run {
        id: String,
        /// The inputs, a JSON object.
        #[arg(long, default_value = "{}")]
        input: String,
        #[arg(long)]
        wait: bool,
    },
    /// A run's timeline: every event, then each node's status, attempts, time and error.
    Show {
        run_id: String,
        /// Print the record, state and events as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a finished run again against the live tools and report every divergence.
    Replay {
        run_id: String,
        /// Repeat writes to upstreams that do not declare `idempotency_keys = true` too (they
        /// may write twice); without it such nodes keep their recorded outcome.
        #[arg(long)]
        allow_writes: bool,
    },
    /// Re-run one node of a finished run, and everything downstream of it.
    Rerun { run_id: String, node: String },
    /// Cancel a run.
    Cancel { run_id: String },
    /// Decide a node blocked by an interrupted write: rerun or skip.
    Decide {
        run_id: String,
        node: String,
        #[arg(value_parser = ["rerun", "skip"])]
        decision: String,
    },
}

pub async fn run(config: &Path, command: FlowsCommand) -> Result<ExitCode, CliError> {
    // Reading a run needs no secret; what needs the serving gateway says so when it cannot
    // reach it (see `admin`).
    let snapshot = super::serve::load_for_reading(config)?;
    if snapshot.flows.dir.is_none() {
        return Err(CliError::Message(format!(
            "{}: no [flows] dir configured",
            config.display()
        )));
    }
    match command {
        FlowsCommand::List => list(&snapshot).await,
        FlowsCommand::Check => {
            let problems = with_engine(
                &snapshot,
                |engine| async move { Ok(engine.catalog_problems()) },
            )
            .await?;
            let all: Vec<String> = snapshot
                .flows
                .set
                .problems
                .iter()
                .chain(&problems)
                .map(|d| d.to_string())
                .collect();
            for p in &all {
                eprintln!("{p}");
            }
            if all.is_empty() {
                println!("{} flows: ok", snapshot.flows.set.flows.len());
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("{} problem(s) found", all.len());
                Ok(ExitCode::FAILURE)
            }
        }
        FlowsCommand::Show { run_id, json } => show(&snapshot, &run_id, json).await,
        FlowsCommand::Run { id, input, wait } => {
            let inputs: Value =
                serde_json::from_str(&input).map_err(|e| format!("--input is not JSON: {e}"))?;
            let body = json!({"inputs": inputs});
            if let Some(v) = admin(&snapshot, &format!("{id}/runs"), Some(body)).await? {
                let run_id = v["run_id"].as_str().unwrap_or_default().to_owned();
                println!("run {run_id}");
                if !wait {
                    return Ok(ExitCode::SUCCESS);
                }
                return wait_served(&snapshot, &run_id).await;
            }
            in_process(&snapshot, |engine| async move {
                let started = engine
                    .start(&id, inputs, (operator(), None), 0, None, Default::default())
                    .await
                    .map_err(CliError::from)?;
                println!("run {}", started.run_id);
                let run_id = started.run_id.clone();
                let mut done = started.done;
                // While it runs here, nobody else can decide its plans: ask in this terminal.
                let mut after = 0;
                loop {
                    tokio::select! {
                        state = &mut done => {
                            let state = state.map_err(CliError::from)?.map_err(CliError::from)?;
                            return Ok((run_id, state));
                        }
                        settled = engine.settle(&run_id, after) => {
                            let (state, parked) = settled.map_err(CliError::from)?;
                            after = state.seq;
                            if parked && !ask_here(&engine, &state).await {
                                return Err(CliError::Message(format!(
                                    "run {run_id} waits for approval; nobody answered. It asks again when a gateway with this config starts (or run `fedgate flows run` again)"
                                )));
                            }
                        }
                    }
                }
            })
            .await
        }
        FlowsCommand::Replay {
            run_id,
            allow_writes,
        } => {
            let path = if allow_writes {
                format!("runs/{run_id}/replay?allow_writes=true")
            } else {
                format!("runs/{run_id}/replay")
            };
            let report = match admin(&snapshot, &path, None).await? {
                Some(v) => v,
                None => {
                    let snapshot = snapshot.clone();
                    with_engine(&snapshot, |engine| async move {
                        engine
                            .replay(&run_id, allow_writes)
                            .await
                            .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
                            .map_err(CliError::from)
                    })
                    .await?
                }
            };
            let divergences = report["divergences"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            println!(
                "replay {} of {}: {} nodes, {} divergence(s)",
                report["replay_run_id"].as_str().unwrap_or("?"),
                report["run_id"].as_str().unwrap_or("?"),
                report["nodes"],
                divergences.len()
            );
            for d in &divergences {
                println!(
                    "  {}: recorded {} {}, replayed {} {}",
                    d["node"].as_str().unwrap_or("?"),
                    d["recorded_status"].as_str().unwrap_or("?"),
                    d["recorded"],
                    d["replayed_status"].as_str().unwrap_or("?"),
                    d["replayed"]
                );
            }
            for node in report["not_replayed"].as_array().into_iter().flatten() {
                println!(
                    "  {}: not replayed (a write to an upstream that does not declare idempotency_keys = true; it kept its recorded outcome — --allow-writes repeats it)",
                    node.as_str().unwrap_or("?")
                );
            }
            Ok(if divergences.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        FlowsCommand::Rerun { run_id, node } => {
            let path = format!("runs/{run_id}/rerun/{node}");
            if admin(&snapshot, &path, None).await?.is_some() {
                let path = format!("runs/{run_id}?wait_ms={}", WAIT.as_millis());
                let v = admin_get(&snapshot, &path).await?;
                return Ok(print_run(&run_id, &v));
            }
            in_process(&snapshot, |engine| async move {
                let done = engine.rerun(&run_id, &node).await.map_err(CliError::from)?;
                let state = done
                    .await
                    .map_err(CliError::from)?
                    .map_err(CliError::from)?;
                Ok((run_id, state))
            })
            .await
        }
        FlowsCommand::Cancel { run_id } => {
            let path = format!("runs/{run_id}/cancel");
            if admin(&snapshot, &path, None).await?.is_none() {
                let snapshot = snapshot.clone();
                with_engine(&snapshot, |engine| async move {
                    engine
                        .cancel_run(&run_id)
                        .await
                        .map(|_| Value::Null)
                        .map_err(CliError::from)
                })
                .await?;
            }
            println!("cancel requested");
            Ok(ExitCode::SUCCESS)
        }
        FlowsCommand::Decide {
            run_id,
            node,
            decision,
        } => {
            let path = format!("runs/{run_id}/nodes/{node}/{decision}");
            match admin(&snapshot, &path, None).await? {
                Some(_) => {
                    println!("node {node}: {decision}");
                    Ok(ExitCode::SUCCESS)
                }
                None => Err(CliError::Message(
                    "deciding a node needs the serving gateway's admin API ([admin])".to_owned(),
                )),
            }
        }
    }
}

/// Waits for a run the serving gateway drives; each time it parks on a plan, says which and
/// how to decide it.
async fn wait_served(snapshot: &Snapshot, run_id: &str) -> Result<ExitCode, CliError> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut after = 0;
    let mut told = std::collections::BTreeSet::new();
    loop {
        let path = format!(
            "runs/{run_id}?wait_ms={}&until=parked&after={after}",
            WAIT.as_millis()
        );
        let v = admin_get(snapshot, &path).await?;
        if !v["state"]["finished"].is_null() || tokio::time::Instant::now() >= deadline {
            return Ok(print_run(run_id, &v));
        }
        for w in v["waiting"].as_array().into_iter().flatten() {
            let plan = w["plan_id"].as_str().unwrap_or("?").to_owned();
            if told.insert(plan.clone()) {
                println!(
                    "node {} waits for approval (plan {plan}): {}\n  approve: fedgate plans approve {plan}\n  deny:    fedgate plans deny {plan}",
                    w["node"].as_str().unwrap_or("?"),
                    w["instruction"].as_str().unwrap_or(""),
                );
            }
        }
        after = v["state"]["seq"].as_u64().unwrap_or(after);
    }
}

/// Asks on this terminal about each plan the parked run waits on; false when nobody answers
/// (standard input closed).
async fn ask_here(engine: &Arc<Engine>, state: &RunState) -> bool {
    let waiting: Vec<(String, String, String)> = state
        .nodes
        .iter()
        .filter(|(_, n)| n.status == crate::flows::events::NodeStatus::AwaitingApproval)
        .filter_map(|(node, n)| {
            let plan = n.plan.as_ref()?;
            Some((
                node.clone(),
                crate::flows::node::plan_id(plan)?,
                plan["instruction"].as_str().unwrap_or("").to_owned(),
            ))
        })
        .collect();
    if waiting.is_empty() {
        // Blocked for an operator's decision (`fedgate flows decide`): keep waiting.
        return true;
    }
    for (node, plan, instruction) in waiting {
        println!("node {node} waits for approval (plan {plan}): {instruction}");
        println!("approve it? [y/N]");
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|n| (n, line))
        })
        .await;
        let Ok(Ok((n, line))) = line else {
            return false;
        };
        if n == 0 {
            return false;
        }
        let decision = if matches!(line.trim(), "y" | "Y" | "yes") {
            crate::approval::Decision::Approve
        } else {
            crate::approval::Decision::Deny
        };
        let own = operator().key();
        let operator = crate::approval::operator::Operator {
            name: "local",
            plans: engine.plans(),
            shared: None,
            approve_any: true,
            own: &own,
            metrics: None,
            audit: None,
        };
        if let Err(e) = operator.decide(&plan, decision).await {
            eprintln!("fedgate: plan {plan}: {e}");
        }
    }
    true
}

fn operator() -> Identity {
    Identity::unrestricted("local", IdentityKind::Local)
}

/// The run log the gateway of this config uses (it claims nothing: this process only reads).
async fn open_log(snapshot: &Snapshot) -> Result<Arc<dyn crate::flows::log::RunLog>, CliError> {
    let metrics = crate::telemetry::metrics::Metrics::new().map_err(CliError::from)?;
    crate::flows::log::open(snapshot, "cli", &metrics.cluster, false)
        .await
        .map_err(CliError::from)
}

async fn list(snapshot: &Snapshot) -> Result<ExitCode, CliError> {
    let naming = snapshot.gateway.naming();
    for f in &snapshot.flows.set.flows {
        println!(
            "{:<24} {:<30} {:>3} nodes  {}",
            f.id,
            crate::flows::tool::tool_name(&f.id, &naming),
            f.nodes.len(),
            f.file
        );
    }
    for d in &snapshot.flows.set.problems {
        eprintln!("{d}");
    }
    let log = open_log(snapshot).await?;
    let runs = log.runs(20).await.map_err(CliError::from)?;
    if !runs.is_empty() {
        println!("\nnewest runs:");
    }
    for r in runs {
        let state = RunState::fold(&log.events(&r.run_id).await.map_err(CliError::from)?);
        println!(
            "  {}  {:<20} {}{}",
            r.run_id,
            r.flow,
            state.finished.map_or("running", |s| s.as_str()),
            r.replay_of
                .map(|o| format!("  (replay of {o})"))
                .unwrap_or_default()
        );
    }
    Ok(if snapshot.flows.set.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn show(snapshot: &Snapshot, run_id: &str, as_json: bool) -> Result<ExitCode, CliError> {
    let log = open_log(snapshot).await?;
    let record = log
        .run(run_id)
        .await
        .map_err(CliError::from)?
        .ok_or_else(|| format!("no run `{}`", crate::names::shown(run_id)))?;
    let events = log.events(run_id).await.map_err(CliError::from)?;
    let state = RunState::fold(&events);
    if as_json {
        println!(
            "{}",
            json!({"run": record, "state": state, "events": events})
        );
    } else {
        print!(
            "{}",
            report::timeline(run_id, &record.flow, &events, &state)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A run's end as the admin API reported it: timeline, then the outputs or errors.
fn print_run(run_id: &str, v: &Value) -> ExitCode {
    match serde_json::from_value::<Vec<crate::flows::events::Stamped>>(v["events"].clone()) {
        Ok(events) => {
            let state = RunState::fold(&events);
            let flow = v["run"]["flow"].as_str().unwrap_or("?");
            print!("{}", report::timeline(run_id, flow, &events, &state));
            finish(run_id, &state)
        }
        Err(e) => {
            eprintln!("fedgate: unreadable run from the admin API: {e}");
            ExitCode::FAILURE
        }
    }
}

fn finish(run_id: &str, state: &RunState) -> ExitCode {
    if let Some(outputs) = &state.outputs {
        println!("outputs: {outputs}");
    }
    if let Some(error) = &state.error {
        eprintln!("fedgate: flow run {run_id}: {error}");
    }
    match state.finished {
        Some(crate::flows::events::RunStatus::Succeeded) => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

/// Calls the admin API: `None` when no admin is configured or the gateway does not answer.
async fn admin(
    snapshot: &Snapshot,
    path: &str,
    body: Option<Value>,
) -> Result<Option<Value>, CliError> {
    let Some(a) = &snapshot.admin else {
        return Ok(None);
    };
    // Never fall back to driving runs here while a gateway may serve them: say why not.
    if let Some(why) = &a.token_missing {
        return Err(no_token(why).into());
    }
    let url = format!("http://{}/admin/flows/{path}", a.listen);
    let resp = reqwest::Client::new()
        .post(&url)
        .bearer_auth(a.token.expose())
        .json(&body.unwrap_or(json!({})))
        .timeout(WAIT)
        .send()
        .await;
    let resp = match resp {
        Ok(r) => r,
        Err(e) if e.is_connect() => return Ok(None),
        Err(e) => return Err(CliError::Message(format!("admin API: {e}"))),
    };
    answer(resp).await.map(Some)
}

/// Why the serving gateway's admin API cannot be used from here.
fn no_token(why: &str) -> String {
    format!("this needs the serving gateway's admin API, and [admin] token: {why}")
}

async fn admin_get(snapshot: &Snapshot, path: &str) -> Result<Value, CliError> {
    let a = snapshot.admin.as_ref().ok_or("no [admin] configured")?;
    if let Some(why) = &a.token_missing {
        return Err(no_token(why).into());
    }
    let resp = reqwest::Client::new()
        .get(format!("http://{}/admin/flows/{path}", a.listen))
        .bearer_auth(a.token.expose())
        .timeout(WAIT + Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| format!("admin API: {e}"))?;
    answer(resp).await
}

async fn answer(resp: reqwest::Response) -> Result<Value, CliError> {
    let status = resp.status();
    let v: Value = resp.json().await.map_err(|e| format!("admin API: {e}"))?;
    if status.is_success() {
        Ok(v)
    } else {
        Err(v["error"].as_str().unwrap_or("admin API refused").into())
    }
}

/// Starts the upstreams here and gives `f` the engine; stops them after.
async fn with_engine<F, Fut, T>(snapshot: &Snapshot, f: F) -> Result<T, CliError>
where
    F: FnOnce(Arc<Engine>) -> Fut,
    Fut: std::future::Future<Output = Result<T, CliError>>,
{
    let core = Core::new(snapshot).await?;
    core.start();
    core.pool().wait_settled(settle_bound(snapshot)).await;
    let _stack = core.stack(None);
    let engine = core.flows().cloned().ok_or("no [flows] dir configured")?;
    let result = f(engine).await;
    stop(core.pool()).await;
    result
}

/// Runs a command that drives a run here, then prints its timeline and outputs.
async fn in_process<F, Fut>(snapshot: &Snapshot, f: F) -> Result<ExitCode, CliError>
where
    F: FnOnce(Arc<Engine>) -> Fut,
    Fut: std::future::Future<Output = Result<(String, RunState), CliError>>,
{
    let (run_id, state) = with_engine(snapshot, f).await?;
    let log = open_log(snapshot).await?;
    let events = log.events(&run_id).await.map_err(CliError::from)?;
    let flow = log
        .run(&run_id)
        .await
        .map_err(CliError::from)?
        .map(|r| r.flow)
        .unwrap_or_default();
    print!("{}", report::timeline(&run_id, &flow, &events, &state));
    Ok(finish(&run_id, &state))
}
