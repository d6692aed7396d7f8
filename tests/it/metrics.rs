//! `/metrics` of a real fedgate after a scripted set of calls: counters per outcome, histogram
//! counts, gauges; and every metric a shipped Grafana dashboard uses is one fedgate exports.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;

/// `name{labels} value` lines of a scrape, keyed by the full series.
fn series(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

fn value(all: &BTreeMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    all.iter()
        .filter(|(k, _)| {
            k.split('{').next() == Some(name)
                && labels
                    .iter()
                    .all(|(l, v)| k.contains(&format!("{l}=\"{v}\"")))
        })
        .map(|(_, v)| v)
        .sum()
}

async fn scrape(gw: &Gateway) -> String {
    reqwest::get(format!("{}/metrics", gw.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn scripted_config() -> String {
    format!(
        "[gateway]\n\n[[rate_limits]]\nname = \"lim-once\"\nby = [\"tool\"]\nper_second = 1\nburst = 1\nupstream = \"lim\"\n\n{}{}",
        stdio_upstream(
            "demo",
            &[],
            "era = \"legacy\"\ncall_timeout_ms = 300\nretry = { attempts = 1 }\nrestart = { base_ms = 10, max_ms = 20 }"
        ),
        stdio_upstream("lim", &[], "")
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn scripted_calls_show_up_in_metrics() {
    let gw = Gateway::start(&scripted_config());
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    for _ in 0..2 {
        call(&client, "demo__echo", serde_json::json!({"text": "x"}))
            .await
            .unwrap();
    }
    call(&client, "demo__fail", serde_json::json!({}))
        .await
        .unwrap();
    call(&client, "demo__nope", serde_json::json!({}))
        .await
        .refused();
    call(&client, "demo__slow", serde_json::json!({"ms": 5000}))
        .await
        .refused();
    call(&client, "demo__error", serde_json::json!({}))
        .await
        .refused();
    // The limit is on calls per tool: add passes once, then is limited (echo etc. are not).
    let rate_rule_hits = [
        call(&client, "lim__add", serde_json::json!({"a": 1, "b": 1}))
            .await
            .is_ok_and(|r| r.is_error != Some(true)),
        call(&client, "lim__add", serde_json::json!({"a": 1, "b": 1}))
            .await
            .is_ok_and(|r| r.is_error != Some(true)),
    ];
    assert_eq!(rate_rule_hits, [true, false], "{}", scrape(&gw).await);
    let changes = *seen.tool_changes.lock();
    call(&client, "demo__crash", serde_json::json!({}))
        .await
        .refused();
    wait_for(&seen.tools_changed, "restart", || {
        *seen.tool_changes.lock() >= changes + 2
    })
    .await;

    client
        .peer()
        .get_prompt(
            rmcp::model::GetPromptRequestParams::new("demo__greeting").with_arguments(
                serde_json::json!({"name": "m"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        )
        .await
        .unwrap();
    client
        .peer()
        .read_resource(rmcp::model::ReadResourceRequestParams::new("demo://readme"))
        .await
        .unwrap();

    let text = scrape(&gw).await;
    let m = series(&text);
    let calls = |tool: &str, outcome: &str| {
        value(
            &m,
            "fedgate_calls_total",
            &[
                ("tool", tool),
                ("method", "tools/call"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(calls("demo__echo", "ok"), 2.0, "{m:#?}");
    assert_eq!(
        value(&m, "fedgate_calls_total", &[("tool", "demo__crash")]),
        1.0,
        "{m:#?}"
    );
    assert_eq!(calls("demo__fail", "is_error"), 1.0);
    assert_eq!(
        calls("_unknown", "unknown_tool"),
        1.0,
        "unknown names are not labels"
    );
    assert_eq!(
        value(&m, "fedgate_calls_total", &[("upstream", "_none")]),
        1.0
    );
    assert_eq!(calls("demo__slow", "timeout"), 1.0);
    assert_eq!(calls("demo__error", "upstream_error"), 1.0);
    assert_eq!(calls("lim__add", "ok"), 1.0);
    assert_eq!(calls("lim__add", "rate_limited"), 1.0);
    assert_eq!(calls("demo__crash", "upstream_closed"), 1.0);
    assert_eq!(
        value(&m, "fedgate_rate_limited_total", &[("rule", "lim-once")]),
        1.0
    );
    // Every call to an upstream is in its latency histogram (demo: echo×2, fail, slow, error,
    // crash; lim: add×2).
    let count = |up: &str| {
        value(
            &m,
            "fedgate_call_duration_seconds_count",
            &[("upstream", up), ("method", "tools/call")],
        )
    };
    assert_eq!(count("demo"), 6.0);
    assert_eq!(count("lim"), 2.0);
    assert_eq!(
        value(
            &m,
            "fedgate_call_duration_seconds_bucket",
            &[
                ("upstream", "demo"),
                ("method", "tools/call"),
                ("le", "+Inf")
            ]
        ),
        6.0
    );
    assert_eq!(
        value(&m, "fedgate_upstream_up", &[("upstream", "demo")]),
        1.0
    );
    assert_eq!(
        value(&m, "fedgate_breaker_state", &[("upstream", "demo")]),
        0.0
    );
    assert!(
        value(
            &m,
            "fedgate_upstream_restarts_total",
            &[("upstream", "demo")]
        ) >= 1.0
    );
    assert!(
        value(
            &m,
            "fedgate_list_cache_refresh_total",
            &[("upstream", "demo")]
        ) >= 2.0
    );
    assert!(value(&m, "fedgate_sessions_active", &[]) >= 1.0);
    // Prompts and resources are labelled by name, never with an empty tool label.
    assert_eq!(
        value(
            &m,
            "fedgate_calls_total",
            &[("tool", "demo__greeting"), ("method", "prompts/get")]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        value(
            &m,
            "fedgate_calls_total",
            &[("tool", "demo://readme"), ("method", "resources/read")]
        ),
        1.0,
        "{text}"
    );
    assert!(!text.contains("tool=\"\""), "{text}");
    // Series exist from the start: an upstream that never restarted shows 0, not nothing.
    assert!(
        m.contains_key("fedgate_upstream_restarts_total{upstream=\"lim\"}"),
        "{text}"
    );
    // The process collector (whole CPU seconds, so a young process may show 0).
    assert!(m.contains_key("process_cpu_seconds_total"), "{text}");
    assert!(value(&m, "process_open_fds", &[]) > 0.0, "{text}");
    assert_eq!(
        value(
            &m,
            "fedgate_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert_eq!(value(&m, "fedgate_audit_dropped_total", &[]), 0.0);
    client.cancel().await.unwrap();
}

/// Metric names in PromQL expressions: identifiers starting with `fedgate_`.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("fedgate_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(o) => {
            for (k, x) in o {
                if (k == "expr" || k == "query") && x.is_string() {
                    out.push(x.as_str().unwrap().to_owned());
                } else {
                    exprs(x, out);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dashboards_use_only_exported_metrics() {
    // Scrape a fedgate that has seen enough traffic to have every family, flows included.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("flows")).unwrap();
    std::fs::write(
        dir.path().join("flows/one.toml"),
        "id = \"one\"\n[[nodes]]\nid = \"a\"\ntool = \"lim__echo\"\nparams = { text = \"x\" }\n",
    )
    .unwrap();
    let cfg = dir.path().join("gateway.toml");
    let config = scripted_config() + "\n[flows]\ndir = \"flows\"\n";
    std::fs::write(&cfg, config).unwrap();
    let gw = Gateway::start_file(&cfg, dir);
    let client = TestClient::new();
    let seen = client.seen.clone();
    let client = connect_legacy(&gw.url, client).await;
    call(&client, "flows__one", serde_json::json!({}))
        .await
        .unwrap();
    call(&client, "lim__add", serde_json::json!({"a": 1, "b": 1}))
        .await
        .unwrap();
    call(&client, "lim__add", serde_json::json!({"a": 1, "b": 1}))
        .await
        .refused();
    let changes = *seen.tool_changes.lock();
    call(&client, "demo__crash", serde_json::json!({}))
        .await
        .refused();
    wait_for(&seen.tools_changed, "restart", || {
        *seen.tool_changes.lock() >= changes + 2
    })
    .await;
    let text = scrape(&gw).await;
    let exported: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(exported.contains("fedgate_calls_total"), "{exported:?}");

    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/grafana/dashboards");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).expect("grafana/dashboards") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut all = Vec::new();
        exprs(&v, &mut all);
        assert!(!all.is_empty(), "{} has no queries", path.display());
        for expr in all {
            for name in metric_names(&expr) {
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|b| exported.contains(*b)))
                    .unwrap_or(&name);
                assert!(
                    exported.contains(base),
                    "{}: `{name}` in `{expr}` is not exported",
                    path.display()
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 10, "only {checked} metric references checked");
    client.cancel().await.unwrap();
}

/// With `[auth]`, `/metrics` (upstream and tool names, outcomes) answers only callers who
/// authenticate, unless `[gateway] public_metrics` opens it to scrapers.
#[tokio::test(flavor = "multi_thread")]
async fn with_auth_metrics_need_credentials_unless_public() {
    const KEY: &str = "metrics-key-test-only-0123456789";
    let config = |public: bool| {
        format!(
            "[gateway]\npublic_metrics = {public}\n\n[auth]\n[[auth.api_keys]]\nname = \"scraper\"\nsha256 = \"{}\"\nroles = [\"none\"]\n\n\
             [roles.none]\ntools = []\n\n{}",
            common::raw::sha(KEY),
            stdio_upstream("demo", &[], "")
        )
    };
    let closed = Gateway::start(&config(false));
    let anonymous = reqwest::get(format!("{}/metrics", closed.base))
        .await
        .expect("metrics");
    assert_eq!(anonymous.status().as_u16(), 401);
    let body = anonymous.text().await.expect("body");
    assert!(
        !body.contains("fedgate_"),
        "no metric without credentials: {body}"
    );
    let scraped = closed.metrics_as(KEY).await;
    assert!(
        scraped.contains("fedgate_upstream_up{upstream=\"demo\"} 1"),
        "{scraped}"
    );
    let wrong = reqwest::Client::new()
        .get(format!("{}/metrics", closed.base))
        .bearer_auth("not-a-key")
        .send()
        .await
        .expect("metrics");
    assert_eq!(wrong.status().as_u16(), 401);

    let public = Gateway::start(&config(true));
    assert!(public.metrics().await.contains("fedgate_upstream_up"));
}
