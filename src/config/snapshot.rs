//! The validated configuration every component reads: plain, immutable snapshot types.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    net::SocketAddr,
    num::NonZeroUsize,
    sync::Arc,
    time::Duration,
};

use globset::GlobSet;

use crate::{
    envelope::Mode,
    names::PrefixMode,
    policy::{
        breaker::BreakerConfig,
        identity::Authenticator,
        rate_limit::RuleSpec,
        retry::RetryPolicy,
        token::{Credential, Placement},
        trust::{Approval, Declared, Tier},
    },
    secret,
    telemetry::audit::AuditConfig,
};

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
        match self.line {
            // No position (the file cannot be read, say): no `:0`.
            0 => write!(f, "{}: {}", self.file, self.message),
            line => write!(f, "{}:{line}: {}", self.file, self.message),
        }
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
    pub flows: FlowSettings,
    /// `[cluster]`: the shared stores (none: everything per process).
    pub cluster: super::cluster::ClusterSettings,
    /// `[views]` and the `[gateway]` listing keys.
    pub views: Arc<crate::policy::view::Views>,
    /// `[stages.NAME]`: the workflows' state machines, and where their workspaces are kept.
    pub stages: StageSettings,
    /// Per-user credentials: how they are sealed and kept (`None`: no credential is per user).
    pub user_credentials: Option<UserCredentialSettings>,
    /// What is accepted but should be written otherwise (today's tool references, …).
    pub warnings: Vec<Diagnostic>,
}

/// `[flows]`, resolved against the config file's folder, and the flows that loaded.
#[derive(Debug, Clone)]
pub struct FlowSettings {
    /// The flow folder (watched for changes, like the config file); `None`: no flows.
    pub dir: Option<std::path::PathBuf>,
    /// The run log.
    pub db: std::path::PathBuf,
    pub parallelism: usize,
    pub upstream_parallelism: usize,
    pub artifact_bytes: usize,
    pub set: super::flows::FlowSet,
}

/// The admin API's listener and token.
#[derive(Debug, Clone)]
pub struct AdminSettings {
    pub listen: SocketAddr,
    pub token: secret::Secret,
    /// Loaded by a reading command without its token: why (the admin API cannot be used).
    pub token_missing: Option<String>,
    /// `/console` and the call feed behind it.
    pub console: bool,
    /// The operator may approve plans their callers would approve themselves.
    pub approve_plans: bool,
    /// Connections held at once (`[admin] max_connections`).
    pub max_connections: usize,
}

impl GatewaySettings {
    /// The naming rule and separator, together.
    pub fn naming(&self) -> crate::names::Naming {
        crate::names::Naming::new(self.names, self.separator.clone())
    }
}

/// `[gateway]` after validation.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GatewaySettings {
    pub listen: SocketAddr,
    pub separator: String,
    /// `[gateway] names`: which exposed names are allowed.
    pub names: crate::names::NameRule,
    pub page_size: NonZeroUsize,
    pub allowed_origins: Vec<String>,
    pub allowed_hosts: Vec<String>,
    pub max_body_bytes: usize,
    #[serde(
        rename = "idempotency_ttl_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub idempotency_ttl: Duration,
    pub idempotency_max_bytes: usize,
    /// HTTPS (with client verification when a client CA is configured).
    /// Whether the listener serves TLS (the loaded keys have no form to show).
    #[serde(serialize_with = "shown::is_some")]
    pub tls: Option<Arc<rustls::ServerConfig>>,
    #[serde(
        rename = "shutdown_grace_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub shutdown_grace: Duration,
    /// This gateway's id in federated request paths.
    pub id: String,
    /// Most gateways a federated request may pass.
    pub max_hops: usize,
    pub watch_config: bool,
    /// Signs cursors and `requestState`; `None` = a random key per process.
    pub state_key: Option<secret::Secret>,
    #[serde(
        rename = "cursor_ttl_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub cursor_ttl: Duration,
    #[serde(
        rename = "session_ttl_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub session_ttl: Duration,
    #[serde(
        rename = "input_wait_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub input_wait: Duration,
    pub max_parked_calls: usize,
    /// Envelope mode of calls that resolve to no upstream, and of upstreams that set none.
    pub envelope: Mode,
    #[serde(
        rename = "plan_ttl_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub plan_ttl: Duration,
    pub max_pending_plans: usize,
    #[serde(
        rename = "header_read_timeout_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub header_read_timeout: Duration,
    #[serde(
        rename = "body_read_timeout_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub body_read_timeout: Duration,
    #[serde(
        rename = "tls_handshake_timeout_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub tls_handshake_timeout: Duration,
    pub max_connections: usize,
    /// `/metrics` on the main listener needs no credentials even with `[auth]`.
    pub public_metrics: bool,
    pub max_sessions: usize,
    /// Serves resource URIs that nothing lists or matches (`None`: the only ready upstream
    /// declaring resources, if exactly one).
    pub resource_default: Option<String>,
    /// `None`: session streams carry no priming event and no `retry`.
    #[serde(
        rename = "sse_retry_ms",
        serialize_with = "crate::clock::serialize_millis_opt"
    )]
    pub sse_retry: Option<Duration>,
    /// How long a session call may take and still be answered as one JSON body.
    #[serde(
        rename = "stream_after_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub stream_after: Duration,
    /// How long a handshake-era session may go unused before it ends on its replica.
    #[serde(
        rename = "session_idle_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub session_idle: Duration,
    /// Bounds of each session stream's resumption buffer.
    pub replay: ReplayLimits,
}

/// Bounds of each session stream's resumption buffer (`[gateway] replay_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ReplayLimits {
    pub events: usize,
    pub bytes: usize,
    #[serde(rename = "ttl_ms", serialize_with = "crate::clock::serialize_millis")]
    pub ttl: Duration,
}

/// Which lifecycle fedgate uses towards an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Era {
    /// Probe `server/discover`; fall back to `initialize`.
    Auto,
    /// `initialize` handshake (2025-06-18 / 2025-11-25).
    Legacy,
    /// Stateless 2026-07-28.
    Modern,
}

/// Crash restarts: `min(max, base * 2^n)` plus jitter, at most `max_restarts` in a row.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct RestartPolicy {
    pub max_restarts: u32,
    #[serde(rename = "base_ms", serialize_with = "crate::clock::serialize_millis")]
    pub base: Duration,
    #[serde(rename = "max_ms", serialize_with = "crate::clock::serialize_millis")]
    pub max: Duration,
}

/// A process fedgate runs: a stdio upstream, or the server behind an http/sse upstream.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProcessSpec {
    pub command: String,
    pub args: Vec<String>,
    /// Literal values never show (`secret::Configured`); references do.
    pub env: BTreeMap<String, secret::Configured>,
    /// All of fedgate's environment goes to the process, not just the base and `env`.
    pub inherit_env: bool,
    pub cwd: Option<String>,
    /// Runs the process under bubblewrap, with only these paths and no network unless allowed.
    pub sandbox: Option<Sandbox>,
}

/// `[upstreams.NAME.sandbox]`, validated: paths exist and are absolute, `bwrap` is installed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sandbox {
    pub read: Vec<std::path::PathBuf>,
    pub write: Vec<std::path::PathBuf>,
    pub network: bool,
    pub memory_mb: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub open_files: Option<u64>,
}

/// How fedgate reaches an upstream.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TransportSpec {
    Stdio(ProcessSpec),
    Http {
        #[serde(serialize_with = "shown::url")]
        url: String,
        headers: BTreeMap<String, secret::Configured>,
        launch: Option<ProcessSpec>,
    },
    Sse {
        #[serde(serialize_with = "shown::url")]
        url: String,
        headers: BTreeMap<String, secret::Configured>,
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

    /// The URL of a remote upstream.
    pub fn url(&self) -> Option<&str> {
        match self {
            TransportSpec::Http { url, .. } | TransportSpec::Sse { url, .. } => Some(url),
            TransportSpec::Stdio(_) => None,
        }
    }
}

/// TLS to an upstream: the CA that signs its certificate, and the client certificate fedgate
/// presents. Files are read at each connect (a rotated certificate is picked up on restart).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UpstreamTls {
    pub ca: std::path::PathBuf,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

/// One upstream after validation. Serialized for the admin API's config dump: every field
/// shows unless marked, and what may hold a secret is a type that cannot show it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UpstreamSpec {
    pub name: String,
    pub transport: TransportSpec,
    pub prefix: PrefixMode,
    pub era: Era,
    /// Compiled globs keep no patterns to show.
    #[serde(skip)]
    pub allow: Option<GlobSet>,
    #[serde(skip)]
    pub deny: GlobSet,
    pub rename: BTreeMap<String, String>,
    pub descriptions: BTreeMap<String, String>,
    #[serde(
        rename = "startup_timeout_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub startup_timeout: Duration,
    #[serde(
        rename = "call_timeout_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub call_timeout: Duration,
    /// How often a handshake-era remote upstream is pinged (`None`: never).
    #[serde(
        rename = "health_interval_ms",
        serialize_with = "crate::clock::serialize_millis_opt"
    )]
    pub health_interval: Option<Duration>,
    /// With a `per_user` credential: how many people it is connected as at once, and when an
    /// idle person's connection closes.
    pub person_sessions: PersonSessionLimits,
    pub restart: RestartPolicy,
    #[serde(serialize_with = "shown::tier")]
    pub tier: Arc<Tier>,
    pub writable: BTreeSet<String>,
    pub read_only: BTreeSet<String>,
    pub long_running: BTreeSet<String>,
    pub pins: BTreeMap<String, String>,
    pub breaker: BreakerConfig,
    pub retry: RetryPolicy,
    pub credential: Option<Injection>,
    /// Plan envelopes for tools without their own setting.
    pub envelope: Mode,
    /// Check arguments against input schemas (tools may override).
    pub validate_arguments: bool,
    /// Secrets in arguments and results: the tier's, with the upstream's overrides.
    pub guardrails: crate::guard::Policy,
    /// External guardrail hooks asked about this upstream's tool calls, in order.
    #[serde(serialize_with = "shown::hooks")]
    pub guardrail_hooks: Vec<std::sync::Arc<crate::guard::hook::Hook>>,
    /// The upstream honours `_meta.idempotencyKey`.
    pub idempotency_keys: bool,
    /// Kind `peer`: another fedgate (requests carry the hop path and the caller claim).
    pub peer: bool,
    /// TLS to the server (CA, client certificate), paths resolved.
    pub tls: Option<UpstreamTls>,
    /// Per-tool settings by the upstream's own tool name.
    pub tools: BTreeMap<String, ToolSettings>,
}

/// `person_sessions`, with defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PersonSessionLimits {
    pub max: usize,
    #[serde(rename = "idle_ms", serialize_with = "crate::clock::serialize_millis")]
    pub idle: Duration,
}

/// `[upstreams.NAME.tools.TOOL]`: what one tool overrides.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSettings {
    /// `off`, `errors` or `always`; default: the upstream's.
    pub envelope: Option<Mode>,
    /// Default: the upstream's `validate_arguments`.
    pub validate_arguments: Option<bool>,
    /// `none`, `plan` or `elicit`; default: the tier's (`approval_for_writes`).
    pub approval: Option<Approval>,
    /// Roles whose holders approve; default: the tier's `approvers` (empty = the caller).
    pub approvers: Option<Vec<String>>,
    /// Path globs the tool may change, shown in an approval plan's `safety`.
    #[serde(default)]
    pub touches_files: Vec<String>,
    /// Whether the tool changes code (shown in `safety`).
    #[serde(default)]
    pub writes_code: bool,
    /// A question for the agent to ask after the call succeeded.
    pub follow_up: Option<String>,
}

/// What applies to one tool call, upstream and tool settings combined.
#[derive(Debug, Clone, Copy)]
pub struct ToolPolicy<'a> {
    pub envelope: Mode,
    pub validate_arguments: bool,
    /// `None` = settled by the tier (`approval_for_writes`, for writes).
    pub approval: Option<Approval>,
    pub approvers: &'a [String],
    pub settings: Option<&'a ToolSettings>,
}

/// A credential and where it goes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Injection {
    #[serde(serialize_with = "shown::credential")]
    pub credential: Arc<Credential>,
    #[serde(serialize_with = "shown::placement")]
    pub placement: Placement,
    /// stdio: the environment variable set at spawn.
    pub env_var: Option<String>,
}

impl UpstreamSpec {
    /// What this upstream's config declares about its tools, for the tier's decisions.
    pub fn declared(&self) -> Declared<'_> {
        Declared {
            writable: &self.writable,
            read_only: &self.read_only,
            long_running: &self.long_running,
        }
    }

    /// The settings that apply to the upstream's tool `name`.
    pub fn tool_policy(&self, name: &str) -> ToolPolicy<'_> {
        let t = self.tools.get(name);
        ToolPolicy {
            envelope: t.and_then(|t| t.envelope).unwrap_or(self.envelope),
            validate_arguments: t
                .and_then(|t| t.validate_arguments)
                .unwrap_or(self.validate_arguments),
            approval: t.and_then(|t| t.approval),
            approvers: t
                .and_then(|t| t.approvers.as_deref())
                .unwrap_or(&self.tier.approvers),
            settings: t,
        }
    }

    /// A digest of everything that decides whether and how a call of `name` needs approval:
    /// a plan made under one version is void under another.
    pub fn policy_version(&self, name: &str) -> String {
        use sha2::{Digest, Sha256};
        // Where the upstream is (never header or environment values: they may be secrets).
        let target = match &self.transport {
            TransportSpec::Stdio(p) => format!("stdio {} {:?}", p.command, p.args),
            TransportSpec::Http { url, .. } => format!("http {url}"),
            TransportSpec::Sse { url, .. } => format!("sse {url}"),
        };
        let text = format!(
            "{:?}|{:?}|{}|{}|{}|{target}|{:?}",
            self.tier,
            self.tools.get(name),
            self.writable.contains(name),
            self.read_only.contains(name),
            self.exposes(name),
            self.credential.as_ref().map(|c| &c.credential.name),
        );
        hex::encode(&Sha256::digest(text.as_bytes())[..12])
    }

    /// Whether some call of this upstream needs approval.
    /// Calls to this upstream may come back held for approval: it holds some itself, or it is a
    /// peer gateway (whose plans this gateway relays).
    pub fn may_hold_calls(&self) -> bool {
        self.needs_approvals() || self.peer
    }

    pub fn needs_approvals(&self) -> bool {
        self.tier.approval_for_writes
            || self
                .tools
                .values()
                .any(|t| matches!(t.approval, Some(Approval::Plan | Approval::Elicit)))
    }

    /// Every role named as approver by the tier or a tool.
    pub fn approver_roles(&self) -> Vec<String> {
        let mut roles = self.tier.approvers.clone();
        for t in self.tools.values() {
            roles.extend(t.approvers.iter().flatten().cloned());
        }
        roles
    }

    /// Whether an upstream tool name passes the allow/deny globs.
    pub fn exposes(&self, tool: &str) -> bool {
        self.allow.as_ref().is_none_or(|a| a.is_match(tool)) && !self.deny.is_match(tool)
    }
}

/// `[gateway] credential_key`, `credential_keys_retired`, `credential_db`, `public_url`.
#[derive(Debug, Clone)]
pub struct UserCredentialSettings {
    pub key: secret::Secret,
    pub retired: Vec<secret::Secret>,
    /// SQLite file, unused with `[cluster] redis`.
    pub db: std::path::PathBuf,
    pub public_url: Option<String>,
}

/// The workflows (`[stages.NAME]`) and the SQLite file of their workspaces (`[gateway]
/// stage_db`; unused with `[cluster] redis`).
#[derive(Debug, Clone, Default)]
pub struct StageSettings {
    pub machines: Machines,
    pub db: std::path::PathBuf,
}

/// The workflows by name.
pub type Machines = Arc<std::collections::BTreeMap<String, Arc<crate::policy::workflow::Machine>>>;

/// How the config dump shows what has no plain form (or must not show it).
mod shown {
    use std::sync::Arc;

    use serde::{Serialize, Serializer};

    use crate::policy::{
        token::{Credential, Placement},
        trust::Tier,
    };

    /// A URL without its userinfo or secret-looking query values.
    pub fn url<S: Serializer>(u: &str, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::secret::redact_url(u))
    }

    pub fn tier<S: Serializer>(t: &Arc<Tier>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.name)
    }

    /// Hooks by name (their URLs and tokens are in `[guardrail_hooks]`).
    pub fn hooks<S: Serializer>(
        h: &[Arc<crate::guard::hook::Hook>],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(h.iter().map(|h| h.name.as_str()))
    }

    /// A credential by name and class: its source and cached token never show.
    pub fn credential<S: Serializer>(c: &Arc<Credential>, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Named<'a> {
            name: &'a str,
            class: &'a str,
        }
        Named {
            name: &c.name,
            class: &c.class,
        }
        .serialize(s)
    }

    pub fn is_some<T, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(v.is_some())
    }

    pub fn placement<S: Serializer>(p: &Placement, s: S) -> Result<S::Ok, S::Error> {
        match p {
            Placement::Bearer => s.serialize_str("bearer"),
            Placement::Header(h) => s.serialize_str(h.as_str()),
        }
    }
}
