//! Every default of `gateway.toml`, named with its unit.

/// Address the downstream endpoint binds when neither the file nor `--listen` says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8930";
/// Items per page of a merged list served downstream.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Time an upstream gets to start and finish its handshake before it is reported failed.
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 15_000;
/// Time a forwarded request may take before the caller gets a timeout error.
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 60_000;
/// Restarts of a crashed upstream before it is given up (reported `failed`).
pub const DEFAULT_MAX_RESTARTS: u32 = 5;
/// First restart delay; it doubles with every consecutive failure.
pub const DEFAULT_RESTART_BASE_MS: u64 = 200;
/// Ceiling of the restart delay.
pub const DEFAULT_RESTART_MAX_MS: u64 = 10_000;
/// Largest downstream request body accepted (bytes); larger bodies get 413.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// A value of `command` that means "this fedgate executable" (used for the built-in demo upstream).
pub const SELF_COMMAND: &str = "@self";

/// The program that sandboxes a stdio upstream (Debian package `bubblewrap`).
pub const BWRAP: &str = "bwrap";
/// Consecutive failed calls that open an upstream's breaker.
pub const DEFAULT_BREAKER_CONSECUTIVE_FAILURES: u32 = 5;
/// Failure share over the window that opens the breaker.
pub const DEFAULT_BREAKER_FAILURE_RATIO: f64 = 0.5;
/// Calls the failure ratio is computed over.
pub const DEFAULT_BREAKER_WINDOW_CALLS: u32 = 20;
/// Fewest calls in the window before the ratio counts.
pub const DEFAULT_BREAKER_MIN_CALLS: u32 = 10;
/// How long an open breaker fails fast before probing.
pub const DEFAULT_BREAKER_COOLDOWN_MS: u64 = 10_000;
/// Probe calls let through while half-open.
pub const DEFAULT_BREAKER_HALF_OPEN_PROBES: u32 = 1;
/// Attempts in total for calls that are safe to repeat (1 = no retries).
pub const DEFAULT_RETRY_ATTEMPTS: u32 = 3;
/// First retry delay; doubles per retry.
pub const DEFAULT_RETRY_BASE_MS: u64 = 100;
/// Ceiling of the retry delay (before jitter).
pub const DEFAULT_RETRY_MAX_MS: u64 = 2_000;
/// Random extra delay added to each retry, at most.
pub const DEFAULT_RETRY_JITTER_MS: u64 = 100;
/// How long a result recorded under an idempotency key is returned for repeats.
pub const DEFAULT_IDEMPOTENCY_TTL_MS: u64 = 600_000;
/// How long shutdown waits for calls in flight before closing sessions and upstreams.
pub const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 30_000;
/// How long a sealed handshake-era session id may be presented (to any replica).
pub const DEFAULT_SESSION_TTL_MS: u64 = 86_400_000;
/// How long a pagination cursor stays valid.
pub const DEFAULT_CURSOR_TTL_MS: u64 = 600_000;
/// How long a parked call waits for the client's `inputResponses` (MRTR synthesis).
pub const DEFAULT_INPUT_WAIT_MS: u64 = 120_000;
/// Most calls parked at once waiting for a client's input.
pub const DEFAULT_MAX_PARKED_CALLS: usize = 1_000;
/// Address of the admin API when `[admin] listen` is not set.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:8939";
/// How long a plan waiting for approval stays valid (15 minutes: long enough for a human).
pub const DEFAULT_PLAN_TTL_MS: u64 = 900_000;
/// Most plans waiting for approval at once.
pub const DEFAULT_MAX_PENDING_PLANS: usize = 1_000;
/// How often a handshake-era http/sse/peer upstream is pinged to see that it still answers.
pub const DEFAULT_HEALTH_INTERVAL_MS: u64 = 10_000;
/// How long a client may take to send request headers (and an idle connection stays open).
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 30_000;
/// How long a client may take to send a request body.
pub const DEFAULT_BODY_READ_TIMEOUT_MS: u64 = 30_000;
/// How long a TLS handshake may take.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// Most client connections at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Most admin connections at once: operators and a console, not the public.
pub const DEFAULT_ADMIN_MAX_CONNECTIONS: usize = 256;
/// Most handshake-era sessions open at once (initialized or not).
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;

/// `retry` of session SSE streams (rmcp's default).
pub const DEFAULT_SSE_RETRY_MS: u64 = 3_000;
/// A session call unanswered this long gets a resumable stream instead of a JSON body.
pub const DEFAULT_STREAM_AFTER_MS: u64 = 50;
/// rmcp's session keep-alive: five minutes.
pub const DEFAULT_SESSION_IDLE_MS: u64 = 300_000;
/// Events a session stream keeps for a reconnecting client.
pub const DEFAULT_REPLAY_EVENTS: usize = 64;
/// Bytes a session stream keeps for a reconnecting client.
pub const DEFAULT_REPLAY_BYTES: usize = 1 << 20;
/// How long a session stream's events stay resumable.
pub const DEFAULT_REPLAY_MS: u64 = 60_000;
/// Bytes of results recorded under idempotency keys.
pub const DEFAULT_IDEMPOTENCY_MAX_BYTES: usize = 64 << 20;

/// People an upstream with a per-user credential is connected as at once.
pub const DEFAULT_PERSON_SESSIONS: usize = 1000;
/// How long a person's connection to such an upstream stays open without a call.
pub const DEFAULT_PERSON_SESSION_IDLE_MS: u64 = 600_000;
