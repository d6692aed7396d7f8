//! Scale-out on real shared stores (F16): three fedgate replicas behind the round-robin proxy
//! share one Debian `redis-server`. Rate limits hold across replicas (the sum of admitted calls
//! stays within the configured rate) and fall back per replica or refuse when Redis is stopped.

use crate::common;

use common::{flows::WRITES, round_robin::RoundRobin, stores::RedisServer, *};
use serde_json::json;
use tokio::time::Instant;

const KEY: &str = "cluster-state-key-test-only-0123456789";
const PER_SECOND: u32 = 2;
const BURST: u32 = 4;

fn replica(redis: &RedisServer, fail: &str, extra: &str) -> Gateway {
    Gateway::start_env(
        &format!(
            "[gateway]\nstate_key = \"env:FG_STATE_KEY\"\n\n\
             [cluster]\nredis = \"{}\"\nfail = \"{fail}\"\ntimeout_ms = 200\n\n\
             [[rate_limits]]\nname = \"shared\"\nper_second = {PER_SECOND}\nburst = {BURST}\n\n{extra}{}",
            redis.url(),
            stdio_upstream("demo", &[], "")
        ),
        &[("FG_STATE_KEY", KEY)],
    )
}

/// Sends `n` calls one after another; answers (admitted, refused-by-the-limit, other refusals).
async fn burst_of(client: &Client, n: usize) -> (u32, u32, Vec<String>) {
    let (mut admitted, mut limited, mut other) = (0, 0, Vec::new());
    for i in 0..n {
        match call(client, "demo__echo", json!({"text": i.to_string()})).await {
            Ok(r) if r.is_error != Some(true) => admitted += 1,
            Ok(r) => {
                let text = format!("{r:?}");
                if text.contains("rate_limited") {
                    limited += 1;
                } else {
                    other.push(text);
                }
            }
            Err(e) => other.push(e.to_string()),
        }
    }
    (admitted, limited, other)
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rate_limit_holds_across_three_replicas_and_falls_back_per_replica_without_redis() {
    let mut redis = RedisServer::start();
    let replicas: Vec<Gateway> = (0..3).map(|_| replica(&redis, "local", "")).collect();
    let (rr, url) = RoundRobin::start(replicas.iter().map(|g| g.base.clone()).collect()).await;
    let client = connect_modern(&url, TestClient::new()).await;

    let started = Instant::now();
    let (admitted, limited, other) = burst_of(&client, 30).await;
    let elapsed = started.elapsed().as_secs_f64();
    assert!(other.is_empty(), "{other:?}");
    // GCRA allows the burst plus the rate over the time the calls took; one more for a cell
    // that came due between the last two calls.
    let allowed = f64::from(BURST) + f64::from(PER_SECOND) * elapsed;
    let tolerance = 1.0;
    println!(
        "shared limit: {admitted} admitted, {limited} limited in {elapsed:.2}s; allowed {allowed:.1} + {tolerance} tolerance"
    );
    assert!(
        f64::from(admitted) <= allowed + tolerance,
        "{admitted} admitted across replicas, more than {allowed:.1} + {tolerance}"
    );
    assert!(admitted >= BURST, "the burst passes: {admitted}");
    let hits = rr.hits.lock().clone();
    for i in 0..3 {
        assert!(hits.contains(&i), "replica {i} served calls: {hits:?}");
    }
    // Per replica, each would have admitted its own burst: 3 × 4 > what passed.
    assert!(admitted < 3 * BURST, "{admitted}");

    // Redis gone: each replica decides alone, every call is answered, the outage is logged
    // once per replica however many calls it decides, and the fallbacks are counted.
    redis.stop();
    let (admitted, limited, other) = burst_of(&client, 30).await;
    assert!(other.is_empty(), "fail = local serves on: {other:?}");
    assert!(
        admitted >= BURST,
        "per-replica buckets admit: {admitted} ({limited} limited)"
    );
    for g in &replicas {
        let log = g.stderr();
        assert_eq!(count(&log, "redis unreachable"), 1, "{log}");
        let metrics = g.metrics().await;
        assert!(
            metrics
                .contains("fedgate_store_fallbacks_total{feature=\"rate_limits\",mode=\"local\"}"),
            "{metrics}"
        );
        assert!(metrics.contains("fedgate_store_errors_total{op=\"rate_limit\",store=\"redis\"}"));
    }

    // Redis back: the replicas say so once and share the limit again.
    redis.resume();
    for g in &replicas {
        let mut calls = 0;
        while count(&g.stderr(), "redis answers again") == 0 {
            let direct = connect_modern(&g.url, TestClient::new()).await;
            let _ = call(&direct, "demo__echo", json!({"text": "probe"})).await;
            calls += 1;
            assert!(
                calls < 50,
                "a replica never used redis again: {}",
                g.stderr()
            );
        }
    }
    let keys = redis.query(&["KEYS", "fedgate:rl:*"]).await;
    assert!(
        matches!(&keys, redis::Value::Array(k) if !k.is_empty()),
        "limit state lives in redis: {keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_fail_closed_a_replica_without_redis_refuses_clearly() {
    let mut redis = RedisServer::start();
    let gw = replica(&redis, "closed", "");
    let client = connect_modern(&gw.url, TestClient::new()).await;
    let ok = call(&client, "demo__echo", json!({"text": "up"}))
        .await
        .expect("call");
    assert_eq!(first_text(&ok), "echo: up");
    redis.stop();
    let refused = call(&client, "demo__echo", json!({"text": "down"})).await;
    let text = match refused {
        Ok(r) => {
            assert_eq!(r.is_error, Some(true), "{r:?}");
            format!("{r:?}")
        }
        Err(e) => e.to_string(),
    };
    assert!(
        text.contains("store_unavailable") && text.contains("does not answer"),
        "{text}"
    );
    assert!(
        !text.contains("127.0.0.1"),
        "no store address in the refusal: {text}"
    );
    let metrics = gw.metrics().await;
    assert!(
        metrics
            .contains("fedgate_store_fallbacks_total{feature=\"rate_limits\",mode=\"closed\"} 1")
    );
}

fn with_key(tool: &str, a: serde_json::Value, key: &str) -> rmcp::model::CallToolRequestParams {
    let mut p = rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(args(a));
    let mut meta = serde_json::Map::new();
    meta.insert("idempotencyKey".into(), key.into());
    p.meta = Some(rmcp::model::RequestMetaObject(rmcp::model::MetaObject(
        meta,
    )));
    p
}

/// The shared upstream's own count of the tool calls it served.
async fn served(client: &Client, upstream: &str) -> u64 {
    let r = call(client, &format!("{upstream}__stats"), json!({}))
        .await
        .expect("stats");
    r.structured_content.expect("stats")["calls"]
        .as_u64()
        .expect("calls")
}

#[tokio::test(flavor = "multi_thread")]
async fn one_idempotency_key_runs_once_across_replicas_even_concurrently() {
    let redis = RedisServer::start();
    // One upstream process behind both replicas: its counter sees every run.
    let demo = HttpDemo::start("demo", "--http");
    let upstream = format!(
        "[upstreams.demo]\nkind = \"http\"\nurl = \"{}\"\n",
        demo.url
    );
    let replica_of = |redis: &RedisServer| {
        Gateway::start_env(
            &format!(
                "[gateway]\nstate_key = \"env:FG_STATE_KEY\"\n\n\
                 [cluster]\nredis = \"{}\"\n\n{upstream}",
                redis.url()
            ),
            &[("FG_STATE_KEY", KEY)],
        )
    };
    let (a, b) = (replica_of(&redis), replica_of(&redis));
    let (ca, cb) = (
        connect_modern(&a.url, TestClient::new()).await,
        connect_modern(&b.url, TestClient::new()).await,
    );

    // The same key at the same time on both replicas: one run, one answer for both.
    let before = served(&ca, "demo").await;
    let slow = || with_key("demo__slow", json!({"ms": 400}), "key-concurrent");
    let (ra, rb) = tokio::join!(ca.peer().call_tool(slow()), cb.peer().call_tool(slow()));
    let (ra, rb) = (ra.expect("a"), rb.expect("b"));
    assert_eq!(first_text(&ra), "slept 400");
    assert_eq!(first_text(&rb), "slept 400");
    assert_eq!(
        served(&ca, "demo").await - before,
        2,
        "the slow call ran once (plus this stats call)"
    );

    // A retry on the other replica later gets the recorded result without a run.
    let before = served(&cb, "demo").await;
    let first = ca
        .peer()
        .call_tool(with_key("demo__echo", json!({"text": "once"}), "key-retry"))
        .await
        .expect("first");
    let retry = cb
        .peer()
        .call_tool(with_key("demo__echo", json!({"text": "once"}), "key-retry"))
        .await
        .expect("retry");
    assert_eq!(first_text(&first), first_text(&retry));
    assert_eq!(
        served(&cb, "demo").await - before,
        2,
        "echo ran once (plus stats)"
    );

    // The same key with other arguments, on the other replica: a conflict, not a run.
    let conflict = cb
        .peer()
        .call_tool(with_key(
            "demo__echo",
            json!({"text": "other"}),
            "key-retry",
        ))
        .await;
    let text = match conflict {
        Ok(r) => format!("{r:?}"),
        Err(e) => e.to_string(),
    };
    assert!(text.contains("idempotency_conflict"), "{text}");
}

const ADMIN_TOKEN: &str = "cluster-admin-token-test-only";
const TIERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/trust-tiers");

async fn admin(gw: &Gateway, method: &str, path: &str) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .request(
            method.parse().expect("method"),
            format!("{}{path}", gw.admin.as_deref().expect("admin")),
        )
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("admin request");
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_held_on_one_replica_is_approved_and_run_on_another_once() {
    // Credentials as secret references: the password never shows.
    let redis = RedisServer::start_with(Some("redis-password-test-only"));
    let demo = HttpDemo::start("notes", "--http");
    let replica_of = |redis: &RedisServer| {
        Gateway::start_env(
            &format!(
                "[gateway]\nstate_key = \"env:FG_STATE_KEY\"\ntiers_dir = {TIERS:?}\n\n\
                 [cluster]\nredis = \"env:FG_REDIS\"\n\n\
                 [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"env:FG_ADMIN\"\n\n\
                 [auth]\nanonymous = true\nanonymous_roles = [\"all\"]\n\n\
                 [roles.all]\ntools = [\"*\"]\n[roles.reviewer]\ntools = [\"fedgate__approve\"]\n\n\
                 [upstreams.notes]\nkind = \"http\"\nurl = \"{}\"\ntier = \"high\"\n\
                 [upstreams.notes.tools.file_ticket]\napproval = \"plan\"\napprovers = [\"reviewer\"]\n",
                demo.url
            ),
            &[
                ("FG_STATE_KEY", KEY),
                ("FG_ADMIN", ADMIN_TOKEN),
                ("FG_REDIS", &redis.url()),
            ],
        )
    };
    let (a, b) = (replica_of(&redis), replica_of(&redis));
    let (ca, cb) = (
        connect_modern(&a.url, TestClient::new()).await,
        connect_modern(&b.url, TestClient::new()).await,
    );

    // Held on A.
    let held = call(
        &ca,
        "notes__file_ticket",
        json!({"title": "T", "priority": "high"}),
    )
    .await
    .expect("held");
    let plan_id = held
        .meta
        .as_ref()
        .and_then(|m| m.0.get("io.fedgate/orchestrated_plan"))
        .and_then(|p| p["next_actions"][0]["args"]["plan_id"].as_str())
        .unwrap_or_else(|| panic!("a plan: {held:?}"))
        .to_owned();

    // Listed and approved on B.
    let (status, pending) = admin(&b, "GET", "/admin/plans").await;
    assert_eq!(status, 200);
    assert!(
        pending
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["id"] == plan_id.as_str())),
        "B lists A's plan: {pending}"
    );
    let (status, decided) = admin(&b, "POST", &format!("/admin/plans/{plan_id}/approve")).await;
    assert_eq!(status, 200, "{decided}");

    // The caller runs it on both replicas at once: it runs once.
    let before = served(&ca, "notes").await;
    let approve = json!({"plan_id": plan_id, "decision": "approve"});
    let (ra, rb) = tokio::join!(
        call(&ca, "fedgate__approve", approve.clone()),
        call(&cb, "fedgate__approve", approve.clone())
    );
    let outcomes: Vec<String> = [ra, rb]
        .into_iter()
        .map(|r| match r {
            Ok(r) if r.is_error != Some(true) => "ran".to_owned(),
            Ok(r) => format!("{r:?}"),
            Err(e) => e.to_string(),
        })
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| *o == "ran").count(),
        1,
        "exactly one run: {outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .any(|o| o.contains("plan_used") || o.contains("plan_changed")),
        "the other is refused as used: {outcomes:?}"
    );
    assert_eq!(
        served(&ca, "notes").await - before,
        2,
        "file_ticket ran once (plus stats)"
    );

    // Used everywhere afterwards.
    let again = call(&cb, "fedgate__approve", approve).await.expect("again");
    assert!(format!("{again:?}").contains("plan_used"), "{again:?}");
    let (_, pending) = admin(&a, "GET", "/admin/plans").await;
    assert_eq!(pending, json!([]), "nothing waits any more");
    let (_, config) = admin(&a, "GET", "/admin/config").await;
    let shown = config["cluster"]["redis"].as_str().unwrap_or_default();
    assert!(
        shown.starts_with("redis://") && shown.contains("redacted"),
        "{config}"
    );
    for text in [config.to_string(), a.stderr(), b.stderr()] {
        assert!(!text.contains("redis-password-test-only"), "{text}");
    }
}

const QUICK: &str = r#"
id = "quick"
[[nodes]]
id = "say"
tool = "ledger__echo"
params = { text = "quick" }
[outputs]
said = "{{say.output}}"
"#;

/// A replica whose flow runs live in `postgres`, with a short lease.
fn flow_replica(postgres: &common::stores::PostgresServer, ledger: &str) -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("flows")).expect("flows dir");
    std::fs::write(dir.path().join("flows/writes.toml"), WRITES).expect("flow");
    std::fs::write(dir.path().join("flows/quick.toml"), QUICK).expect("flow");
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\nstate_key = \"env:FG_STATE_KEY\"\ntiers_dir = {TIERS:?}\n\n\
             [cluster]\npostgres = \"{}\"\nlease_ms = 1500\n\n\
             [flows]\ndir = \"flows\"\n\n\
             [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"env:FG_ADMIN\"\n\n\
             [upstreams.ledger]\nkind = \"http\"\nurl = \"{ledger}\"\ntier = \"high\"\nidempotency_keys = true\n",
            postgres.url()
        ),
    )
    .expect("config");
    Gateway::start_file_env(
        &cfg,
        dir,
        &[("FG_STATE_KEY", KEY), ("FG_ADMIN", ADMIN_TOKEN)],
    )
}

async fn admin_json(
    gw: &Gateway,
    method: &str,
    path: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .request(
            method.parse().expect("method"),
            format!("{}{path}", gw.admin.as_deref().expect("admin")),
        )
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .expect("admin request");
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_of_a_killed_replica_is_taken_over_after_its_lease_and_each_write_runs_once() {
    let postgres = common::stores::PostgresServer::start();
    let ledger = HttpDemo::start("ledger", "--http");
    let mut a = flow_replica(&postgres, &ledger.url);
    let b = flow_replica(&postgres, &ledger.url);

    // A drives the run; its second write reaches the upstream (which meets this test's own
    // `meet` call before answering), and A is SIGKILLed while that write is in flight.
    let (status, started) = admin_json(
        &a,
        "POST",
        "/admin/flows/writes/runs",
        json!({"inputs": {"signal": "takeover"}}),
    )
    .await;
    assert_eq!(status, 202, "{started}");
    let run = started["run_id"].as_str().expect("run id").to_owned();
    let signal = connect_legacy(&ledger.url, TestClient::new()).await;
    let met = call(
        &signal,
        "meet",
        json!({"group": "takeover", "n": 2, "timeout_ms": 20000}),
    )
    .await
    .expect("meet");
    assert_eq!(
        met.is_error,
        Some(false),
        "the second write never came: {met:?}"
    );
    a.child.kill().expect("SIGKILL A");
    a.child.wait().expect("reaped");

    // B sees the run in the shared log, takes it over once A's lease ran out, and ends it.
    let (_, after) = admin_json(
        &b,
        "GET",
        &format!("/admin/flows/runs/{run}?wait_ms=20000"),
        json!({}),
    )
    .await;
    assert_eq!(after["state"]["finished"], "succeeded", "{after}");
    assert_eq!(
        after["state"]["outputs"]["said"], "echo: wrote 1 and 2",
        "{after}"
    );
    assert_eq!(
        after["state"]["nodes"]["second"]["attempts"], 2,
        "re-driven once, by B: {after}"
    );
    let c = connect_legacy(&ledger.url, TestClient::new()).await;
    let counts = call(&c, "executions", json!({}))
        .await
        .expect("executions")
        .structured_content
        .expect("counts");
    assert_eq!(
        counts,
        json!({"keys": {format!("{run}:first"): 1, format!("{run}:second"): 1}, "unkeyed": 0}),
        "each write ran once at the upstream"
    );
    assert!(
        b.stderr().contains("taking over flow run"),
        "{}",
        b.stderr()
    );
    let metrics = b.metrics().await;
    assert!(
        metrics.contains("fedgate_flow_lease_takeovers_total 1"),
        "{metrics}"
    );

    // A flow run called as a task on B answers its handle on a replica started afterwards.
    let created = common::raw::raw_call(&b.url, "any", "flows__quick", json!({})).await;
    let handle = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    let c = flow_replica(&postgres, &ledger.url);
    let done = common::raw::task_poll(&c.url, "any", &handle, |t| t["status"] == "completed").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"said": "echo: quick"}),
        "{done}"
    );
}

const APPROVED: &str = r#"
id = "approved"
[[nodes]]
id = "entry"
tool = "ledger__record"
params = { value = "v1" }
[outputs]
wrote = "{{entry.output.recorded}}"
"#;

/// A replica that shares plans (Redis) and runs (PostgreSQL); `ledger.record` needs approval.
fn approving_replica(
    redis: &RedisServer,
    postgres: &common::stores::PostgresServer,
    ledger: &str,
) -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("flows")).expect("flows dir");
    std::fs::write(dir.path().join("flows/approved.toml"), APPROVED).expect("flow");
    let cfg = dir.path().join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\nstate_key = \"env:FG_STATE_KEY\"\ntiers_dir = {TIERS:?}\n\n\
             [cluster]\nredis = \"{}\"\npostgres = \"{}\"\nlease_ms = 1500\n\n\
             [flows]\ndir = \"flows\"\n\n\
             [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"env:FG_ADMIN\"\n\n\
             [upstreams.ledger]\nkind = \"http\"\nurl = \"{ledger}\"\ntier = \"high\"\nidempotency_keys = true\n\
             [upstreams.ledger.tools.record]\napproval = \"plan\"\n",
            redis.url(),
            postgres.url()
        ),
    )
    .expect("config");
    Gateway::start_file_env(
        &cfg,
        dir,
        &[("FG_STATE_KEY", KEY), ("FG_ADMIN", ADMIN_TOKEN)],
    )
}

/// Starts a run of `approved` on `gw` and waits until it parks: run id, plan id, events so far.
async fn parked_approved_run(gw: &Gateway) -> (String, String, u64) {
    let (status, started) = admin_json(gw, "POST", "/admin/flows/approved/runs", json!({})).await;
    assert_eq!(status, 202, "{started}");
    let run = started["run_id"].as_str().expect("run id").to_owned();
    let (_, parked) = admin_json(
        gw,
        "GET",
        &format!("/admin/flows/runs/{run}?wait_ms=20000&until=parked"),
        json!({}),
    )
    .await;
    let plan = parked["waiting"][0]["plan_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{parked}"))
        .to_owned();
    let seq = parked["state"]["seq"].as_u64().expect("seq");
    (run, plan, seq)
}

/// Waits for run `run` to finish on `gw`; asserts that `ledger.record` ran exactly once for it.
async fn succeeded_with_one_write(gw: &Gateway, ledger: &str, run: &str) {
    let (_, done) = admin_json(
        gw,
        "GET",
        &format!("/admin/flows/runs/{run}?wait_ms=20000"),
        json!({}),
    )
    .await;
    assert_eq!(done["state"]["finished"], "succeeded", "{done}");
    let c = connect_legacy(ledger, TestClient::new()).await;
    let counts = call(&c, "executions", json!({}))
        .await
        .expect("executions")
        .structured_content
        .expect("counts");
    assert_eq!(
        counts,
        json!({"keys": {format!("{run}:entry"): 1}, "unkeyed": 0}),
        "the write ran once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_taken_over_run_supersedes_its_old_plan_and_its_new_one_runs_once() {
    let redis = RedisServer::start();
    let postgres = common::stores::PostgresServer::start();
    let ledger = HttpDemo::start("ledger", "--http");
    let mut a = approving_replica(&redis, &postgres, &ledger.url);
    let b = approving_replica(&redis, &postgres, &ledger.url);

    // A parks the run on a plan, and dies.
    let (run, old, seq) = parked_approved_run(&a).await;
    a.child.kill().expect("SIGKILL A");
    a.child.wait().expect("reaped");

    // B takes the run over and asks again; the old plan is superseded, not left pending.
    let (_, again) = admin_json(
        &b,
        "GET",
        &format!("/admin/flows/runs/{run}?wait_ms=20000&until=parked&after={seq}"),
        json!({}),
    )
    .await;
    let new = again["waiting"][0]["plan_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{again}"))
        .to_owned();
    assert_ne!(new, old, "{again}");
    let (_, pending) = admin_json(&b, "GET", "/admin/plans", json!({})).await;
    let ids: Vec<&str> = pending
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["id"].as_str())
        .collect();
    assert_eq!(ids, [new.as_str()], "one pending plan per run: {pending}");
    let (status, stale) = admin_json(
        &b,
        "POST",
        &format!("/admin/plans/{old}/approve"),
        json!({}),
    )
    .await;
    assert_eq!(status, 409, "{stale}");
    assert_eq!(stale["code"], "plan_superseded", "{stale}");

    // The new plan, approved, runs the write once and ends the run.
    let (status, ok) = admin_json(
        &b,
        "POST",
        &format!("/admin/plans/{new}/approve"),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{ok}");
    succeeded_with_one_write(&b, &ledger.url, &run).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_on_another_replica_resumes_the_run_where_it_waits() {
    let redis = RedisServer::start();
    let postgres = common::stores::PostgresServer::start();
    let ledger = HttpDemo::start("ledger", "--http");
    let a = approving_replica(&redis, &postgres, &ledger.url);
    let b = approving_replica(&redis, &postgres, &ledger.url);
    let (run, plan, _) = parked_approved_run(&a).await;
    // Decided on B; A, which drives the run, runs the write once and goes on.
    let (status, ok) = admin_json(
        &b,
        "POST",
        &format!("/admin/plans/{plan}/approve"),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{ok}");
    succeeded_with_one_write(&a, &ledger.url, &run).await;
    let (status, again) = admin_json(
        &b,
        "POST",
        &format!("/admin/plans/{plan}/approve"),
        json!({}),
    )
    .await;
    assert_eq!(status, 409, "{again}");
}
