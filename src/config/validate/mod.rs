//! Raw config -> validated [`Snapshot`]: every problem is collected with its `file:line`.
//! One file per concern; each reports into the same [`Ctx`].

mod auth;
mod credentials;
mod hooks;
mod limits;
mod stages;
mod telemetry;
#[cfg(test)]
mod tests;
mod upstream_tls;
mod upstreams;
mod views;

use std::{
    collections::HashMap,
    net::SocketAddr,
    num::{NonZeroU32, NonZeroUsize},
    sync::Arc,
    time::Duration,
};

use globset::{Glob, GlobSet, GlobSetBuilder};
use toml::Spanned;

use super::{
    RawConfig,
    defaults::*,
    line_of,
    snapshot::{AdminSettings, Diagnostic, GatewaySettings, Snapshot},
};
use crate::{
    names::{self as namespace, NameRule, PrefixMode},
    policy::rate_limit::{KeyBy, RuleSpec},
    secret,
    telemetry::{
        audit::{AuditConfig, DEFAULT_AUDIT_QUEUE},
        traces::TracingConfig,
    },
};
use auth::validate_auth;
use credentials::{user_credential_settings, validate_credentials};
use limits::validate_rate_limits;
use telemetry::validate_tracing;
use upstreams::{Across, Tiers, validate_upstream};

/// How a warning reads among errors (`fedgate check` counts only the errors).
pub const WARNING: &str = "warning: ";

/// Collects diagnostics of one file.
struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
    /// Loading for a command that only reads (`flows show`, `plans list`): a secret that
    /// cannot be resolved is a warning, not an error.
    reading: bool,
}

impl Ctx<'_> {
    fn err_at(&mut self, offset: usize, message: String) {
        self.errors.push(Diagnostic {
            file: self.file.to_owned(),
            line: line_of(self.text, offset),
            message,
        });
    }
    fn warn_at(&mut self, offset: usize, message: String) {
        self.warnings.push(Diagnostic {
            file: self.file.to_owned(),
            line: line_of(self.text, offset),
            message,
        });
    }
    /// A secret reference that could not be resolved: an error, or a warning when only reading.
    fn secret_problem(&mut self, offset: usize, message: String) {
        if self.reading {
            self.warn_at(
                offset,
                format!("{message} (ignored by this command, which only reads)"),
            );
        } else {
            self.err_at(offset, message);
        }
    }
    fn line(&self, offset: usize) -> usize {
        line_of(self.text, offset)
    }
}

pub(super) fn validate(
    file: &str,
    text: &str,
    raw: RawConfig,
    reading: bool,
) -> Result<Snapshot, Vec<Diagnostic>> {
    let mut cx = Ctx {
        file,
        text,
        errors: Vec::new(),
        warnings: Vec::new(),
        reading,
    };
    let g = raw.gateway;
    let listen = match &g.listen {
        Some(l) => match l.get_ref().parse::<SocketAddr>() {
            Ok(a) => a,
            Err(_) => {
                cx.err_at(
                    l.span().start,
                    format!(
                        "listen: `{}` is not an address like 127.0.0.1:8930",
                        l.get_ref()
                    ),
                );
                fallback_listen()
            }
        },
        None => fallback_listen(),
    };
    let name_rule = g.names.as_ref().map(|n| *n.get_ref()).unwrap_or_default();
    let separator = match &g.separator {
        Some(s) => {
            let sep = s.get_ref();
            if sep.is_empty() || sep.len() > 8 || !sep.chars().all(namespace::is_name_char) {
                cx.err_at(
                    s.span().start,
                    format!(
                        "bad separator `{sep}`: use 1-8 characters of A-Z a-z 0-9 _ - . \
                         so namespaced tool names stay valid MCP tool names"
                    ),
                );
            } else if name_rule == NameRule::Portable && namespace::unportable(sep).is_some() {
                cx.err_at(
                    s.span().start,
                    format!(
                        "separator `{sep}` is not portable: names = \"portable\" (the default) \
                         exposes only A-Z a-z 0-9 _ -, which desktop clients and model APIs \
                         accept; use separator = \"__\", or set [gateway] names = \"mcp\" to \
                         keep `{sep}`"
                    ),
                );
            }
            sep.clone()
        }
        None => name_rule.default_separator().to_owned(),
    };
    let naming = namespace::Naming::new(name_rule, separator.clone());
    let default_prefix = match &g.prefix {
        Some(p) => parse_prefix(&mut cx, p),
        None => PrefixMode::Always,
    };
    let page_size = match &g.page_size {
        Some(p) => NonZeroUsize::new(*p.get_ref()).unwrap_or_else(|| {
            cx.err_at(p.span().start, "page_size must be at least 1".into());
            NonZeroUsize::MIN
        }),
        None => NonZeroUsize::new(DEFAULT_PAGE_SIZE).unwrap_or(NonZeroUsize::MIN),
    };

    let mut upstreams = Vec::new();
    // exposed alias -> (upstream, line) for config-time collision checks of `never` renames.
    let mut bare_aliases: HashMap<String, (String, usize)> = HashMap::new();
    let names: Vec<String> = raw.upstreams.keys().map(|k| k.get_ref().clone()).collect();
    let tiers_dir = std::path::Path::new(file)
        .parent()
        .unwrap_or(std::path::Path::new(""))
        .join(g.tiers_dir.as_deref().unwrap_or("trust-tiers"));
    let mut tiers = Tiers {
        dir: tiers_dir.clone(),
        loaded: HashMap::new(),
    };
    let credentials = validate_credentials(&mut cx, &raw.credentials);
    let user_credentials = user_credential_settings(&mut cx, &g, file, &credentials);
    let hooks = hooks::validate_hooks(&mut cx, &raw.guardrail_hooks);
    for (name, up) in &raw.upstreams {
        if let Some(spec) = validate_upstream(
            &mut cx,
            name,
            up,
            &naming,
            default_prefix,
            &names,
            &mut Across {
                bare_aliases: &mut bare_aliases,
                tiers: &mut tiers,
                credentials: &credentials,
                hooks: &hooks,
                envelope: g.envelope.unwrap_or_default(),
            },
        ) {
            upstreams.push(Arc::new(spec));
        }
    }
    let tls = g.tls.as_ref().and_then(|t| {
        let base = std::path::Path::new(file)
            .parent()
            .unwrap_or(std::path::Path::new(""));
        match super::tls::server_config(base, t.get_ref()) {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                cx.err_at(t.span().start, format!("[gateway.tls]: {e}"));
                None
            }
        }
    });
    let views = views::validate_views(&mut cx, &raw.views, &g, &naming);
    let role_names: Vec<String> = raw.roles.keys().cloned().collect();
    let stages = crate::config::snapshot::StageSettings {
        machines: Arc::new(stages::validate_stages(
            &mut cx,
            &raw.stages,
            &role_names,
            &naming,
        )),
        db: std::path::Path::new(file)
            .parent()
            .unwrap_or(std::path::Path::new(""))
            .join(g.stage_db.as_deref().unwrap_or("fedgate-stages.db")),
    };
    let auth = validate_auth(&mut cx, raw.auth, raw.roles, &mut tiers, &naming, &views);
    let admin = raw.admin.and_then(|a| {
        let at = a.span().start;
        let a = a.into_inner();
        let listen = match a
            .listen
            .as_deref()
            .unwrap_or(DEFAULT_ADMIN_LISTEN)
            .parse::<SocketAddr>()
        {
            Ok(l) => l,
            Err(_) => {
                cx.err_at(
                    at,
                    "[admin] listen is not an address like 127.0.0.1:8939".into(),
                );
                return None;
            }
        };
        let settings = |token, token_missing| AdminSettings {
            listen,
            token,
            token_missing,
            console: a.console.unwrap_or(true),
            approve_plans: a.approve_plans.unwrap_or(true),
            max_connections: a
                .max_connections
                .unwrap_or(DEFAULT_ADMIN_MAX_CONNECTIONS)
                .max(1),
        };
        match secret::resolve(&a.token) {
            Ok(token) if !token.expose().is_empty() => Some(settings(token, None)),
            // A reading command still knows where the admin API is, and why it cannot use it.
            Err(e) if cx.reading => {
                cx.secret_problem(at, format!("[admin] token: {e}"));
                Some(settings(
                    secret::Secret::new(String::new()),
                    Some(e.to_string()),
                ))
            }
            Ok(_) => {
                cx.err_at(at, "[admin] token is empty".into());
                None
            }
            Err(e) => {
                cx.err_at(at, format!("[admin] token: {e}"));
                None
            }
        }
    });
    let state_key = g
        .state_key
        .as_ref()
        .and_then(|k| match secret::resolve(k.get_ref()) {
            Ok(s) if s.expose().len() >= rmcp::model::RequestStateCodec::MIN_KEY_LENGTH => Some(s),
            Ok(_) => {
                cx.err_at(
                    k.span().start,
                    format!(
                        "[gateway] state_key must be at least {} bytes",
                        rmcp::model::RequestStateCodec::MIN_KEY_LENGTH
                    ),
                );
                None
            }
            Err(e) => {
                cx.secret_problem(k.span().start, format!("[gateway] state_key: {e}"));
                None
            }
        });
    let tracing = match raw.tracing {
        Some(t) => validate_tracing(&mut cx, t),
        None => TracingConfig::from_env(),
    };
    let mut rate_limits = validate_rate_limits(&mut cx, &raw.rate_limits, &names);
    for up in &upstreams {
        if let Some((per_second, burst)) = up.tier.rate_limit
            && let (Some(per_second), Some(burst)) =
                (NonZeroU32::new(per_second), NonZeroU32::new(burst))
        {
            rate_limits.push(RuleSpec {
                name: format!("tier `{}` of upstream `{}`", up.tier.name, up.name),
                by: KeyBy {
                    upstream: true,
                    ..KeyBy::default()
                },
                upstream: Some(up.name.clone()),
                per_second,
                burst,
            });
        }
    }
    for up in &upstreams {
        let named = up
            .tools
            .iter()
            .filter_map(|(tool, t)| Some((format!("tool `{tool}`"), t.approvers.as_ref()?)))
            .chain(std::iter::once((
                format!("tier `{}`", up.tier.name),
                &up.tier.approvers,
            )));
        for (what, approvers) in named {
            for role in approvers.iter().filter(|r| !auth.roles.0.contains_key(*r)) {
                cx.errors.push(Diagnostic {
                    file: file.to_owned(),
                    line: 0,
                    message: format!(
                        "upstream `{}`, {what}: approver role `{role}` is not defined under [roles]",
                        up.name
                    ),
                });
            }
        }
    }
    let resource_default = g.resource_default.as_ref().and_then(|r| {
        if names.iter().any(|n| n == r.get_ref()) {
            Some(r.get_ref().clone())
        } else {
            let hint = crate::names::did_you_mean(r.get_ref(), names.iter().map(String::as_str));
            cx.err_at(
                r.span().start,
                format!(
                    "[gateway] resource_default `{}` is not a configured upstream{hint}",
                    crate::names::shown(r.get_ref())
                ),
            );
            None
        }
    });
    if let Some(id) = &g.id
        && !crate::config::flows::is_identifier(id.get_ref())
    {
        cx.err_at(
            id.span().start,
            format!(
                "[gateway] id `{}`: use letters, digits, `_` and `-` (it travels in federated request paths)",
                crate::names::shown(id.get_ref())
            ),
        );
    }
    let cluster = match raw.cluster {
        None => Default::default(),
        Some(c) => {
            let at = c.span().start;
            crate::config::cluster::validate(c.into_inner()).unwrap_or_else(|errors| {
                for e in errors {
                    cx.err_at(at, e);
                }
                Default::default()
            })
        }
    };
    if !cx.errors.is_empty() {
        // What would have been warnings still helps while fixing the errors.
        let mut all = cx.errors;
        all.extend(cx.warnings.into_iter().map(|mut w| {
            w.message = format!("{WARNING}{}", w.message);
            w
        }));
        return Err(all);
    }
    let mut flows = flow_settings(file, raw.flows.unwrap_or_default(), &names, &naming);
    let mut stages = stages;
    let mut machines = (*stages.machines).clone();
    stages::flow_stages(&mut flows.set, &mut machines, &naming);
    stages.machines = Arc::new(machines);
    let gateway_id = match &g.id {
        Some(id) => id.get_ref().clone(),
        None => format!("fedgate-{:08x}", rand::random::<u32>()),
    };
    let mut warnings = cx.warnings;
    warnings.extend(flows.set.warnings.iter().cloned());
    Ok(Snapshot {
        views: Arc::new(views),
        stages,
        user_credentials,
        warnings,
        flows,
        cluster,
        tracing,
        tiers_dir,
        auth: Arc::new(auth),
        rate_limits,
        admin,
        audit: raw.audit.map(|a| AuditConfig {
            path: std::path::Path::new(file)
                .parent()
                .unwrap_or(std::path::Path::new(""))
                .join(a.path),
            full_arguments: a.full_arguments,
            queue: a.queue.unwrap_or(DEFAULT_AUDIT_QUEUE),
        }),
        gateway: GatewaySettings {
            listen,
            separator,
            names: name_rule,
            page_size,
            allowed_origins: g.allowed_origins,
            allowed_hosts: g.allowed_hosts,
            max_body_bytes: g.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES),
            idempotency_ttl: Duration::from_millis(
                g.idempotency_ttl_ms.unwrap_or(DEFAULT_IDEMPOTENCY_TTL_MS),
            ),
            idempotency_max_bytes: g
                .idempotency_max_bytes
                .unwrap_or(DEFAULT_IDEMPOTENCY_MAX_BYTES),
            tls,
            watch_config: g.watch_config.unwrap_or(true),
            state_key,
            cursor_ttl: Duration::from_millis(g.cursor_ttl_ms.unwrap_or(DEFAULT_CURSOR_TTL_MS)),
            session_ttl: Duration::from_millis(g.session_ttl_ms.unwrap_or(DEFAULT_SESSION_TTL_MS)),
            input_wait: Duration::from_millis(g.input_wait_ms.unwrap_or(DEFAULT_INPUT_WAIT_MS)),
            max_parked_calls: g.max_parked_calls.unwrap_or(DEFAULT_MAX_PARKED_CALLS),
            envelope: g.envelope.unwrap_or_default(),
            plan_ttl: Duration::from_millis(g.plan_ttl_ms.unwrap_or(DEFAULT_PLAN_TTL_MS)),
            max_pending_plans: g
                .max_pending_plans
                .unwrap_or(DEFAULT_MAX_PENDING_PLANS)
                .max(1),
            header_read_timeout: Duration::from_millis(
                g.header_read_timeout_ms
                    .unwrap_or(DEFAULT_HEADER_READ_TIMEOUT_MS)
                    .max(1),
            ),
            body_read_timeout: Duration::from_millis(
                g.body_read_timeout_ms
                    .unwrap_or(DEFAULT_BODY_READ_TIMEOUT_MS)
                    .max(1),
            ),
            tls_handshake_timeout: Duration::from_millis(
                g.tls_handshake_timeout_ms
                    .unwrap_or(DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS)
                    .max(1),
            ),
            max_connections: g.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS).max(1),
            public_metrics: g.public_metrics.unwrap_or(false),
            max_sessions: g.max_sessions.unwrap_or(DEFAULT_MAX_SESSIONS).max(1),
            resource_default,
            sse_retry: match g.sse_retry_ms.unwrap_or(DEFAULT_SSE_RETRY_MS) {
                0 => None,
                ms => Some(Duration::from_millis(ms)),
            },
            stream_after: Duration::from_millis(
                g.stream_after_ms.unwrap_or(DEFAULT_STREAM_AFTER_MS),
            ),
            session_idle: Duration::from_millis(
                g.session_idle_ms.unwrap_or(DEFAULT_SESSION_IDLE_MS).max(1),
            ),
            replay: crate::config::ReplayLimits {
                events: g.replay_events.unwrap_or(DEFAULT_REPLAY_EVENTS).max(1),
                bytes: g.replay_bytes.unwrap_or(DEFAULT_REPLAY_BYTES).max(1),
                ttl: Duration::from_millis(g.replay_ms.unwrap_or(DEFAULT_REPLAY_MS).max(1)),
            },
            shutdown_grace: Duration::from_millis(
                g.shutdown_grace_ms.unwrap_or(DEFAULT_SHUTDOWN_GRACE_MS),
            ),
            id: gateway_id,
            max_hops: g
                .max_hops
                .unwrap_or(crate::federation::hops::DEFAULT_MAX_HOPS)
                .max(1),
        },
        upstreams,
    })
}

fn fallback_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8930))
}

fn parse_prefix(cx: &mut Ctx<'_>, p: &Spanned<String>) -> PrefixMode {
    match p.get_ref().as_str() {
        "always" => PrefixMode::Always,
        "never" => PrefixMode::Never,
        other => {
            cx.err_at(
                p.span().start,
                format!("prefix: `{other}` is not one of `always`, `never`"),
            );
            PrefixMode::Always
        }
    }
}

fn build_globs(cx: &mut Ctx<'_>, globs: &[Spanned<String>]) -> GlobSet {
    let mut b = GlobSetBuilder::new();
    for g in globs {
        match Glob::new(g.get_ref()) {
            Ok(glob) => {
                b.add(glob);
            }
            Err(e) => cx.err_at(g.span().start, format!("bad glob `{}`: {e}", g.get_ref())),
        }
    }
    b.build().unwrap_or_else(|_| GlobSet::empty())
}

/// `[flows]`: paths relative to the config file, and the flow files loaded (their problems
/// are kept, not returned: a bad flow never fails the config).
fn flow_settings(
    file: &str,
    raw: crate::config::flows::RawFlows,
    upstreams: &[String],
    naming: &namespace::Naming,
) -> crate::config::snapshot::FlowSettings {
    use crate::config::flows;
    let base = std::path::Path::new(file)
        .parent()
        .unwrap_or(std::path::Path::new(""));
    let dir = raw.dir.map(|d| base.join(d));
    let set = match &dir {
        Some(d) => flows::load_dir(d, upstreams, naming),
        None => flows::FlowSet::default(),
    };
    crate::config::snapshot::FlowSettings {
        db: base.join(raw.db.as_deref().unwrap_or("fedgate-flows.db")),
        dir,
        parallelism: raw.parallelism.unwrap_or(flows::DEFAULT_PARALLELISM).max(1),
        upstream_parallelism: raw
            .upstream_parallelism
            .unwrap_or(flows::DEFAULT_UPSTREAM_PARALLELISM)
            .max(1),
        artifact_bytes: raw.artifact_bytes.unwrap_or(flows::DEFAULT_ARTIFACT_BYTES),
        set,
    }
}
