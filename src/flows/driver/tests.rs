//! The scheduler on its own: runs of real flow definitions against a stack that is a plain
//! function (it answers by tool name and records what it was asked), on a SQLite run log in a
//! temporary folder, in paused time. What a node's call meets in the pipeline is the
//! integration tests' business; here it is the order and the states.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rmcp::model::{CallToolResult, ContentBlock, ServerResult};
use serde_json::{Value, json};
use tower::util::BoxCloneSyncService;

use crate::{
    flows::{
        Engine,
        events::{NodeStatus, RunState, RunStatus},
    },
    pipeline::{Call, CallError, Op, Stacks},
    policy::identity::Identity,
};

/// What the fake stack saw: the tools called, in order, and the most running at once.
#[derive(Debug, Default)]
struct Seen {
    calls: Mutex<Vec<String>>,
    running: AtomicUsize,
    peak: AtomicUsize,
}

/// `demo__ok` answers its arguments; `demo__fail` fails for good; `demo__slow` answers after
/// a second (paused time), or stops when its call is cancelled.
fn stack(seen: Arc<Seen>) -> Stacks {
    let typed = tower::service_fn(move |call: Call| {
        let seen = seen.clone();
        async move {
            let Op::CallTool(p) = &call.op else {
                return Err(CallError::UnknownTask);
            };
            let tool = p.name.to_string();
            seen.calls.lock().push(tool.clone());
            let now = seen.running.fetch_add(1, Ordering::SeqCst) + 1;
            seen.peak.fetch_max(now, Ordering::SeqCst);
            let out = match tool.as_str() {
                "demo__fail" => Ok(ServerResult::CallToolResult(CallToolResult::error(vec![
                    ContentBlock::text("it broke"),
                ]))),
                "demo__slow" => {
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                        () = call.ct.cancelled() => {}
                    }
                    Ok(ServerResult::CallToolResult(CallToolResult::success(vec![
                        ContentBlock::text("slow"),
                    ])))
                }
                _ => Ok(ServerResult::CallToolResult(CallToolResult::structured(
                    Value::Object(p.arguments.clone().unwrap_or_default()),
                ))),
            };
            seen.running.fetch_sub(1, Ordering::SeqCst);
            out
        }
    });
    let typed = BoxCloneSyncService::new(typed);
    let client =
        BoxCloneSyncService::new(tower::ServiceExt::map_err(typed.clone(), |e: CallError| {
            crate::pipeline::to_wire(&e, true)
        }));
    Stacks { client, typed }
}

struct Bench {
    engine: Arc<Engine>,
    seen: Arc<Seen>,
    _dir: tempfile::TempDir,
}

/// An engine over `flows` (file name, text), bound to the fake stack.
async fn bench(flows: &[(&str, &str)]) -> Bench {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("flows")).expect("flows dir");
    for (name, text) in flows {
        std::fs::write(dir.path().join("flows").join(name), text).expect("flow file");
    }
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\ntiers_dir = {:?}\n[flows]\ndir = \"flows\"\ndb = \"runs.db\"\n\
             [upstreams.demo]\nkind = \"stdio\"\ncommand = \"true\"\n",
            concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers")
        ),
    )
    .expect("config");
    let snapshot = crate::config::load(&cfg).expect("valid config");
    assert!(
        snapshot.flows.set.problems.is_empty(),
        "{:?}",
        snapshot.flows.set.problems
    );
    let metrics = Arc::new(crate::telemetry::metrics::Metrics::new().expect("metrics"));
    let seal = Arc::new(rmcp::model::RequestStateCodec::try_new(vec![7; 32]).expect("key"));
    let log = crate::flows::log::open(&snapshot, "gw", &metrics.cluster, true)
        .await
        .expect("run log");
    let engine = Engine::open(
        &snapshot.flows,
        log,
        Arc::new(ArcSwap::new(snapshot.auth.clone())),
        metrics.flows.clone(),
        crate::tasks::TaskHandles::new(seal),
        Arc::new(crate::approval::Plans::new(60_000, 16)),
    )
    .expect("engine");
    let pool = crate::upstream::pool::Pool::new(
        &snapshot,
        metrics,
        Arc::new(crate::upstream::NoDownstreams),
        Vec::new(),
    );
    let seen = Arc::new(Seen::default());
    engine.bind(stack(seen.clone()), pool);
    Bench {
        engine,
        seen,
        _dir: dir,
    }
}

fn ann() -> Identity {
    Identity {
        name: "ann".into(),
        kind: crate::policy::identity::IdentityKind::ApiKey,
        access: Arc::new(crate::policy::authz::Access::unrestricted()),
    }
}

async fn run(b: &Bench, flow: &str, inputs: Value) -> (String, RunState) {
    let started = b
        .engine
        .start(flow, inputs, (ann(), None), 0, None, Default::default())
        .await
        .expect("started");
    let state = started.done.await.expect("ended").expect("driven");
    (started.run_id, state)
}

const CHAIN: &str = r#"
id = "chain"
[[nodes]]
id = "a"
tool = "demo__ok"
params = { n = 1 }
[[nodes]]
id = "b"
tool = "demo__ok"
depends_on = ["a"]
params = { from_a = "{{a.output.n}}" }
[[nodes]]
id = "shout"
tool = "demo__ok"
depends_on = ["b"]
when = "inputs.loud == `true`"
[outputs]
got = "{{b.output.from_a}}"
"#;

#[tokio::test(start_paused = true)]
async fn a_node_runs_once_its_dependencies_succeeded_and_a_false_condition_skips() {
    let b = bench(&[("chain.toml", CHAIN)]).await;
    let (_, state) = run(&b, "chain", json!({"loud": false})).await;
    assert_eq!(state.finished, Some(RunStatus::Succeeded));
    assert_eq!(
        *b.seen.calls.lock(),
        ["demo__ok", "demo__ok"],
        "a, then b; not shout"
    );
    assert_eq!(state.node("shout"), NodeStatus::Skipped);
    assert_eq!(state.outputs, Some(json!({"got": 1})));
    let (_, loud) = run(&b, "chain", json!({"loud": true})).await;
    assert_eq!(loud.node("shout"), NodeStatus::Succeeded);
}

const BROKEN: &str = r#"
id = "broken"
[[nodes]]
id = "a"
tool = "demo__fail"
[[nodes]]
id = "b"
tool = "demo__ok"
depends_on = ["a"]
[[nodes]]
id = "side"
tool = "demo__ok"
"#;

#[tokio::test(start_paused = true)]
async fn a_failed_node_skips_what_depends_on_it_and_the_run_is_partial() {
    let b = bench(&[("broken.toml", BROKEN)]).await;
    let (_, state) = run(&b, "broken", json!({})).await;
    assert_eq!(state.node("a"), NodeStatus::Failed);
    assert_eq!(state.node("b"), NodeStatus::Skipped, "never called");
    assert_eq!(
        state.node("side"),
        NodeStatus::Succeeded,
        "independent branch runs"
    );
    // Something succeeded, something failed.
    assert_eq!(state.finished, Some(RunStatus::Partial));
    let mut calls = b.seen.calls.lock().clone();
    calls.sort();
    assert_eq!(calls, ["demo__fail", "demo__ok"], "b was never called");
}

const WIDE: &str = r#"
id = "wide"
parallelism = 2
[[nodes]]
id = "a"
tool = "demo__slow"
[[nodes]]
id = "b"
tool = "demo__slow"
[[nodes]]
id = "c"
tool = "demo__slow"
[[nodes]]
id = "d"
tool = "demo__slow"
"#;

#[tokio::test(start_paused = true)]
async fn ready_nodes_run_within_the_flows_parallelism() {
    let b = bench(&[("wide.toml", WIDE)]).await;
    let started = tokio::time::Instant::now();
    let (_, state) = run(&b, "wide", json!({})).await;
    assert_eq!(state.finished, Some(RunStatus::Succeeded));
    assert_eq!(
        b.seen.peak.load(Ordering::SeqCst),
        2,
        "never more than 2 at once"
    );
    // Four one-second nodes, two at a time: two seconds of (paused) time, not one or four.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_run_stops_its_running_nodes_and_starts_no_more() {
    let b = bench(&[("wide.toml", WIDE)]).await;
    let started = b
        .engine
        .start(
            "wide",
            json!({}),
            (ann(), None),
            0,
            None,
            Default::default(),
        )
        .await
        .expect("started");
    // Two nodes are running (the parallelism); cancel before they answer.
    while b.seen.running.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    assert!(b.engine.cancel(&started.run_id));
    let state = started.done.await.expect("ended").expect("driven");
    assert_eq!(state.finished, Some(RunStatus::Cancelled));
    assert_eq!(b.seen.calls.lock().len(), 2, "c and d never started");
}

#[tokio::test(start_paused = true)]
async fn a_resumed_run_does_not_call_what_already_succeeded() {
    let b = bench(&[("chain.toml", CHAIN)]).await;
    let (run_id, first) = run(&b, "chain", json!({"loud": true})).await;
    assert_eq!(first.finished, Some(RunStatus::Succeeded));
    let calls = b.seen.calls.lock().len();
    // The run as recorded, driven again: every node is final, so nothing is called.
    let (record, events) = b.engine.load(&run_id).await.expect("recorded");
    let again = b
        .engine
        .drive(
            b.engine.flow("chain").expect("flow"),
            record,
            ann(),
            crate::flows::Drive {
                events,
                ..Default::default()
            },
        )
        .await
        .expect("ended")
        .expect("driven");
    assert_eq!(again.finished, Some(RunStatus::Succeeded));
    assert_eq!(b.seen.calls.lock().len(), calls, "no node ran again");
}
