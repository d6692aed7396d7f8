//! `gateway.toml`: the raw serde types as written by users, and loading into a validated snapshot.
//!
//! Raw types reject unknown fields; `validate` turns them into a [`Snapshot`] whose runtime types
//! rule out bad values, reporting every problem at once with `file:line`.

pub mod cluster;
pub mod command;
pub mod defaults;
pub mod flows;
pub mod hooks;
pub mod import;
pub mod snapshot;
pub mod stages;
pub mod tier;
pub mod tls;
pub mod views;
pub use tls::{RawTls, RawUpstreamTls};
mod parse_problems;
mod validate;
pub use validate::WARNING;

/// Why a configured value is refused: the message of a `file:line` diagnostic (or of
/// `fedgate import`'s refusal).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl From<&str> for Invalid {
    fn from(s: &str) -> Self {
        Invalid(s.to_owned())
    }
}

use std::{collections::BTreeMap, path::Path};

use serde::Deserialize;
use toml::Spanned;

pub use snapshot::{
    Diagnostic, Era, GatewaySettings, ProcessSpec, ReplayLimits, RestartPolicy, Snapshot,
    ToolSettings, TransportSpec, UpstreamSpec,
};

/// The whole file.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Gateway-wide settings.
    #[serde(default)]
    pub gateway: RawGateway,
    /// Upstream MCP servers, keyed by the name that becomes their namespace.
    #[serde(default)]
    pub upstreams: BTreeMap<Spanned<String>, Spanned<RawUpstream>>,
    /// Client authentication. Without this section every caller is anonymous with full access.
    pub auth: Option<Spanned<RawAuth>>,
    /// Roles: what an identity holding them may use (globs on namespaced names and URIs).
    #[serde(default)]
    pub roles: BTreeMap<String, RawRole>,
    /// Views: named subsets of the catalog, served at `/mcp/NAME`.
    #[serde(default)]
    pub views: BTreeMap<String, Spanned<views::RawView>>,
    /// Stage-gated workflows (not wired yet).
    #[serde(default)]
    pub stages: BTreeMap<String, stages::RawStages>,
    /// Rate limits, each keyed by any combination of identity, upstream and tool.
    #[serde(default)]
    pub rate_limits: Vec<Spanned<RawRateLimit>>,
    /// The audit log.
    pub audit: Option<RawAudit>,
    /// The admin API: its own listener and token.
    pub admin: Option<Spanned<RawAdmin>>,
    /// OpenTelemetry traces over OTLP/HTTP.
    pub tracing: Option<Spanned<RawTracing>>,
    /// Upstream credentials, referenced by upstreams with `credential = "NAME"`.
    #[serde(default)]
    pub credentials: BTreeMap<String, Spanned<RawCredential>>,
    /// Flows (F12): where their files and their run log are.
    pub flows: Option<flows::RawFlows>,
    /// Shared stores for several replicas (F16).
    pub cluster: Option<Spanned<cluster::RawCluster>>,
    /// External guardrail services, attached to tiers and upstreams by name.
    #[serde(default)]
    pub guardrail_hooks: BTreeMap<String, Spanned<hooks::RawHook>>,
}

/// `[tracing]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTracing {
    /// OTLP/HTTP base URL of a collector (`/v1/traces` is appended), e.g.
    /// `http://127.0.0.1:4318`; default from `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`.
    pub otlp_endpoint: Option<String>,
    /// `http/protobuf` (default) or `http/json`.
    pub protocol: Option<String>,
    /// `service.name` of the spans (default `fedgate`).
    pub service_name: Option<String>,
    /// Share of new traces recorded, 0.0–1.0 (default 1.0); a caller's decision is followed.
    pub sample_ratio: Option<f64>,
}

/// `[admin]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// Address of the admin listener (keep it private; default 127.0.0.1:8939).
    pub listen: Option<String>,
    /// Bearer token reference (`env:NAME` or `file:PATH`) required on every admin request.
    pub token: String,
    /// Serve the operator console at `/console` (default true).
    pub console: Option<bool>,
    /// The admin API may approve any plan, its callers' own included (default true); with
    /// `false` it may only deny those (plans that name approver roles it decides either way).
    pub approve_plans: Option<bool>,
    /// Connections the admin listener holds at once; past it, new ones get 503 (default 256).
    pub max_connections: Option<usize>,
}

/// `[credentials.NAME]`: exactly one of `source`, `oauth` and `per_user`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCredential {
    /// Credential class; a tier lists the classes it may receive.
    pub class: String,
    /// `env:NAME`, `file:PATH` or `exec:COMMAND ARGS…`.
    pub source: Option<Spanned<String>>,
    /// A token from an OAuth2 token endpoint.
    pub oauth: Option<RawOAuth>,
    /// Each person's own token, collected on fedgate's connect page.
    pub per_user: Option<RawPerUser>,
}

/// `per_user = { kind = "token", hint = "..." }` or
/// `per_user = { kind = "oauth", client_id = "...", client_secret = "env:...", scopes = [...] }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPerUser {
    /// `token`: the person pastes a personal token on the page; `oauth`: the person signs in
    /// at the upstream's authorization server (authorization code with PKCE).
    pub kind: Spanned<String>,
    /// What the page asks the person to paste (`token`).
    pub hint: Option<String>,
    /// `oauth`: the client id fedgate is registered with (a literal, `env:` or `file:`).
    pub client_id: Option<Spanned<String>>,
    /// `oauth`: the client secret (`env:NAME` or `file:PATH`); none for a public client.
    pub client_secret: Option<Spanned<String>>,
    /// `oauth`: the authorization endpoint; without it (and `token_url`) both are discovered
    /// from the upstream (RFC 9728 protected-resource metadata, then RFC 8414 / OpenID
    /// discovery of its authorization server).
    pub authorization_url: Option<Spanned<String>>,
    /// `oauth`: the token endpoint (set with `authorization_url`, or neither).
    pub token_url: Option<Spanned<String>>,
    /// `oauth`: scopes asked for.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// `oauth`: the RFC 8707 `resource` sent with the requests (default: the `resource` of the
    /// upstream's protected-resource metadata when discovered, else none).
    pub resource: Option<String>,
    /// `oauth`: the RFC 7009 revocation endpoint (default: the authorization server's
    /// `revocation_endpoint` when discovered, else none).
    pub revocation_url: Option<Spanned<String>>,
    /// `oauth`: an access token is refreshed when this share of its lifetime is left
    /// (percent, 1–100, 100 refreshing before every call; default 10).
    pub refresh_margin_percent: Option<Spanned<u8>>,
}

/// `person_sessions = { max = 1000, idle_ms = 600000 }`
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPersonSessions {
    /// People connected at once; past it the least recently used idle connection is closed,
    /// and with none idle a new person's call is refused (default 1000).
    pub max: Option<usize>,
    /// Milliseconds a person's connection stays open without a call (default 600000).
    pub idle_ms: Option<u64>,
}

/// `oauth = { ... }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOAuth {
    /// `client_credentials` (default) or `token_exchange` (RFC 8693).
    pub grant: Option<String>,
    pub token_url: String,
    pub client_id: String,
    /// Secret reference (`env:` or `file:`).
    pub client_secret: Spanned<String>,
    pub scope: Option<String>,
    pub audience: Option<String>,
    /// token_exchange: the subject token, a secret reference.
    pub subject_token: Option<String>,
}

/// `[audit]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAudit {
    /// JSON-lines file, appended to; relative paths are relative to the config file.
    pub path: String,
    /// Record arguments in full instead of only their SHA-256.
    #[serde(default)]
    pub full_arguments: bool,
    /// Records queued for the writer before new ones are dropped (and counted).
    pub queue: Option<usize>,
}

/// `[[rate_limits]]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// Named in refusals; default `rate_limits[N]`.
    pub name: Option<String>,
    /// Key parts: any of `identity`, `upstream`, `tool` (empty = one global bucket).
    #[serde(default)]
    pub by: Vec<Spanned<String>>,
    /// Only calls to this upstream.
    pub upstream: Option<Spanned<String>>,
    pub per_second: u32,
    /// Calls allowed at once; default `per_second`.
    pub burst: Option<u32>,
}

/// `[auth]`
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    /// Accept requests without credentials as identity `anonymous` (default false).
    #[serde(default)]
    pub anonymous: bool,
    /// Roles of the anonymous identity.
    #[serde(default)]
    pub anonymous_roles: Vec<Spanned<String>>,
    /// API keys, stored as SHA-256 hex digests of the key.
    #[serde(default)]
    pub api_keys: Vec<RawApiKey>,
    /// JWT bearer tokens.
    pub jwt: Option<RawJwt>,
    /// OAuth: serve RFC 9728 protected-resource metadata and point 401s at it.
    pub oauth: Option<RawOAuthResource>,
    /// Identities of mTLS client certificates.
    #[serde(default)]
    pub client_certs: Vec<RawClientCert>,
}

/// `[[auth.client_certs]]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClientCert {
    /// Certificate subject CN or DNS subject alternative name.
    pub subject: String,
    #[serde(default)]
    pub roles: Vec<Spanned<String>>,
    /// A peer gateway: it sees only flows marked `export` (and what its roles grant), and
    /// what it calls is audited on behalf of the caller it names.
    #[serde(default)]
    pub peer: bool,
}

/// `[auth.oauth]`
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawOAuthResource {
    /// This gateway's canonical resource URI (e.g. `https://gw.example.com/mcp`).
    pub resource: String,
    /// Authorization servers that issue tokens for it.
    pub authorization_servers: Vec<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// `[[auth.api_keys]]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApiKey {
    pub name: String,
    /// `sha256sum` of the key, hex.
    pub sha256: Spanned<String>,
    #[serde(default)]
    pub roles: Vec<Spanned<String>>,
}

/// `[auth.jwt]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    /// HS256 secret reference (`env:NAME` or `file:PATH`).
    pub hs256_secret: Option<Spanned<String>>,
    /// JWKS file with RS256/ES256 public keys.
    pub jwks_file: Option<Spanned<String>>,
    /// Required `iss`.
    pub issuer: Option<String>,
    /// Required `aud`.
    pub audience: Option<String>,
    /// Claim holding the roles (array or space-separated string); default `roles`.
    pub roles_claim: Option<String>,
    /// Claim naming the person (a non-empty string); default `sub`. A token without it is
    /// refused.
    pub subject_claim: Option<String>,
    /// The browser sign-in (OpenID Connect) a person with a token of this issuer gives on a
    /// connect page to show it is them.
    pub sign_in: Option<RawSignIn>,
}

/// `[auth.jwt.sign_in]`: OpenID Connect code flow with PKCE at `[auth.jwt] issuer`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSignIn {
    /// This gateway's client id at the identity provider (a literal or `env:`/`file:`).
    pub client_id: Spanned<String>,
    /// `env:`/`file:` reference; absent for a public client.
    pub client_secret: Option<Spanned<String>>,
    /// Scopes asked for besides `openid` (e.g. `email` when `subject_claim = "email"`).
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// `[roles.NAME]`
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawRole {
    /// Highest trust tier (by rank) whose upstreams this role reaches.
    pub max_tier: Option<Spanned<String>>,
    #[serde(default)]
    pub tools: Vec<Spanned<String>>,
    #[serde(default)]
    pub prompts: Vec<Spanned<String>>,
    #[serde(default)]
    pub resources: Vec<Spanned<String>>,
    /// Secrets in results for callers holding this role: at least this strict whatever the
    /// upstream's guardrails say (a caller's most permissive role counts).
    pub secrets_in_results: Option<crate::guard::SecretAction>,
    /// The view (`[views.NAME]`) its holders come through at `/mcp`.
    pub view: Option<Spanned<String>>,
}

/// `[gateway]`
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawGateway {
    /// Address of the downstream Streamable HTTP endpoint (`/mcp`, `/healthz`, `/readyz`).
    pub listen: Option<Spanned<String>>,
    /// Separator between upstream name and tool/prompt name.
    pub separator: Option<Spanned<String>>,
    /// `portable` (default): every exposed name fits `^[a-zA-Z0-9_-]{1,64}$`; `mcp`: MCP's rules.
    #[serde(default)]
    pub names: Option<Spanned<crate::names::NameRule>>,
    /// Default prefix mode for upstreams that do not set one.
    pub prefix: Option<Spanned<String>>,
    /// Items per page in merged lists.
    pub page_size: Option<Spanned<usize>>,
    /// Extra `Origin` values accepted besides loopback origins.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Extra `Host` values accepted besides loopback hosts (set when serving a public name).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: Option<usize>,
    /// Folder of trust tier files, relative to the config file (default `trust-tiers`).
    pub tiers_dir: Option<String>,
    /// This gateway's id in the paths of federated requests (default: random per process).
    pub id: Option<Spanned<String>>,
    /// Most gateways a federated request may pass (this one included).
    pub max_hops: Option<usize>,
    /// How long a result recorded under an idempotency key is replayed, in milliseconds.
    pub idempotency_ttl_ms: Option<u64>,
    /// Most bytes of results recorded under idempotency keys; past it the oldest go first.
    pub idempotency_max_bytes: Option<usize>,
    /// On SIGTERM/SIGINT, how long calls in flight may take before everything is closed.
    pub shutdown_grace_ms: Option<u64>,
    /// Key (secret reference, at least 32 bytes) that signs cursors and MRTR `requestState`;
    /// give every replica the same one. Unset: a random key per process.
    pub state_key: Option<Spanned<String>>,
    /// How long a handshake-era session id stays valid on any replica, in milliseconds.
    pub session_ttl_ms: Option<u64>,
    /// How long a pagination cursor stays valid, in milliseconds.
    pub cursor_ttl_ms: Option<u64>,
    /// How long a call parked for a client's input (MRTR) waits for the retry, in milliseconds.
    pub input_wait_ms: Option<u64>,
    /// Most calls parked for client input at once; more are refused.
    pub max_parked_calls: Option<usize>,
    /// Reload when the config file or a tier file changes (default true; SIGHUP always works).
    pub watch_config: Option<bool>,
    /// Serve HTTPS (and with `client_ca`, require client certificates: mTLS).
    pub tls: Option<Spanned<RawTls>>,
    /// Plan envelopes (`off`, `errors`, `always`) for upstreams and tools that set none, and
    /// for calls that resolve to nothing.
    pub envelope: Option<crate::envelope::Mode>,
    /// How long a plan waiting for approval stays valid, in milliseconds.
    pub plan_ttl_ms: Option<u64>,
    /// Most plans waiting for approval at once; more are refused.
    pub max_pending_plans: Option<usize>,
    /// How long a client may take to send a request's headers, in milliseconds (also how long
    /// an idle kept-alive connection stays open).
    pub header_read_timeout_ms: Option<u64>,
    /// How long a client may take to send a request body, in milliseconds.
    pub body_read_timeout_ms: Option<u64>,
    /// How long a TLS handshake may take, in milliseconds.
    pub tls_handshake_timeout_ms: Option<u64>,
    /// Most client connections at once; more are closed at once.
    pub max_connections: Option<usize>,
    /// With `[auth]`: serve `/metrics` without credentials (default false).
    pub public_metrics: Option<bool>,
    /// Most handshake-era sessions open at once; more `initialize` requests get 503.
    pub max_sessions: Option<usize>,
    /// Upstream for resource URIs nothing lists or matches (unset: the only one with resources).
    pub resource_default: Option<Spanned<String>>,
    /// The `retry` (ms) a session's SSE streams announce (0: no priming events).
    pub sse_retry_ms: Option<u64>,
    /// A session call unanswered this long (ms) gets a resumable SSE stream, else one JSON body.
    pub stream_after_ms: Option<u64>,
    /// A handshake-era session unused this long (ms) ends on its replica; its id restores it.
    pub session_idle_ms: Option<u64>,
    /// Most events a session stream keeps for a client that reconnects (`Last-Event-ID`).
    pub replay_events: Option<usize>,
    /// Most bytes a session stream keeps for a client that reconnects.
    pub replay_bytes: Option<usize>,
    /// How long a session stream's events stay resumable, in milliseconds.
    pub replay_ms: Option<u64>,
    /// `all` (default) or `search`: past `tool_listing_threshold` tools a session starts with
    /// the pinned tools and the search tools.
    pub tool_listing: Option<crate::policy::view::Listing>,
    /// With `tool_listing = "search"`: above this many callable tools a session starts small.
    pub tool_listing_threshold: Option<usize>,
    /// Most tools `fedgate__select_tools` may put in a session's working set.
    pub max_selected_tools: Option<Spanned<usize>>,
    /// Tools every session lists in search mode (globs on canonical names).
    #[serde(default)]
    pub pinned_tools: Vec<Spanned<String>>,
    /// Where the workspaces' stages are kept without `[cluster] redis` (a SQLite file,
    /// relative to the config file; default `fedgate-stages.db`).
    pub stage_db: Option<String>,
    /// Where per-user credentials are kept without `[cluster] redis` (SQLite, relative to the
    /// config file; default `fedgate-credentials.db`).
    pub credential_db: Option<String>,
    /// Key (secret reference, at least 32 bytes) that seals per-user credentials at rest;
    /// required when a credential is `per_user`. Every replica needs the same one.
    pub credential_key: Option<Spanned<String>>,
    /// Former credential keys: what they sealed still opens, and is sealed again with
    /// `credential_key` when next used.
    #[serde(default)]
    pub credential_keys_retired: Vec<Spanned<String>>,
    /// The URL people reach this gateway at (for connect links); default the listener's.
    pub public_url: Option<String>,
}

/// `[upstreams.NAME]`. Which fields apply depends on `kind`; `validate` reports misplaced ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// `stdio`, `http` (Streamable HTTP) or `sse` (legacy HTTP+SSE).
    pub kind: Spanned<String>,
    /// stdio: program to run (`@self` = this fedgate executable).
    pub command: Option<Spanned<String>>,
    /// stdio: its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: the process's environment beside the base (`PATH`, `HOME`, `LANG`, …); values
    /// may be `env:NAME` / `file:PATH` references.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// stdio: the process sees all of fedgate's environment, not just the base and `env`.
    #[serde(default)]
    pub inherit_env: bool,
    /// stdio: working directory.
    pub cwd: Option<String>,
    /// stdio: run the process under bubblewrap (`[upstreams.NAME.sandbox]`).
    pub sandbox: Option<RawSandbox>,
    /// http/sse: endpoint URL.
    pub url: Option<Spanned<String>>,
    /// http/sse: static headers sent with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// http/sse: a process fedgate starts and supervises that serves `url`.
    pub launch: Option<RawLaunch>,
    /// `always` (namespaced names) or `never` (names as the upstream has them).
    pub prefix: Option<Spanned<String>>,
    /// `auto` (probe `server/discover`, fall back to `initialize`), `legacy` or `modern`.
    pub era: Option<Spanned<String>>,
    /// Glob patterns on the upstream's own tool names; only matching tools are exposed.
    pub allow: Option<Vec<Spanned<String>>>,
    /// Glob patterns on the upstream's own tool names that are hidden.
    #[serde(default)]
    pub deny: Vec<Spanned<String>>,
    /// Upstream tool name -> exposed alias (before the prefix is added).
    #[serde(default)]
    pub rename: BTreeMap<String, Spanned<String>>,
    /// Upstream tool name -> description shown downstream.
    #[serde(default)]
    pub descriptions: BTreeMap<String, String>,
    /// Milliseconds to start and complete the handshake.
    pub startup_timeout_ms: Option<u64>,
    /// Milliseconds a forwarded request may take.
    pub call_timeout_ms: Option<u64>,
    /// How often a handshake-era http/sse/peer upstream is pinged, in milliseconds (0: never);
    /// two unanswered pings in a row report it down.
    pub health_interval_ms: Option<u64>,
    /// With a `per_user` credential: the connections fedgate holds to it, one per person.
    pub person_sessions: Option<RawPersonSessions>,
    /// Restart policy for crashed processes.
    pub restart: Option<RawRestart>,
    /// Trust tier (a file in the tiers folder); none = the built-in unrestricted `default`.
    pub tier: Option<Spanned<String>>,
    /// Upstream tool names that may write at a `writes = "declared"` tier.
    #[serde(default)]
    pub writable: Vec<String>,
    /// Upstream tool names declared read-only (the only reads at tiers that do not trust
    /// annotations).
    #[serde(default)]
    pub read_only: Vec<String>,
    /// Upstream tool names that get the tier's `long_ms` timeout.
    #[serde(default)]
    pub long_running: Vec<String>,
    /// Accepted tool-definition fingerprints (tiers that pin definitions).
    #[serde(default)]
    pub pins: BTreeMap<String, String>,
    /// Circuit breaker of this upstream.
    pub breaker: Option<RawBreaker>,
    /// Retries of calls that are safe to repeat.
    pub retry: Option<RawRetry>,
    /// Name of a `[credentials.NAME]` entry injected into requests to this upstream.
    pub credential: Option<Spanned<String>>,
    /// http/sse: header carrying the credential (default `Authorization: Bearer`).
    pub credential_header: Option<String>,
    /// stdio: environment variable carrying the credential at spawn.
    pub credential_env: Option<String>,
    /// Plan envelopes for this upstream's tools: `off`, `errors` (default) or `always`.
    pub envelope: Option<crate::envelope::Mode>,
    /// Check arguments against each tool's input schema before forwarding (default true).
    pub validate_arguments: Option<bool>,
    /// Secrets in arguments and results: overrides the tier's `[guardrails]`, key by key.
    #[serde(default)]
    pub guardrails: crate::guard::RawPolicy,
    /// http/sse/peer: TLS to the server — the CA that signs its certificate, and the client
    /// certificate and key fedgate presents (mTLS); paths relative to the config file.
    pub tls: Option<RawUpstreamTls>,
    /// The upstream honours `_meta.idempotencyKey` (a repeated key does not repeat the effect):
    /// a flow re-drives a write whose outcome a crash left unknown (default false).
    #[serde(default)]
    pub idempotency_keys: bool,
    /// Per-tool settings, by the upstream's own tool name.
    #[serde(default)]
    pub tools: BTreeMap<String, Spanned<ToolSettings>>,
}

/// `retry = { attempts = 3, base_ms = 100, max_ms = 2000, jitter_ms = 100 }`
#[derive(Debug, Deserialize, Default, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    pub attempts: Option<u32>,
    pub base_ms: Option<u64>,
    pub max_ms: Option<u64>,
    pub jitter_ms: Option<u64>,
}

/// `breaker = { ... }`
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawBreaker {
    pub consecutive_failures: Option<u32>,
    pub failure_ratio: Option<f64>,
    pub window: Option<u32>,
    pub min_calls: Option<u32>,
    pub cooldown_ms: Option<u64>,
    pub half_open_probes: Option<u32>,
    /// Count `isError: true` tool results as failures (same as adding `is_error` to `count`).
    #[serde(default)]
    pub count_is_error: bool,
    /// Outcomes that count as failures; default `["transport", "timeout", "server_error"]` (the first two count against the upstream, the others against the tool).
    pub count: Option<Vec<crate::policy::breaker::FailureClass>>,
}

/// `[upstreams.NAME.sandbox]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSandbox {
    /// Paths the process may read (beside the system's programs and libraries).
    #[serde(default)]
    pub read: Vec<Spanned<String>>,
    /// Paths the process may read and write.
    #[serde(default)]
    pub write: Vec<Spanned<String>>,
    /// Whether the process may use the network (default: no network at all).
    #[serde(default)]
    pub network: bool,
    /// Address-space limit in MiB.
    pub memory_mb: Option<Spanned<u64>>,
    /// CPU-time limit in seconds (the process is killed past it).
    pub cpu_seconds: Option<Spanned<u64>>,
    /// Most files the process may hold open.
    pub open_files: Option<Spanned<u64>>,
}

/// `launch = { command = "...", args = [...] }`
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawLaunch {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub inherit_env: bool,
}

/// `restart = { max_restarts = 5, base_ms = 200, max_ms = 10000 }`
#[derive(Debug, Deserialize, Default, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct RawRestart {
    pub max_restarts: Option<u32>,
    pub base_ms: Option<u64>,
    pub max_ms: Option<u64>,
}

/// Reads, parses and validates a config file; every problem comes back as a diagnostic.
pub fn load(path: &Path) -> Result<Snapshot, Vec<Diagnostic>> {
    let text = read(path)?;
    load_str(&path.display().to_string(), &text)
}

/// The config file's text; a missing file is answered with how to name or make one.
fn read(path: &Path) -> Result<String, Vec<Diagnostic>> {
    let file = path.display().to_string();
    std::fs::read_to_string(path).map_err(|e| {
        // A first run outside the clone: say how to name a config, or how to make one.
        let hint = if e.kind() == std::io::ErrorKind::NotFound {
            "; name one with --config FILE, or write one from a client's server list with \
             `fedgate import claude_desktop_config.json > gateway.toml` (also Cursor's and VS \
             Code's mcp.json)"
        } else {
            ""
        };
        vec![Diagnostic {
            file: file.clone(),
            line: 0,
            message: format!("cannot read config: {e}{hint}"),
        }]
    })
}

/// Parses and validates config text; `file` names it in diagnostics.
pub fn load_str(file: &str, text: &str) -> Result<Snapshot, Vec<Diagnostic>> {
    let raw: RawConfig =
        toml::from_str(text).map_err(|e| parse_problems::all(file, text, e, false))?;
    validate::validate(file, text, raw, false)
}

/// Like [`load`], for commands that only read (a run log, the plans a gateway lists): secrets
/// that cannot be resolved (an `env:` variable not set here) are warnings, and the admin API
/// says why it cannot be used (`AdminSettings::token_missing`).
pub fn load_for_reading(path: &Path) -> Result<Snapshot, Vec<Diagnostic>> {
    let file = path.display().to_string();
    let text = read(path)?;
    let raw: RawConfig =
        toml::from_str(&text).map_err(|e| parse_problems::all(&file, &text, e, true))?;
    validate::validate(&file, &text, raw, true)
}

/// 1-based line of a byte offset.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}
