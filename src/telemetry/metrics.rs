//! Prometheus metrics (F14): one registry owned by the gateway, served at `/metrics`. Label
//! values are bounded: upstream names come from config, tool names only when the catalog knows
//! them (`_unknown` otherwise), outcomes and methods are fixed sets.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Latency buckets (seconds): sub-millisecond to a minute.
pub(crate) const DURATION_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Every metric fedgate exports.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    pub calls: IntCounterVec,
    pub call_duration: HistogramVec,
    pub upstream_up: IntGaugeVec,
    pub upstream_restarts: IntCounterVec,
    pub breaker_state: IntGaugeVec,
    pub tool_breaker_state: IntGaugeVec,
    pub rate_limited: IntCounterVec,
    pub sessions_active: IntGauge,
    pub list_cache_refresh: IntCounterVec,
    pub audit_dropped: IntCounter,
    pub config_reloads: IntCounterVec,
    pub parked_calls: IntGauge,
    pub config_last_reload_success: IntGauge,
    pub envelopes: IntCounterVec,
    pub approvals: IntCounterVec,
    pub plans_pending: IntGauge,
    pub connections_refused: IntCounterVec,
    /// Secrets found by the guardrails, by detector, action and direction.
    pub guard_detections: IntCounterVec,
    /// Guardrail hook answers by hook, phase and decision (`error` when none came).
    pub guard_hook_decisions: IntCounterVec,
    pub guard_hook_duration: HistogramVec,
    pub replay_dropped: IntCounterVec,
    pub flows: super::flow_metrics::FlowMetrics,
    pub cluster: super::cluster_metrics::ClusterMetrics,
    pub search: super::search_metrics::SearchMetrics,
    pub stages: super::stage_metrics::StageMetrics,
    pub credentials: super::credential_metrics::CredentialMetrics,
}

impl Metrics {
    pub fn new() -> Result<Self, super::TelemetryError> {
        Self::build().map_err(|e| super::TelemetryError::Metrics(e.to_string()))
    }

    fn build() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let calls = IntCounterVec::new(
            Opts::new(
                "fedgate_calls_total",
                "Routed MCP requests by upstream, tool, method and outcome",
            ),
            &["upstream", "tool", "method", "outcome"],
        )?;
        let call_duration = HistogramVec::new(
            HistogramOpts::new(
                "fedgate_call_duration_seconds",
                "Duration of routed MCP requests",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["upstream", "method"],
        )?;
        let upstream_up = IntGaugeVec::new(
            Opts::new(
                "fedgate_upstream_up",
                "1 while the upstream is connected and serving",
            ),
            &["upstream"],
        )?;
        let upstream_restarts = IntCounterVec::new(
            Opts::new(
                "fedgate_upstream_restarts_total",
                "Reconnects and process restarts of an upstream",
            ),
            &["upstream"],
        )?;
        let breaker_state = IntGaugeVec::new(
            Opts::new(
                "fedgate_breaker_state",
                "Circuit breaker: 0 closed, 1 half-open, 2 open",
            ),
            &["upstream"],
        )?;
        let tool_breaker_state = IntGaugeVec::new(
            Opts::new(
                "fedgate_tool_breaker_state",
                "Circuit breaker of one tool (for tools that have had failures): 0 closed, 1 half-open, 2 open",
            ),
            &["upstream", "tool"],
        )?;
        let rate_limited = IntCounterVec::new(
            Opts::new(
                "fedgate_rate_limited_total",
                "Calls refused by a rate limit",
            ),
            &["rule"],
        )?;
        let sessions_active = IntGauge::new("fedgate_sessions_active", "Open downstream sessions")?;
        let list_cache_refresh = IntCounterVec::new(
            Opts::new(
                "fedgate_list_cache_refresh_total",
                "Refreshes of an upstream's cached lists",
            ),
            &["upstream"],
        )?;
        let audit_dropped = IntCounter::new(
            "fedgate_audit_dropped_total",
            "Audit records dropped (queue full or write failed)",
        )?;
        registry.register(Box::new(calls.clone()))?;
        registry.register(Box::new(call_duration.clone()))?;
        registry.register(Box::new(upstream_up.clone()))?;
        registry.register(Box::new(upstream_restarts.clone()))?;
        registry.register(Box::new(breaker_state.clone()))?;
        registry.register(Box::new(tool_breaker_state.clone()))?;
        registry.register(Box::new(rate_limited.clone()))?;
        registry.register(Box::new(sessions_active.clone()))?;
        registry.register(Box::new(list_cache_refresh.clone()))?;
        let config_reloads = IntCounterVec::new(
            Opts::new(
                "fedgate_config_reloads_total",
                "Configuration reloads by result (ok, error: the old config stays in force)",
            ),
            &["result"],
        )?;
        let config_last_reload_success = IntGauge::new(
            "fedgate_config_last_reload_success_timestamp_seconds",
            "Unix time of the last configuration load that took effect",
        )?;
        // Both results exist from the start, so `rate()` and alerts see a zero, not nothing.
        config_reloads.with_label_values(&["ok"]);
        config_reloads.with_label_values(&["error"]);
        config_last_reload_success.set(chrono::Utc::now().timestamp());
        registry.register(Box::new(audit_dropped.clone()))?;
        let parked_calls = IntGauge::new(
            "fedgate_parked_calls",
            "Calls of handshake-era upstreams waiting for a stateless-era client's input (MRTR)",
        )?;
        registry.register(Box::new(parked_calls.clone()))?;
        registry.register(Box::new(config_reloads.clone()))?;
        registry.register(Box::new(config_last_reload_success.clone()))?;
        let build_info = IntGaugeVec::new(
            Opts::new(
                "fedgate_build_info",
                "1, labelled with the running fedgate version",
            ),
            &["version"],
        )?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        registry.register(Box::new(build_info))?;
        let envelopes = IntCounterVec::new(
            Opts::new(
                "fedgate_envelopes_total",
                "Plan envelopes returned, by status and code (the gateway outcome, or ok)",
            ),
            &["status", "code"],
        )?;
        let approvals = IntCounterVec::new(
            Opts::new(
                "fedgate_approvals_total",
                "Plans decided: approved, denied, expired, invalidated",
            ),
            &["outcome"],
        )?;
        for outcome in ["approved", "denied", "expired", "invalidated"] {
            approvals.with_label_values(&[outcome]);
        }
        let plans_pending = IntGauge::new("fedgate_plans_pending", "Plans waiting for approval")?;
        let connections_refused = IntCounterVec::new(
            Opts::new(
                "fedgate_connections_refused_total",
                "Client connections answered 503 and closed at once because the listener's \
                 max_connections were open: by listener (mcp, admin)",
            ),
            &["listener"],
        )?;
        for listener in ["mcp", "admin"] {
            connections_refused.with_label_values(&[listener]);
        }
        let guard_detections = IntCounterVec::new(
            Opts::new(
                "fedgate_guardrail_detections_total",
                "Secrets found in arguments or results, by detector, the action taken and the \
                 direction",
            ),
            &["detector", "action", "direction"],
        )?;
        registry.register(Box::new(guard_detections.clone()))?;
        let guard_hook_decisions = IntCounterVec::new(
            Opts::new(
                "fedgate_guardrail_hook_decisions_total",
                "Answers of external guardrail hooks: pass, mutate, deny, or error (none usable)",
            ),
            &["hook", "phase", "decision"],
        )?;
        registry.register(Box::new(guard_hook_decisions.clone()))?;
        let guard_hook_duration = HistogramVec::new(
            HistogramOpts::new(
                "fedgate_guardrail_hook_duration_seconds",
                "Time an external guardrail hook took to answer (or to fail)",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["hook", "phase"],
        )?;
        registry.register(Box::new(guard_hook_duration.clone()))?;
        registry.register(Box::new(connections_refused.clone()))?;
        let replay_dropped = IntCounterVec::new(
            Opts::new(
                "fedgate_replay_events_dropped_total",
                "SSE events dropped from the resumption buffer before their stream ended: by \
                 count, bytes or age of the stream's buffer, or the total bound",
            ),
            &["reason"],
        )?;
        for reason in ["count", "bytes", "age", "total"] {
            replay_dropped.with_label_values(&[reason]);
        }
        registry.register(Box::new(replay_dropped.clone()))?;
        let flows = super::flow_metrics::FlowMetrics::register(&registry, DURATION_BUCKETS)?;
        let cluster =
            super::cluster_metrics::ClusterMetrics::register(&registry, DURATION_BUCKETS)?;
        let search = super::search_metrics::SearchMetrics::register(&registry)?;
        let stages = super::stage_metrics::StageMetrics::register(&registry)?;
        let credentials = super::credential_metrics::CredentialMetrics::register(&registry)?;
        registry.register(Box::new(envelopes.clone()))?;
        registry.register(Box::new(approvals.clone()))?;
        registry.register(Box::new(plans_pending.clone()))?;
        // CPU, memory, open files and start time of the gateway process (`process_*`).
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(Self {
            registry,
            calls,
            call_duration,
            upstream_up,
            upstream_restarts,
            breaker_state,
            tool_breaker_state,
            rate_limited,
            sessions_active,
            list_cache_refresh,
            audit_dropped,
            config_reloads,
            config_last_reload_success,
            parked_calls,
            envelopes,
            approvals,
            plans_pending,
            connections_refused,
            guard_detections,
            guard_hook_decisions,
            guard_hook_duration,
            replay_dropped,
            search,
            stages,
            credentials,
            flows,
            cluster,
        })
    }

    /// Creates an upstream's series at zero, so `rate()` and alerts see a zero before the first
    /// restart or refresh, not nothing.
    pub fn know_upstream(&self, upstream: &str) {
        self.upstream_restarts.with_label_values(&[upstream]);
        self.list_cache_refresh.with_label_values(&[upstream]);
    }

    /// Drops the per-upstream gauges of an upstream a reload removed (counters stay: they are
    /// history).
    pub fn forget_upstream(&self, upstream: &str, breaker_tools: &[String]) {
        let _ = self.upstream_up.remove_label_values(&[upstream]);
        let _ = self.breaker_state.remove_label_values(&[upstream]);
        for tool in breaker_tools {
            let _ = self
                .tool_breaker_state
                .remove_label_values(&[upstream, tool.as_str()]);
        }
    }

    /// An upstream restarted after a crash or a failed start.
    pub fn upstream_restarted(&self, upstream: &str) {
        self.upstream_restarts.with_label_values(&[upstream]).inc();
    }

    /// An upstream's lists were fetched again.
    pub fn lists_refreshed(&self, upstream: &str) {
        self.list_cache_refresh.with_label_values(&[upstream]).inc();
    }

    /// An upstream's connection state and its breaker's (`closed`, `half_open`, `open`).
    pub fn upstream_state(&self, upstream: &str, up: bool, breaker: &str) {
        self.upstream_up
            .with_label_values(&[upstream])
            .set(i64::from(up));
        self.breaker_state
            .with_label_values(&[upstream])
            .set(breaker_gauge(breaker));
    }

    /// A tool breaker's state (`closed`, `half_open`, `open`).
    pub fn tool_breaker(&self, upstream: &str, tool: &str, state: &str) {
        self.tool_breaker_state
            .with_label_values(&[upstream, tool])
            .set(breaker_gauge(state));
    }

    /// The counter of connections `listener` (`mcp`, `admin`) refused past its cap.
    pub fn refused_on(&self, listener: &'static str) -> prometheus::IntCounter {
        self.connections_refused.with_label_values(&[listener])
    }

    /// A call refused by rate-limit rule `rule`.
    pub fn rate_limited_by(&self, rule: &str) {
        self.rate_limited.with_label_values(&[rule]).inc();
    }

    /// `n` plans ended so (`approved`, `denied`, `expired`, `invalidated`).
    pub fn plans_ended(&self, outcome: &str, n: u64) {
        self.approvals.with_label_values(&[outcome]).inc_by(n);
    }

    /// A plan envelope written, by its status and error code (`ok` / `tool_error` for results).
    pub fn envelope(&self, status: &str, code: &str) {
        self.envelopes.with_label_values(&[status, code]).inc();
    }

    /// Records the result of a reload.
    pub fn reloaded(&self, ok: bool) {
        self.config_reloads
            .with_label_values(&[if ok { "ok" } else { "error" }])
            .inc();
        if ok {
            self.config_last_reload_success
                .set(chrono::Utc::now().timestamp());
        }
    }

    /// Counts one secret found (label values are fixed names, never the secret).
    pub fn guard_detection(&self, detector: &str, action: &str, direction: &str, n: u64) {
        self.guard_detections
            .with_label_values(&[detector, action, direction])
            .inc_by(n);
    }

    /// Records one guardrail hook's answer (hook names come from config).
    pub fn guard_hook(&self, hook: &str, phase: &str, decision: &str, seconds: f64) {
        self.guard_hook_decisions
            .with_label_values(&[hook, phase, decision])
            .inc();
        self.guard_hook_duration
            .with_label_values(&[hook, phase])
            .observe(seconds);
    }

    /// Records one routed call.
    pub fn call(&self, upstream: &str, tool: &str, method: &str, outcome: &str, seconds: f64) {
        self.calls
            .with_label_values(&[upstream, tool, method, outcome])
            .inc();
        let h: Histogram = self.call_duration.with_label_values(&[upstream, method]);
        h.observe(seconds);
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::warn!("metrics encoding failed: {e}");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// The gauge value of a breaker state: 2 open, 1 half open, 0 closed.
fn breaker_gauge(state: &str) -> i64 {
    match state {
        "open" => 2,
        "half_open" => 1,
        _ => 0,
    }
}
