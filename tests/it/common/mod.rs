//! Test support: a real fedgate process on a free port, real upstreams, real MCP clients.
#![allow(dead_code)]
#![allow(deprecated)] // the test client answers roots/list, deprecated by SEP-2577 but in use

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use parking_lot::Mutex;
use rmcp::{
    ClientHandler, ErrorData as McpError, RoleClient,
    model::*,
    service::{
        ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext, RunningService,
    },
    transport::StreamableHttpClientTransport,
};
use tokio::sync::Notify;

pub mod agent;
pub mod browser;
pub mod flows;
pub mod raw;
pub mod round_robin;
pub mod stores;

/// Every reqwest client of a test process (rmcp's included) uses rustls with ring, as fedgate
/// does; the provider is chosen once per process, before any test runs.
#[ctor::ctor(unsafe)]
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub const FEDGATE: &str = env!("CARGO_BIN_EXE_fedgate");
/// The test servers the product does not ship (`testkit/`): built beside `fedgate` by
/// `cargo test --workspace` (scripts/test.sh).
pub static TESTKIT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let path = std::path::Path::new(FEDGATE).with_file_name("fedgate-testkit");
    assert!(
        path.is_file(),
        "{} is missing: run the tests with `cargo test --workspace` (scripts/test.sh)",
        path.display()
    );
    path.to_string_lossy().into_owned()
});

/// A free loopback port (bound then released; the OS does not hand it out again at once).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// TOML for a stdio demo upstream, its test tools (`--faults`) included; served by
/// `fedgate-testkit`, so `extra_args` may hold its test modes (`--crash-after`, …).
pub fn stdio_upstream(name: &str, extra_args: &[&str], extra_toml: &str) -> String {
    let mut args = vec![
        "demo-upstream".to_owned(),
        "--faults".into(),
        "--name".into(),
        name.into(),
    ];
    args.extend(extra_args.iter().map(|s| s.to_string()));
    format!(
        "[upstreams.{name}]\nkind = \"stdio\"\ncommand = {cmd:?}\nargs = {args:?}\n{extra_toml}\n",
        cmd = *TESTKIT
    )
}

/// A fedgate subcommand that serves HTTP on a port it picked itself and prints its URL first;
/// killed on drop. Binding port 0 in the server avoids racing other tests for a "free" port.
pub struct UrlProcess {
    child: Child,
    pub url: String,
}

impl UrlProcess {
    pub fn start(args: &[&str]) -> UrlProcess {
        Self::start_program(FEDGATE, args)
    }

    /// A `fedgate-testkit` subcommand (the demo with its test modes, the guardrail service).
    pub fn testkit(args: &[&str]) -> UrlProcess {
        Self::start_program(&TESTKIT, args)
    }

    /// The conformance fixture of `fedgate-testkit`.
    pub fn fixture() -> UrlProcess {
        Self::start_program(&TESTKIT, &["conformance-fixture", "--http", "127.0.0.1:0"])
    }

    /// Any program whose first stdout line names its URL.
    pub fn start_program(program: &str, args: &[&str]) -> UrlProcess {
        let mut child = Command::new(program)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn fedgate subcommand");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = lines
            .next()
            .and_then(Result::ok)
            .expect("ready line with a URL");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {line}"))
            .to_owned();
        std::thread::spawn(move || for _ in lines {});
        UrlProcess { child, url }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for UrlProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A demo upstream serving HTTP; `mode` is `--http` or `--sse`.
pub struct HttpDemo;

impl HttpDemo {
    pub fn start(name: &str, mode: &str) -> UrlProcess {
        UrlProcess::start(&[
            "demo-upstream",
            "--faults",
            "--name",
            name,
            mode,
            "127.0.0.1:0",
        ])
    }
}

/// TOML for a Streamable HTTP demo upstream, and the server behind it (keep it alive).
pub fn http_upstream(name: &str, extra_toml: &str) -> (String, UrlProcess) {
    let demo = HttpDemo::start(name, "--http");
    let toml = format!(
        "[upstreams.{name}]\nkind = \"http\"\nurl = \"{}\"\n{extra_toml}\n",
        demo.url
    );
    (toml, demo)
}

/// A running `fedgate serve`; killed (with its upstreams) on drop.
pub struct Gateway {
    pub child: Child,
    pub url: String,
    pub base: String,
    /// Base URL of the admin listener, when `[admin]` is configured.
    pub admin: Option<String>,
    pub dir: tempfile::TempDir,
    pub stderr_path: PathBuf,
    /// The ready line fedgate printed.
    pub ready: String,
}

impl Gateway {
    /// Writes `config`, starts fedgate on a free port and waits for its ready line.
    pub fn start(config: &str) -> Gateway {
        Self::start_env(config, &[])
    }

    /// Like `start`, with extra environment for the fedgate process (e.g. secrets).
    pub fn start_env(config: &str, env: &[(&str, &str)]) -> Gateway {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("gateway.toml");
        std::fs::write(&cfg, config).expect("write config");
        Self::spawn(&cfg, dir, env)
    }

    pub fn start_file(cfg: &Path, dir: tempfile::TempDir) -> Gateway {
        Self::spawn(cfg, dir, &[])
    }

    /// Like `start_file`, with extra environment for the fedgate process.
    pub fn start_file_env(cfg: &Path, dir: tempfile::TempDir, env: &[(&str, &str)]) -> Gateway {
        Self::spawn(cfg, dir, env)
    }

    /// Like `start_file`, listening on `listen` (a restarted gateway keeps its address).
    pub fn start_file_at(cfg: &Path, dir: tempfile::TempDir, listen: &str) -> Gateway {
        Self::spawn_at(cfg, dir, &[], listen)
    }

    /// Like `start_file_env`, listening on `listen`.
    pub fn start_file_env_at(
        cfg: &Path,
        dir: tempfile::TempDir,
        env: &[(&str, &str)],
        listen: &str,
    ) -> Gateway {
        Self::spawn_at(cfg, dir, env, listen)
    }

    fn spawn(cfg: &Path, dir: tempfile::TempDir, env: &[(&str, &str)]) -> Gateway {
        Self::spawn_at(cfg, dir, env, "127.0.0.1:0")
    }

    /// Like `start`, with at most `nofile` open file descriptors for the fedgate process.
    pub fn start_fd_limited(config: &str, nofile: u64, env: &[(&str, &str)]) -> Gateway {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("gateway.toml");
        std::fs::write(&cfg, config).expect("write config");
        // `exec` keeps the pid: the gateway's Drop signals fedgate itself.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "ulimit -n \"$0\" && exec \"$@\""])
            .arg(nofile.to_string())
            .arg(FEDGATE);
        Self::spawn_cmd(cmd, &cfg, dir, env, "127.0.0.1:0")
    }

    fn spawn_at(cfg: &Path, dir: tempfile::TempDir, env: &[(&str, &str)], listen: &str) -> Gateway {
        Self::spawn_cmd(Command::new(FEDGATE), cfg, dir, env, listen)
    }

    fn spawn_cmd(
        mut cmd: Command,
        cfg: &Path,
        dir: tempfile::TempDir,
        env: &[(&str, &str)],
        listen: &str,
    ) -> Gateway {
        let stderr_path = dir.path().join("fedgate.stderr");
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let mut child = cmd
            .args(["serve", "--config"])
            .arg(cfg)
            .args(["--listen", listen])
            .env("FEDGATE_LOG", "info,rmcp=warn,rmcp::transport::worker=off")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn fedgate");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = lines.next().and_then(Result::ok).unwrap_or_else(|| {
            panic!(
                "fedgate exited before its ready line: {}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            )
        });
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://") || w.starts_with("https://"))
            .unwrap_or_else(|| panic!("no address in ready line: {line}"))
            .to_owned();
        let base = url.trim_end_matches("/mcp").to_owned();
        let admin = line
            .split("admin at ")
            .nth(1)
            .and_then(|s| s.split(|c: char| c == ')' || c.is_whitespace()).next())
            .map(|s| s.trim_end_matches("/admin").to_owned());
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Gateway {
            child,
            url,
            base,
            admin,
            dir,
            stderr_path,
            ready: line,
        }
    }

    /// Waits (at most `secs`) until fedgate's log holds `needle`; the log.
    pub async fn wait_stderr(&self, needle: &str, secs: u64) -> String {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let log = self.stderr();
            if log.contains(needle) {
                return log;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no `{needle}` in the log within {secs} s:\n{log}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub async fn readyz(&self) -> (u16, serde_json::Value) {
        let r = reqwest::get(format!("{}/readyz", self.base))
            .await
            .expect("readyz");
        let status = r.status().as_u16();
        (status, r.json().await.expect("readyz json"))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `/readyz` as a caller with bearer `token` (with `[auth]`, the details need one).
    pub async fn readyz_as(&self, token: &str) -> serde_json::Value {
        reqwest::Client::new()
            .get(format!("{}/readyz", self.base))
            .bearer_auth(token)
            .send()
            .await
            .expect("readyz")
            .json()
            .await
            .expect("readyz json")
    }

    /// The Prometheus text of the main listener's `/metrics`.
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.base))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// `/metrics` as a caller with bearer `token` (with `[auth]` it needs credentials).
    pub async fn metrics_as(&self, token: &str) -> String {
        reqwest::Client::new()
            .get(format!("{}/metrics", self.base))
            .bearer_auth(token)
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// Opens a handshake-era session with a raw `initialize` POST; its (sealed) session id.
    pub async fn raw_session(&self) -> String {
        let init = reqwest::Client::new()
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#)
            .send()
            .await
            .expect("initialize");
        init.headers()["mcp-session-id"]
            .to_str()
            .expect("a session id")
            .to_owned()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// What the test client saw from the server.
#[derive(Debug, Default)]
pub struct Seen {
    pub progress: Mutex<Vec<ProgressNotificationParam>>,
    pub tools_changed: Notify,
    pub tool_changes: Mutex<u32>,
    pub resource_updates: Mutex<Vec<String>>,
    pub updated: Notify,
    pub elicitations: Mutex<Vec<String>>,
    /// `notifications/message` data, in arrival order.
    pub logs: Mutex<Vec<String>>,
    pub logged: Notify,
}

/// An rmcp client handler that records notifications and answers elicitation with a name.
#[derive(Debug, Clone)]
pub struct TestClient {
    pub seen: Arc<Seen>,
    pub answer_name: String,
    /// Answer elicitations with `decline` instead of `accept`.
    pub decline: bool,
}

impl TestClient {
    pub fn new() -> Self {
        Self {
            seen: Arc::default(),
            answer_name: "ada".into(),
            decline: false,
        }
    }
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        #[allow(deprecated)]
        let caps = ClientCapabilities::builder()
            .enable_elicitation()
            .enable_roots()
            .enable_sampling()
            .build();
        ClientConfig::new(caps, Implementation::new("fedgate-test", "0"))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let msg = match &params {
            ElicitRequestParams::FormElicitationParams { message, .. } => message.clone(),
            _ => String::new(),
        };
        self.seen.elicitations.lock().push(msg);
        let answer = if self.decline {
            serde_json::json!({"action": "decline"})
        } else {
            serde_json::json!({"action": "accept", "content": {"name": self.answer_name}})
        };
        Ok(serde_json::from_value(answer).unwrap())
    }

    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        Ok(serde_json::from_value(serde_json::json!({
            "role": "assistant",
            "content": {"type": "text", "text": "hi from rmcp"},
            "model": "test-model",
            "stopReason": "endTurn"
        }))
        .unwrap())
    }

    async fn list_roots(
        &self,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        Ok(serde_json::from_value(
            serde_json::json!({"roots": [{"uri": "file:///work/project", "name": "project"}]}),
        )
        .unwrap())
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        self.seen.progress.lock().push(params);
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        let data = params.data.as_str().unwrap_or_default().to_owned();
        self.seen.logs.lock().push(data);
        self.seen.logged.notify_one();
    }

    async fn on_tool_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        *self.seen.tool_changes.lock() += 1;
        self.seen.tools_changed.notify_waiters();
        self.seen.tools_changed.notify_one();
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        self.seen.resource_updates.lock().push(params.uri);
        self.seen.updated.notify_one();
    }
}

pub type Client = RunningService<RoleClient, TestClient>;

/// Connects with the handshake-era lifecycle (`initialize`, sessions).
pub async fn connect_legacy(url: &str, handler: TestClient) -> Client {
    handler
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(url.to_owned()),
            ClientLifecycleMode::Initialize,
        )
        .await
        .expect("legacy client connects")
}

/// Connects with the handshake-era lifecycle, sending `Authorization: Bearer <token>`.
pub async fn connect_with_token(
    url: &str,
    token: &str,
    handler: TestClient,
) -> Result<Client, String> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let cfg =
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned());
    handler
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(cfg),
            ClientLifecycleMode::Initialize,
        )
        .await
        .map_err(|e| e.to_string())
}

/// Connects with the stateless 2026-07-28 lifecycle (`server/discover`).
pub async fn connect_modern(url: &str, handler: TestClient) -> Client {
    handler
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(url.to_owned()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("modern client connects")
}

/// A path inside the repository.
pub fn repo(path: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

pub fn args(v: serde_json::Value) -> JsonObject {
    v.as_object().cloned().unwrap_or_default()
}

pub fn first_text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_default()
}

pub async fn call(
    client: &Client,
    tool: &str,
    a: serde_json::Value,
) -> Result<CallToolResult, rmcp::ServiceError> {
    client
        .peer()
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args(a)))
        .await
}

/// Calls a tool with request `_meta` of the caller's choosing (trace context, log level).
pub async fn call_with_meta(
    client: &Client,
    params: CallToolRequestParams,
    meta: RequestMetaObject,
) -> ServerResult {
    let req = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    client
        .peer()
        .send_request_with_option(
            req,
            rmcp::service::PeerRequestOptions::no_options().with_meta(meta),
        )
        .await
        .unwrap()
        .await_response()
        .await
        .unwrap()
}

/// Waits (bounded) until `cond` holds, checking after each notification.
pub async fn wait_for(notify: &Notify, what: &str, mut cond: impl FnMut() -> bool) {
    let fut = async {
        while !cond() {
            notify.notified().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

/// Whether a process is still alive (not a zombie either).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// What a refused or failed call told the agent, whichever way it travelled: a tool result
/// with `isError: true` carrying the plan envelope (refusals the model can act on), or a
/// JSON-RPC error (unknown tools, protocol failures; the plan is in its data).
pub trait Refused {
    /// The refusal as text: the plan's JSON for a tool result, the error's display otherwise.
    fn refused(self) -> String;
}

impl<T: serde::Serialize + std::fmt::Debug> Refused for Result<T, rmcp::ServiceError> {
    fn refused(self) -> String {
        match self {
            Err(e) => {
                if let rmcp::ServiceError::McpError(e) = &e
                    && let Some(plan) = e.data.as_ref().and_then(|d| d.get(PLAN_KEY))
                {
                    valid_plan(plan.clone());
                }
                e.to_string()
            }
            Ok(r) => {
                let v = serde_json::to_value(&r).unwrap_or_default();
                assert_eq!(v["isError"], true, "expected a refusal, got {r:?}");
                match v["_meta"].get(PLAN_KEY) {
                    Some(plan) => valid_plan(plan.clone()).to_string(),
                    None => v["content"][0]["text"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                }
            }
        }
    }
}

/// [`Refused`] for a call still to be awaited.
#[allow(async_fn_in_trait)]
pub trait RefusedNow {
    async fn refused_now(self) -> String;
}

impl<F, T> RefusedNow for F
where
    F: std::future::Future<Output = Result<T, rmcp::ServiceError>>,
    T: serde::Serialize + std::fmt::Debug,
{
    async fn refused_now(self) -> String {
        self.await.refused()
    }
}

/// Where fedgate puts the plan envelope in `_meta` and `error.data`.
pub const PLAN_KEY: &str = "io.fedgate/orchestrated_plan";

/// The published schema of the plan envelope, compiled once per test binary.
static PLAN_SCHEMA: std::sync::LazyLock<jsonschema::Validator> = std::sync::LazyLock::new(|| {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/schemas/orchestrated_plan.v1.json"
    ))
    .expect("the schema is in the repository");
    jsonschema::validator_for(&serde_json::from_str(&text).expect("the schema is JSON"))
        .expect("the schema compiles")
});

/// Asserts that `plan` matches `schemas/orchestrated_plan.v1.json`, and returns it. Every plan a
/// test reads goes through here.
pub fn valid_plan(plan: serde_json::Value) -> serde_json::Value {
    let errors: Vec<String> = PLAN_SCHEMA
        .iter_errors(&plan)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?} in {plan}");
    plan
}

/// The plan in a tool result's `_meta`, checked against the schema.
pub fn plan_of(r: &CallToolResult) -> serde_json::Value {
    let plan = r
        .meta
        .as_ref()
        .and_then(|m| m.0.get(PLAN_KEY))
        .cloned()
        .unwrap_or_else(|| panic!("no plan in {r:?}"));
    valid_plan(plan)
}

/// `s` with every correlation id (32 hex digits after `"correlation_id":"`) blanked, so two
/// answers can be compared whole.
pub fn without_correlation_ids(s: &str) -> String {
    const KEY: &str = "\"correlation_id\":\"";
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(KEY) {
        let start = i + KEY.len();
        out.push_str(&rest[..start]);
        rest = rest.get(start + 32..).unwrap_or_default();
    }
    out.push_str(rest);
    out
}

/// Asserts every name matches `^[a-zA-Z0-9_-]{1,64}$` (what function-calling APIs accept).
pub fn assert_portable<'a>(names: impl IntoIterator<Item = &'a str>) {
    for n in names {
        assert!(
            !n.is_empty()
                && n.len() <= 64
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "`{n}` is not a portable name"
        );
    }
}

/// Runs a client script of the repository (`program script args…`) and parses the one JSON
/// object it prints.
pub fn script_report(program: &str, script: &str, args: &[&str]) -> serde_json::Value {
    let repo = |p: &str| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(p);
    let (program, script) = (repo(program), repo(script));
    assert!(
        program.exists() && script.exists(),
        "{} or {} is missing: run `bash scripts/test.sh` (README's test command)",
        program.display(),
        script.display()
    );
    let out = std::process::Command::new(&program)
        .arg(&script)
        .args(args)
        .output()
        .expect("run the client script");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Seconds since the epoch, as JWT claims count time.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A JWT of `claims` signed with HS256 and `secret`.
pub fn hs256(claims: serde_json::Value, secret: &str) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    )
    .unwrap()
}
