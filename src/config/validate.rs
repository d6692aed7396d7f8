//! Raw config -> validated [`Snapshot`]: every problem is collected with its `file:line`.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt,
    net::SocketAddr,
    num::{NonZeroU32, NonZeroUsize},
    sync::Arc,
    time::Duration,
};

use globset::{Glob, GlobSet, GlobSetBuilder};
use http::HeaderName;
use toml::Spanned;

use jsonwebtoken::{Algorithm, DecodingKey};

use super::{
    RawAuth, RawBreaker, RawConfig, RawCredential, RawLaunch, RawRateLimit, RawRole, RawUpstream,
    defaults::*,
    line_of, secret,
    tier::{self, Tier},
};
use crate::policy::{
    authz::{Role, Roles},
    breaker::BreakerConfig,
    identity::{ApiKey, Authenticator, JwtConfig, ResourceMetadata, load_jwks},
    rate_limit::{KeyBy, RuleSpec},
    retry::RetryPolicy,
    token::{Credential, OAuth, Placement, Source},
};
use crate::router::namespace;
use crate::telemetry::audit::{AuditConfig, DEFAULT_AUDIT_QUEUE};

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    /// 1-based; 0 when the problem has no position (e.g. the file cannot be read).
    pub line: usize,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

/// The validated configuration every component reads; immutable once built.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub gateway: GatewaySettings,
    /// In file order (sorted by name, as TOML tables have no order we can rely on).
    pub upstreams: Vec<Arc<UpstreamSpec>>,
    /// How callers are authenticated and what their roles allow.
    pub auth: Arc<Authenticator>,
    /// Configured limits followed by one per upstream whose tier sets `[rate_limit]`.
    pub rate_limits: Vec<RuleSpec>,
    pub audit: Option<AuditConfig>,
    pub admin: Option<AdminSettings>,
    /// Traces: from `[tracing]`, else from the OTEL_* environment, else off.
    pub tracing: Option<crate::telemetry::traces::TracingConfig>,
    /// The trust tier folder (watched for changes, like the config file).
    pub tiers_dir: std::path::PathBuf,
}

/// The admin API's listener and token.
#[derive(Debug, Clone)]
pub struct AdminSettings {
    pub listen: SocketAddr,
    pub token: secret::Secret,
}

/// `[gateway]` after validation.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    pub listen: SocketAddr,
    pub separator: String,
    pub page_size: NonZeroUsize,
    pub allowed_origins: Vec<String>,
    pub allowed_hosts: Vec<String>,
    pub max_body_bytes: usize,
    pub idempotency_ttl: Duration,
    /// HTTPS (with client verification when a client CA is configured).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub shutdown_grace: Duration,
    pub watch_config: bool,
    /// Signs cursors and `requestState`; `None` = a random key per process.
    pub state_key: Option<secret::Secret>,
    pub cursor_ttl: Duration,
    pub session_ttl: Duration,
    pub input_wait: Duration,
    pub max_parked_calls: usize,
}

/// How an upstream's names are exposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixMode {
    /// `upstream<sep>name`
    Always,
    /// The upstream's own name, allowed only while unique.
    Never,
}

/// Which lifecycle fedgate uses towards an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// Probe `server/discover`; fall back to `initialize`.
    Auto,
    /// `initialize` handshake (2025-06-18 / 2025-11-25).
    Legacy,
    /// Stateless 2026-07-28.
    Modern,
}

/// Crash restarts: `min(max, base * 2^n)` plus jitter, at most `max_restarts` in a row.
#[derive(Debug, Clone, Copy)]
pub struct RestartPolicy {
    pub max_restarts: u32,
    pub base: Duration,
    pub max: Duration,
}

/// A process fedgate runs: a stdio upstream, or the server behind an http/sse upstream.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
}

/// How fedgate reaches an upstream.
#[derive(Debug, Clone)]
pub enum TransportSpec {
    Stdio(ProcessSpec),
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        launch: Option<ProcessSpec>,
    },
    Sse {
        url: String,
        headers: BTreeMap<String, String>,
        launch: Option<ProcessSpec>,
    },
}

impl TransportSpec {
    pub fn kind(&self) -> &'static str {
        match self {
            TransportSpec::Stdio(_) => "stdio",
            TransportSpec::Http { .. } => "http",
            TransportSpec::Sse { .. } => "sse",
        }
    }
}

/// One upstream after validation.
#[derive(Debug, Clone)]
pub struct UpstreamSpec {
    pub name: String,
    pub transport: TransportSpec,
    pub prefix: PrefixMode,
    pub era: Era,
    pub allow: Option<GlobSet>,
    pub deny: GlobSet,
    pub rename: BTreeMap<String, String>,
    pub descriptions: BTreeMap<String, String>,
    pub startup_timeout: Duration,
    pub call_timeout: Duration,
    pub restart: RestartPolicy,
    pub tier: Arc<Tier>,
    pub writable: BTreeSet<String>,
    pub read_only: BTreeSet<String>,
    pub long_running: BTreeSet<String>,
    pub pins: BTreeMap<String, String>,
    pub breaker: BreakerConfig,
    pub retry: RetryPolicy,
    pub credential: Option<Injection>,
}

/// A credential and where it goes.
#[derive(Debug, Clone)]
pub struct Injection {
    pub credential: Arc<Credential>,
    pub placement: Placement,
    /// stdio: the environment variable set at spawn.
    pub env_var: Option<String>,
}

impl UpstreamSpec {
    /// Whether an upstream tool name passes the allow/deny globs.
    pub fn exposes(&self, tool: &str) -> bool {
        self.allow.as_ref().is_none_or(|a| a.is_match(tool)) && !self.deny.is_match(tool)
    }
}

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<Diagnostic>,
}

impl Ctx<'_> {
    fn err_at(&mut self, offset: usize, message: String) {
        self.errors.push(Diagnostic {
            file: self.file.to_owned(),
            line: line_of(self.text, offset),
            message,
        });
    }
    fn line(&self, offset: usize) -> usize {
        line_of(self.text, offset)
    }
}

pub(super) fn validate(
    file: &str,
    text: &str,
    raw: RawConfig,
) -> Result<Snapshot, Vec<Diagnostic>> {
    let mut cx = Ctx {
        file,
        text,
        errors: Vec::new(),
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
            }
            sep.clone()
        }
        None => DEFAULT_SEPARATOR.to_owned(),
    };
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
    for (name, up) in &raw.upstreams {
        if let Some(spec) = validate_upstream(
            &mut cx,
            name,
            up,
            &separator,
            default_prefix,
            &names,
            &mut Across {
                bare_aliases: &mut bare_aliases,
                tiers: &mut tiers,
                credentials: &credentials,
            },
        ) {
            upstreams.push(Arc::new(spec));
        }
    }
    let tls = g.tls.as_ref().and_then(|t| {
        let base = std::path::Path::new(file)
            .parent()
            .unwrap_or(std::path::Path::new(""));
        match crate::server::tls::server_config(base, t.get_ref()) {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                cx.err_at(t.span().start, format!("[gateway.tls]: {e}"));
                None
            }
        }
    });
    let auth = validate_auth(&mut cx, raw.auth, raw.roles, &mut tiers);
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
        match secret::resolve(&a.token) {
            Ok(token) if !token.expose().is_empty() => Some(AdminSettings { listen, token }),
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
                cx.err_at(k.span().start, format!("[gateway] state_key: {e}"));
                None
            }
        });
    let tracing = match raw.tracing {
        Some(t) => validate_tracing(&mut cx, t),
        None => crate::telemetry::traces::TracingConfig::from_env(),
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
    if !cx.errors.is_empty() {
        return Err(cx.errors);
    }
    Ok(Snapshot {
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
            page_size,
            allowed_origins: g.allowed_origins,
            allowed_hosts: g.allowed_hosts,
            max_body_bytes: g.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES),
            idempotency_ttl: Duration::from_millis(
                g.idempotency_ttl_ms.unwrap_or(DEFAULT_IDEMPOTENCY_TTL_MS),
            ),
            tls,
            watch_config: g.watch_config.unwrap_or(true),
            state_key,
            cursor_ttl: Duration::from_millis(g.cursor_ttl_ms.unwrap_or(DEFAULT_CURSOR_TTL_MS)),
            session_ttl: Duration::from_millis(g.session_ttl_ms.unwrap_or(DEFAULT_SESSION_TTL_MS)),
            input_wait: Duration::from_millis(g.input_wait_ms.unwrap_or(DEFAULT_INPUT_WAIT_MS)),
            max_parked_calls: g.max_parked_calls.unwrap_or(DEFAULT_MAX_PARKED_CALLS),
            shutdown_grace: Duration::from_millis(
                g.shutdown_grace_ms.unwrap_or(DEFAULT_SHUTDOWN_GRACE_MS),
            ),
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

fn validate_upstream(
    cx: &mut Ctx<'_>,
    name: &Spanned<String>,
    up: &Spanned<RawUpstream>,
    separator: &str,
    default_prefix: PrefixMode,
    all_names: &[String],
    across: &mut Across<'_>,
) -> Option<UpstreamSpec> {
    let Across {
        bare_aliases,
        tiers,
        credentials,
    } = across;
    let errors_before = cx.errors.len();
    let at = name.span().start;
    let name_s = name.get_ref().clone();
    let u = up.get_ref();
    if name_s.is_empty() || !name_s.chars().all(namespace::is_name_char) {
        cx.err_at(
            at,
            format!("invalid upstream name `{name_s}`: use A-Z a-z 0-9 _ - ."),
        );
    } else if !separator.is_empty() && name_s.contains(separator) {
        cx.err_at(
            at,
            format!(
                "invalid upstream name `{name_s}`: it contains the separator `{separator}`, \
                 so `{name_s}{separator}tool` would not split one way"
            ),
        );
    }
    let kind = u.kind.get_ref().as_str();
    let kind_at = u.kind.span().start;
    let launch = u.launch.clone().map(process_from_launch);
    let transport = match kind {
        "stdio" => {
            if let Some(url) = &u.url {
                cx.err_at(
                    url.span().start,
                    format!("upstream `{name_s}`: `url` does not apply to kind stdio"),
                );
            }
            if u.launch.is_some() || !u.headers.is_empty() {
                cx.err_at(
                    kind_at,
                    format!(
                        "upstream `{name_s}`: `launch` and `headers` do not apply to kind stdio"
                    ),
                );
            }
            match &u.command {
                Some(c) if !c.get_ref().trim().is_empty() => {
                    Some(TransportSpec::Stdio(ProcessSpec {
                        command: c.get_ref().clone(),
                        args: u.args.clone(),
                        env: u.env.clone(),
                        cwd: u.cwd.clone(),
                    }))
                }
                _ => {
                    cx.err_at(
                        kind_at,
                        format!("upstream `{name_s}`: kind stdio needs `command`"),
                    );
                    None
                }
            }
        }
        "http" | "sse" => {
            if let Some(c) = &u.command {
                cx.err_at(
                    c.span().start,
                    format!("upstream `{name_s}`: `command` does not apply to kind {kind}; use `launch` to have fedgate start the server"),
                );
            }
            if !u.args.is_empty() || !u.env.is_empty() || u.cwd.is_some() {
                cx.err_at(
                    kind_at,
                    format!(
                        "upstream `{name_s}`: `args`, `env` and `cwd` do not apply to kind {kind}"
                    ),
                );
            }
            match &u.url {
                Some(url) => {
                    let s = url.get_ref();
                    if !(s.starts_with("http://") || s.starts_with("https://"))
                        || s.parse::<http::Uri>().is_err()
                    {
                        cx.err_at(
                            url.span().start,
                            format!("upstream `{name_s}`: `{s}` is not an http(s) URL"),
                        );
                    }
                    let (url, headers) = (s.clone(), u.headers.clone());
                    Some(if kind == "http" {
                        TransportSpec::Http {
                            url,
                            headers,
                            launch,
                        }
                    } else {
                        TransportSpec::Sse {
                            url,
                            headers,
                            launch,
                        }
                    })
                }
                None => {
                    cx.err_at(
                        kind_at,
                        format!("upstream `{name_s}`: kind {kind} needs `url`"),
                    );
                    None
                }
            }
        }
        other => {
            cx.err_at(
                kind_at,
                format!("upstream `{name_s}`: kind `{other}` is not one of stdio, http, sse"),
            );
            None
        }
    };
    let prefix = u
        .prefix
        .as_ref()
        .map(|p| parse_prefix(cx, p))
        .unwrap_or(default_prefix);
    let era = match &u.era {
        None => Era::Auto,
        Some(e) => match e.get_ref().as_str() {
            "auto" => Era::Auto,
            "legacy" => Era::Legacy,
            "modern" => Era::Modern,
            other => {
                cx.err_at(
                    e.span().start,
                    format!("era: `{other}` is not one of auto, legacy, modern"),
                );
                Era::Auto
            }
        },
    };
    let allow = u.allow.as_ref().map(|globs| build_globs(cx, globs));
    let deny = build_globs(cx, &u.deny);

    // Renames: aliases must be valid names, unique within the upstream, and (in `never` mode)
    // unique across upstreams and outside any other upstream's namespace.
    let mut rename = BTreeMap::new();
    let mut seen: HashMap<&str, (&str, usize)> = HashMap::new();
    for (orig, alias) in &u.rename {
        let a = alias.get_ref();
        let line = cx.line(alias.span().start);
        if let Some((other, other_line)) = seen.get(a.as_str()) {
            cx.err_at(
                alias.span().start,
                format!(
                    "upstream `{name_s}`: rename of `{orig}` to `{a}` collides with the rename of `{other}` (line {other_line})"
                ),
            );
        }
        seen.insert(a, (orig, line));
        let exposed = namespace::expose(&name_s, separator, prefix, a);
        if let Err(why) = namespace::check_tool_name(&exposed) {
            cx.err_at(
                alias.span().start,
                format!("upstream `{name_s}`: exposed name `{exposed}` {why}"),
            );
        }
        if prefix == PrefixMode::Never {
            if let Some(owner) = namespace::namespace_owner(&exposed, separator, all_names)
                && owner != name_s
            {
                cx.err_at(
                    alias.span().start,
                    format!(
                        "upstream `{name_s}`: bare name `{exposed}` lies in the namespace of upstream `{owner}`"
                    ),
                );
            }
            if let Some((other, other_line)) = bare_aliases.get(&exposed) {
                cx.err_at(
                    alias.span().start,
                    format!(
                        "upstream `{name_s}`: exposed name `{exposed}` collides with upstream `{other}` (line {other_line})"
                    ),
                );
            } else {
                bare_aliases.insert(exposed.clone(), (name_s.clone(), line));
            }
        }
        rename.insert(orig.clone(), a.clone());
    }
    let restart = u.restart.unwrap_or_default();
    let positive = |cx: &mut Ctx<'_>, v: Option<u64>, what: &str, default: u64| match v {
        Some(0) => {
            cx.err_at(
                up.span().start,
                format!("upstream `{name_s}`: {what} must be greater than 0"),
            );
            default
        }
        Some(v) => v,
        None => default,
    };
    let startup_ms = positive(
        cx,
        u.startup_timeout_ms,
        "startup_timeout_ms",
        DEFAULT_STARTUP_TIMEOUT_MS,
    );
    let call_ms = positive(
        cx,
        u.call_timeout_ms,
        "call_timeout_ms",
        DEFAULT_CALL_TIMEOUT_MS,
    );
    let base_ms = positive(
        cx,
        restart.base_ms,
        "restart.base_ms",
        DEFAULT_RESTART_BASE_MS,
    );
    let max_ms = positive(cx, restart.max_ms, "restart.max_ms", DEFAULT_RESTART_MAX_MS);
    let call_timeout = Duration::from_millis(call_ms);
    let tier = match &u.tier {
        None => Arc::new(Tier::unrestricted(call_timeout)),
        Some(t) => match tiers.get(t.get_ref()) {
            Ok(tier) => tier,
            Err(diags) => {
                cx.err_at(
                    t.span().start,
                    format!(
                        "upstream `{name_s}`: trust tier `{}` is not usable",
                        t.get_ref()
                    ),
                );
                cx.errors.extend(diags);
                Arc::new(Tier::unrestricted(call_timeout))
            }
        },
    };
    let credential = u.credential.as_ref().and_then(|c| {
        let Some(cred) = credentials.get(c.get_ref()) else {
            cx.err_at(c.span().start, format!("upstream `{name_s}`: unknown credential `{}`", c.get_ref()));
            return None;
        };
        // The built-in default tier receives every class; a configured tier only its own.
        if u.tier.is_some() && !tier.credential_classes.contains(&cred.class) {
            cx.err_at(
                c.span().start,
                format!(
                    "upstream `{name_s}`: trust tier `{}` may not receive credential `{}` of class `{}` (it allows {:?})",
                    tier.name, cred.name, cred.class, tier.credential_classes
                ),
            );
            return None;
        }
        let placement = match &u.credential_header {
            None => Placement::Bearer,
            Some(h) => match HeaderName::try_from(h.as_str()) {
                Ok(h) if h == http::header::AUTHORIZATION => Placement::Bearer,
                Ok(h) => Placement::Header(h),
                Err(_) => {
                    cx.err_at(c.span().start, format!("upstream `{name_s}`: bad credential_header `{h}`"));
                    return None;
                }
            },
        };
        Some(Injection {
            credential: cred.clone(),
            placement,
            env_var: u.credential_env.clone(),
        })
    });
    if cx.errors.len() > errors_before {
        return None;
    }
    Some(UpstreamSpec {
        credential,
        tier,
        writable: u.writable.iter().cloned().collect(),
        read_only: u.read_only.iter().cloned().collect(),
        long_running: u.long_running.iter().cloned().collect(),
        pins: u.pins.clone(),
        breaker: breaker_config(u.breaker.unwrap_or_default()),
        retry: {
            let r = u.retry.unwrap_or_default();
            RetryPolicy {
                attempts: r.attempts.unwrap_or(DEFAULT_RETRY_ATTEMPTS).max(1),
                base: Duration::from_millis(r.base_ms.unwrap_or(DEFAULT_RETRY_BASE_MS)),
                max: Duration::from_millis(r.max_ms.unwrap_or(DEFAULT_RETRY_MAX_MS)),
                jitter: Duration::from_millis(r.jitter_ms.unwrap_or(DEFAULT_RETRY_JITTER_MS)),
            }
        },
        name: name_s,
        transport: transport?,
        prefix,
        era,
        allow,
        deny,
        rename,
        descriptions: u.descriptions.clone(),
        startup_timeout: Duration::from_millis(startup_ms),
        call_timeout: Duration::from_millis(call_ms),
        restart: RestartPolicy {
            max_restarts: restart.max_restarts.unwrap_or(DEFAULT_MAX_RESTARTS),
            base: Duration::from_millis(base_ms),
            max: Duration::from_millis(max_ms.max(base_ms)),
        },
    })
}

fn validate_rate_limits(
    cx: &mut Ctx<'_>,
    raw: &[Spanned<RawRateLimit>],
    upstreams: &[String],
) -> Vec<RuleSpec> {
    let mut out = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let at = r.span().start;
        let r = r.get_ref();
        let mut by = KeyBy::default();
        for part in &r.by {
            match part.get_ref().as_str() {
                "identity" => by.identity = true,
                "upstream" => by.upstream = true,
                "tool" => by.tool = true,
                other => cx.err_at(
                    part.span().start,
                    format!("rate limit key `{other}` is not one of identity, upstream, tool"),
                ),
            }
        }
        if let Some(u) = &r.upstream
            && !upstreams.contains(u.get_ref())
        {
            cx.err_at(
                u.span().start,
                format!("rate limit names unknown upstream `{}`", u.get_ref()),
            );
        }
        let Some(per_second) = NonZeroU32::new(r.per_second) else {
            cx.err_at(at, "rate limit per_second must be greater than 0".into());
            continue;
        };
        let burst = r.burst.and_then(NonZeroU32::new).unwrap_or(per_second);
        out.push(RuleSpec {
            name: r
                .name
                .clone()
                .unwrap_or_else(|| format!("rate_limits[{i}]")),
            by,
            upstream: r.upstream.as_ref().map(|u| u.get_ref().clone()),
            per_second,
            burst,
        });
    }
    out
}

/// State shared by the validation of all upstreams.
struct Across<'a> {
    /// Exposed `never`-prefix aliases -> (upstream, line), for collision checks.
    bare_aliases: &'a mut HashMap<String, (String, usize)>,
    tiers: &'a mut Tiers,
    credentials: &'a BTreeMap<String, Arc<Credential>>,
}

/// Tier files, each loaded once per config load.
struct Tiers {
    dir: std::path::PathBuf,
    loaded: HashMap<String, Result<Arc<Tier>, Vec<Diagnostic>>>,
}

impl Tiers {
    fn get(&mut self, name: &str) -> Result<Arc<Tier>, Vec<Diagnostic>> {
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(Vec::new());
        }
        let dir = self.dir.clone();
        self.loaded
            .entry(name.to_owned())
            .or_insert_with(|| tier::load(&dir, name).map(Arc::new))
            .clone()
    }
}

fn validate_auth(
    cx: &mut Ctx<'_>,
    raw: Option<Spanned<RawAuth>>,
    raw_roles: BTreeMap<String, RawRole>,
    tiers: &mut Tiers,
) -> Authenticator {
    let mut roles = Roles::default();
    for (name, r) in raw_roles {
        let max_rank = r.max_tier.as_ref().map(|t| match tiers.get(t.get_ref()) {
            Ok(tier) => tier.rank,
            Err(diags) => {
                cx.err_at(
                    t.span().start,
                    format!(
                        "role `{name}`: max_tier `{}` is not a usable tier",
                        t.get_ref()
                    ),
                );
                cx.errors.extend(diags);
                0
            }
        });
        let mut check = |globs: &[Spanned<String>]| -> Vec<String> {
            for g in globs {
                if let Err(e) = Glob::new(g.get_ref()) {
                    cx.err_at(
                        g.span().start,
                        format!("role `{name}`: bad glob `{}`: {e}", g.get_ref()),
                    );
                }
            }
            globs.iter().map(|g| g.get_ref().clone()).collect()
        };
        let role = Role {
            tools: check(&r.tools),
            prompts: check(&r.prompts),
            resources: check(&r.resources),
            max_rank,
        };
        roles.0.insert(name, role);
    }
    let Some(raw) = raw else {
        return Authenticator::open();
    };
    let at = raw.span().start;
    let raw = raw.into_inner();
    let known = |cx: &mut Ctx<'_>, list: &[Spanned<String>]| -> Vec<String> {
        for r in list {
            if !roles.0.contains_key(r.get_ref()) {
                cx.err_at(
                    r.span().start,
                    format!(
                        "unknown role `{}`: define it under [roles.{}]",
                        r.get_ref(),
                        r.get_ref()
                    ),
                );
            }
        }
        list.iter().map(|r| r.get_ref().clone()).collect()
    };
    let anonymous_roles = known(cx, &raw.anonymous_roles);
    let mut api_keys = Vec::new();
    for k in &raw.api_keys {
        let digest = hex::decode(k.sha256.get_ref().trim())
            .ok()
            .and_then(|d| <[u8; 32]>::try_from(d).ok());
        let roles = known(cx, &k.roles);
        match digest {
            Some(sha256) => api_keys.push(ApiKey {
                name: k.name.clone(),
                sha256,
                roles,
            }),
            None => cx.err_at(
                k.sha256.span().start,
                format!(
                    "API key `{}`: sha256 must be 64 hex digits (e.g. `printf %s KEY | sha256sum`)",
                    k.name
                ),
            ),
        }
    }
    let jwt = raw.jwt.map(|j| {
        let mut keys = Vec::new();
        if let Some(s) = &j.hs256_secret {
            let key = secret::resolve(s.get_ref()).and_then(|secret| {
                DecodingKey::from_secret(secret.expose().as_bytes()).map_err(|e| e.to_string())
            });
            match key {
                Ok(key) => keys.push((None, Algorithm::HS256, key)),
                Err(e) => cx.err_at(s.span().start, format!("auth.jwt.hs256_secret: {e}")),
            }
        }
        if let Some(f) = &j.jwks_file {
            match load_jwks(f.get_ref()) {
                Ok(k) => keys.extend(k),
                Err(e) => cx.err_at(f.span().start, e),
            }
        }
        if j.hs256_secret.is_none() && j.jwks_file.is_none() {
            cx.err_at(at, "[auth.jwt] needs `hs256_secret` or `jwks_file`".into());
        }
        JwtConfig {
            keys,
            issuer: j.issuer,
            audience: j.audience,
            roles_claim: j.roles_claim.unwrap_or_else(|| "roles".into()),
        }
    });
    let cert_roles: Vec<(String, Vec<String>)> = raw
        .client_certs
        .iter()
        .map(|c| (c.subject.clone(), known(cx, &c.roles)))
        .collect();
    let roles = Arc::new(roles);
    Authenticator {
        anonymous: raw
            .anonymous
            .then(|| Arc::new(roles.access(&anonymous_roles))),
        api_keys,
        jwt,
        client_certs: cert_roles
            .into_iter()
            .map(|(subject, r)| (subject, Arc::new(roles.access(&r))))
            .collect(),
        roles,
        open: false,
        resource_metadata: raw.oauth.map(|o| ResourceMetadata {
            resource: o.resource,
            authorization_servers: o.authorization_servers,
            scopes_supported: o.scopes,
            bearer_methods_supported: vec!["header".into()],
        }),
    }
}

fn validate_credentials(
    cx: &mut Ctx<'_>,
    raw: &BTreeMap<String, Spanned<RawCredential>>,
) -> BTreeMap<String, Arc<Credential>> {
    let mut out = BTreeMap::new();
    for (name, c) in raw {
        let at = c.span().start;
        let c = c.get_ref();
        let reference = |cx: &mut Ctx<'_>, r: &Spanned<String>| {
            let v = r.get_ref();
            if !(v.starts_with("env:") || v.starts_with("file:")) {
                cx.err_at(
                    r.span().start,
                    format!(
                        "credential `{name}`: secrets are references: `env:NAME` or `file:PATH`"
                    ),
                );
            }
        };
        let source = match (&c.source, &c.oauth) {
            (Some(s), None) => {
                let v = s.get_ref();
                if let Some(cmd) = v.strip_prefix("exec:") {
                    let argv: Vec<String> = cmd.split_whitespace().map(str::to_owned).collect();
                    if argv.is_empty() {
                        cx.err_at(
                            s.span().start,
                            format!("credential `{name}`: `exec:` needs a command"),
                        );
                    }
                    Source::Exec(argv)
                } else {
                    reference(cx, s);
                    Source::Reference(v.clone())
                }
            }
            (None, Some(o)) => {
                reference(cx, &o.client_secret);
                let oauth = OAuth {
                    token_url: o.token_url.clone(),
                    client_id: o.client_id.clone(),
                    client_secret: o.client_secret.get_ref().clone(),
                    scope: o.scope.clone(),
                    audience: o.audience.clone(),
                };
                match (o.grant.as_deref(), &o.subject_token) {
                    (None | Some("client_credentials"), _) => Source::ClientCredentials(oauth),
                    (Some("token_exchange"), Some(subject)) => Source::TokenExchange {
                        oauth,
                        subject_token: subject.clone(),
                    },
                    (Some("token_exchange"), None) => {
                        cx.err_at(
                            at,
                            format!("credential `{name}`: token_exchange needs `subject_token`"),
                        );
                        continue;
                    }
                    (Some(other), _) => {
                        cx.err_at(at, format!("credential `{name}`: grant `{other}` is not client_credentials or token_exchange"));
                        continue;
                    }
                }
            }
            _ => {
                cx.err_at(
                    at,
                    format!("credential `{name}`: set exactly one of `source` and `oauth`"),
                );
                continue;
            }
        };
        out.insert(
            name.clone(),
            Arc::new(Credential::new(name.clone(), c.class.clone(), source)),
        );
    }
    out
}

fn breaker_config(b: RawBreaker) -> BreakerConfig {
    BreakerConfig {
        consecutive_failures: b
            .consecutive_failures
            .unwrap_or(DEFAULT_BREAKER_CONSECUTIVE_FAILURES)
            .max(1),
        failure_ratio: b
            .failure_ratio
            .filter(|r| *r > 0.0 && *r <= 1.0)
            .unwrap_or(DEFAULT_BREAKER_FAILURE_RATIO),
        window: b.window.unwrap_or(DEFAULT_BREAKER_WINDOW_CALLS).max(1),
        min_calls: b.min_calls.unwrap_or(DEFAULT_BREAKER_MIN_CALLS).max(1),
        cooldown: Duration::from_millis(b.cooldown_ms.unwrap_or(DEFAULT_BREAKER_COOLDOWN_MS)),
        half_open_probes: b
            .half_open_probes
            .unwrap_or(DEFAULT_BREAKER_HALF_OPEN_PROBES)
            .max(1),
        count_is_error: b.count_is_error,
    }
}

fn process_from_launch(l: RawLaunch) -> ProcessSpec {
    ProcessSpec {
        command: l.command,
        args: l.args,
        env: l.env,
        cwd: None,
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

fn validate_tracing(
    cx: &mut Ctx<'_>,
    t: toml::Spanned<super::RawTracing>,
) -> Option<crate::telemetry::traces::TracingConfig> {
    use opentelemetry_otlp::Protocol;
    let at = t.span().start;
    let t = t.into_inner();
    let before = cx.errors.len();
    let protocol = match t.protocol.as_deref() {
        None => None,
        Some("http/protobuf") => Some(Protocol::HttpBinary),
        Some("http/json") => Some(Protocol::HttpJson),
        Some(other) => {
            cx.err_at(
                at,
                format!("[tracing] protocol `{other}`: use `http/protobuf` or `http/json`"),
            );
            None
        }
    };
    if let Some(e) = &t.otlp_endpoint
        && !(e.starts_with("http://") || e.starts_with("https://"))
    {
        cx.err_at(
            at,
            format!("[tracing] otlp_endpoint `{e}` is not an http(s) URL"),
        );
    }
    let sample_ratio = t.sample_ratio.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&sample_ratio) {
        cx.err_at(
            at,
            "[tracing] sample_ratio must be between 0.0 and 1.0".into(),
        );
    }
    (cx.errors.len() == before).then(|| crate::telemetry::traces::TracingConfig {
        endpoint: t.otlp_endpoint,
        protocol,
        service_name: t.service_name.unwrap_or_else(|| "fedgate".into()),
        sample_ratio,
    })
}
