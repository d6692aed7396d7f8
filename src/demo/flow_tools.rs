//! Demo tools that let tests see a flow from the upstream's side: `meet` (callers wait for
//! each other, so concurrency is observed, not timed) and `record` (a write that honours
//! idempotency keys and counts how often each key really ran).

use std::{collections::HashMap, sync::LazyLock, time::Duration};

use parking_lot::Mutex;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, RequestMetaObject as Meta, Tool};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::tools::{arg_str, arg_u64, tool};

#[derive(Default)]
struct Group {
    arrived: u64,
    inside: u64,
    peak: u64,
}

static GROUPS: LazyLock<Mutex<HashMap<String, Group>>> = LazyLock::new(Default::default);
static ARRIVALS: LazyLock<Notify> = LazyLock::new(Notify::new);
/// Idempotency key -> (times the effect ran, the answer recorded).
static RECORDS: LazyLock<Mutex<HashMap<String, (u64, Value)>>> = LazyLock::new(Default::default);
/// Effects of calls without a key.
static UNKEYED: LazyLock<Mutex<u64>> = LazyLock::new(Default::default);

pub(super) fn tools() -> Vec<Tool> {
    vec![
        tool(
            "meet",
            "Wait until `n` calls of `group` have arrived (at most `timeout_ms`, default 5000); \
             answers with the most calls of the group inside at once.",
            json!({"group": {"type": "string"}, "n": {"type": "integer", "minimum": 1},
                   "timeout_ms": {"type": "integer", "minimum": 0}}),
            true,
        ),
        tool(
            "record",
            "Record `value` (a write). A call with `_meta.idempotencyKey` seen before answers as \
             the first did and does not record again. After recording, it meets one other call \
             of `meet` group `signal` (when given), then waits `ms` before answering.",
            json!({"value": {}, "ms": {"type": "integer", "minimum": 0}, "signal": {"type": "string"}}),
            false,
        ),
        tool(
            "executions",
            "How often `record` really ran, per idempotency key (and without one).",
            json!({}),
            true,
        ),
    ]
}

/// Answers the tools above; `None` for any other name.
pub(super) async fn call(
    name: &str,
    args: &Option<JsonObject>,
    meta: &Meta,
) -> Option<CallToolResult> {
    Some(match name {
        "meet" => meet(args).await,
        "record" => record(args, meta).await,
        "executions" => {
            let records: serde_json::Map<_, _> = RECORDS
                .lock()
                .iter()
                .map(|(k, (n, _))| (k.clone(), json!(n)))
                .collect();
            let unkeyed = *UNKEYED.lock();
            structured(json!({"keys": records, "unkeyed": unkeyed}))
        }
        _ => return None,
    })
}

async fn meet(args: &Option<JsonObject>) -> CallToolResult {
    let group = arg_str(args, "group").unwrap_or_default();
    let n = arg_u64(args, "n").unwrap_or(1);
    let wait = Duration::from_millis(arg_u64(args, "timeout_ms").unwrap_or(5_000));
    match meet_in(&group, n, wait).await {
        Ok(peak) => structured(json!({"group": group, "peak": peak})),
        Err(arrived) => CallToolResult::error(vec![ContentBlock::text(format!(
            "only {arrived} of {n} calls of `{group}` arrived within {} ms",
            wait.as_millis()
        ))]),
    }
}

/// Joins `group` and waits until `n` calls have arrived: the peak inside at once, or how many
/// arrived when `wait` ran out.
async fn meet_in(group: &str, n: u64, wait: Duration) -> Result<u64, u64> {
    let group = group.to_owned();
    let update = |f: &dyn Fn(&mut Group)| f(GROUPS.lock().entry(group.clone()).or_default());
    update(&|g| {
        g.arrived += 1;
        g.inside += 1;
        g.peak = g.peak.max(g.inside);
    });
    ARRIVALS.notify_waiters();
    let arrived = || GROUPS.lock().get(&group).map_or(0, |g| g.arrived);
    let met = tokio::time::timeout(wait, async {
        loop {
            let notified = ARRIVALS.notified();
            if arrived() >= n {
                return;
            }
            notified.await;
        }
    })
    .await
    .is_ok();
    let peak = GROUPS.lock().get(&group).map_or(0, |g| g.peak);
    update(&|g| g.inside = g.inside.saturating_sub(1));
    if met { Ok(peak) } else { Err(arrived()) }
}

async fn record(args: &Option<JsonObject>, meta: &Meta) -> CallToolResult {
    let value = args
        .as_ref()
        .and_then(|a| a.get("value"))
        .cloned()
        .unwrap_or(Value::Null);
    let key = meta
        .get("idempotencyKey")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let answer = match &key {
        Some(k) => {
            let mut records = RECORDS.lock();
            match records.get(k) {
                Some((_, answer)) => return structured(answer.clone()),
                None => {
                    let answer = json!({"recorded": value});
                    records.insert(k.clone(), (1, answer.clone()));
                    answer
                }
            }
        }
        None => {
            *UNKEYED.lock() += 1;
            json!({"recorded": value})
        }
    };
    // A test's signal that the write happened: meet it before answering.
    if let Some(group) = arg_str(args, "signal") {
        let _ = meet_in(&group, 2, Duration::from_secs(60)).await;
    }
    if let Some(ms) = arg_u64(args, "ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    structured(answer)
}

fn structured(v: Value) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(v.to_string())]);
    r.structured_content = Some(v);
    r
}
