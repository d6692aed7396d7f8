//! `[upstreams.NAME]`: transports, names, tiers, credentials and restarts of each upstream.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Duration,
};

use globset::Glob;
use http::HeaderName;
use toml::Spanned;

use super::{Ctx, build_globs, parse_prefix};
use crate::{
    config::{
        RawBreaker, RawLaunch, RawUpstream,
        defaults::*,
        snapshot::{
            Diagnostic, Era, Injection, ProcessSpec, RestartPolicy, Sandbox, TransportSpec,
            UpstreamSpec,
        },
        tier,
    },
    names::{self as namespace, PrefixMode},
    policy::{
        breaker::{BreakerConfig, DEFAULT_FAILURE_CLASSES, FailureClass},
        retry::RetryPolicy,
        token::{Credential, Placement},
        trust::Tier,
    },
};

pub(super) fn validate_upstream(
    cx: &mut Ctx<'_>,
    name: &Spanned<String>,
    up: &Spanned<RawUpstream>,
    naming: &namespace::Naming,
    default_prefix: PrefixMode,
    all_names: &[String],
    across: &mut Across<'_>,
) -> Option<UpstreamSpec> {
    let Across {
        bare_aliases,
        tiers,
        credentials,
        hooks,
        envelope,
    } = across;
    let separator = naming.separator.as_str();
    let errors_before = cx.errors.len();
    let at = name.span().start;
    let name_s = name.get_ref().clone();
    let u = up.get_ref();
    if name_s.is_empty() || !name_s.chars().all(namespace::is_name_char) {
        cx.err_at(
            at,
            format!("invalid upstream name `{name_s}`: use A-Z a-z 0-9 _ - ."),
        );
    } else if name_s == namespace::OWN_NAMESPACE {
        cx.err_at(
            at,
            format!("upstream name `{name_s}` is reserved for the gateway's own tools"),
        );
    } else if name_s == crate::config::flows::FLOWS_NAMESPACE {
        cx.err_at(
            at,
            format!("upstream name `{name_s}` is reserved for the gateway's flows"),
        );
    } else if !separator.is_empty() && name_s.contains(separator) {
        cx.err_at(
            at,
            format!(
                "invalid upstream name `{name_s}`: it contains the separator `{separator}`, \
                 so `{name_s}{separator}tool` would not split one way"
            ),
        );
    } else if naming.rule == namespace::NameRule::Portable
        && let Some(why) = namespace::unportable(&name_s)
    {
        cx.err_at(
            at,
            format!(
                "upstream name `{name_s}` {why}: names = \"portable\" (the default) exposes only \
                 A-Z a-z 0-9 _ -; rename the upstream, or set [gateway] names = \"mcp\""
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
                    if !crate::config::command::found(c.get_ref(), u.cwd.as_deref()) {
                        cx.warn_at(
                            c.span().start,
                            format!(
                                "upstream `{name_s}`: command `{}` is not on PATH here: the \
                                 upstream will fail to start unless it is installed (or PATH \
                                 differs where fedgate runs)",
                                crate::names::shown(c.get_ref())
                            ),
                        );
                    }
                    check_env(cx, kind_at, &name_s, &u.env, u.inherit_env);
                    let sandbox = u
                        .sandbox
                        .as_ref()
                        .and_then(|s| sandbox(cx, kind_at, &name_s, s, u.cwd.as_deref()));
                    Some(TransportSpec::Stdio(ProcessSpec {
                        command: c.get_ref().clone(),
                        args: u.args.clone(),
                        env: crate::secret::configured(u.env.clone()),
                        inherit_env: u.inherit_env,
                        cwd: u.cwd.clone(),
                        sandbox,
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
        "http" | "sse" | "peer" => {
            if let Some(c) = &u.command {
                cx.err_at(
                    c.span().start,
                    format!("upstream `{name_s}`: `command` does not apply to kind {kind}; use `launch` to have fedgate start the server"),
                );
            }
            if !u.args.is_empty() || !u.env.is_empty() || u.cwd.is_some() || u.sandbox.is_some() {
                cx.err_at(
                    kind_at,
                    format!(
                        "upstream `{name_s}`: `args`, `env`, `cwd` and `sandbox` do not apply to \
                         kind {kind}"
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
                    let (url, headers) = (s.clone(), crate::secret::configured(u.headers.clone()));
                    Some(if kind == "http" || kind == "peer" {
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
                format!("upstream `{name_s}`: kind `{other}` is not one of stdio, http, sse, peer"),
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
        // Under the portable rule a name that does not fit gets its portable form instead.
        if naming.rule == namespace::NameRule::Mcp
            && let Err(why) = namespace::check_tool_name(&exposed)
        {
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
            // The field's own line, not the table's.
            let at = field_offset(cx.text, up.span(), what).unwrap_or(up.span().start);
            cx.err_at(
                at,
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
                tiers.refuse(cx, t, &format!("upstream `{name_s}`"), diags);
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
        // A person's token travels per request: only Streamable HTTP carries one per request,
        // and a peer gateway gets no credential across the hop (it asks its own callers).
        if cred.per_user().is_some() && kind != "http" {
            cx.err_at(
                c.span().start,
                format!(
                    "upstream `{name_s}`: per-user credential `{}` needs a Streamable HTTP upstream (kind = \"http\"){}",
                    cred.name,
                    if kind == "peer" { "; a peer gateway asks its own callers for theirs" } else { "" }
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
    for (tool, t) in &u.tools {
        for g in &t.get_ref().touches_files {
            if let Err(e) = Glob::new(g) {
                cx.err_at(
                    t.span().start,
                    format!(
                        "upstream `{name_s}`, tool `{tool}`: bad touches_files glob `{g}`: {}",
                        e.kind()
                    ),
                );
            }
        }
    }
    let hook_names = u.guardrails.hooks.as_ref().unwrap_or(&tier.guardrail_hooks);
    let mut guardrail_hooks = Vec::new();
    for h in hook_names {
        match hooks.get(h) {
            Some(hook) => guardrail_hooks.push(hook.clone()),
            None => cx.err_at(
                at,
                format!(
                    "upstream `{name_s}` (or its tier `{}`): unknown guardrail hook `{h}`; \
                     define it as [guardrail_hooks.{h}]",
                    tier.name
                ),
            ),
        }
    }
    let guardrails = u.guardrails.over(&tier.guardrails).unwrap_or_else(|e| {
        cx.err_at(at, format!("upstream `{name_s}`: guardrails: {e}"));
        tier.guardrails.clone()
    });
    let person_sessions = person_sessions(cx, at, &name_s, u);
    Some(UpstreamSpec {
        person_sessions,
        guardrail_hooks,
        envelope: u.envelope.unwrap_or(*envelope),
        validate_arguments: u.validate_arguments.unwrap_or(true),
        guardrails,
        idempotency_keys: u.idempotency_keys,
        peer: kind == "peer",
        tls: super::upstream_tls::upstream_tls(cx, &name_s, u, kind),
        tools: u
            .tools
            .iter()
            .map(|(k, v)| (k.clone(), v.get_ref().clone()))
            .collect(),
        credential,
        tier,
        writable: u.writable.iter().cloned().collect(),
        read_only: u.read_only.iter().cloned().collect(),
        long_running: u.long_running.iter().cloned().collect(),
        pins: u.pins.clone(),
        breaker: breaker_config(u.breaker.clone().unwrap_or_default()),
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
        health_interval: match u.health_interval_ms.unwrap_or(DEFAULT_HEALTH_INTERVAL_MS) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        },
        restart: RestartPolicy {
            max_restarts: restart.max_restarts.unwrap_or(DEFAULT_MAX_RESTARTS),
            base: Duration::from_millis(base_ms),
            max: Duration::from_millis(max_ms.max(base_ms)),
        },
    })
}

/// `person_sessions`: at least one person and one millisecond.
fn person_sessions(
    cx: &mut Ctx<'_>,
    at: usize,
    name: &str,
    u: &RawUpstream,
) -> crate::config::snapshot::PersonSessionLimits {
    let raw = u.person_sessions.unwrap_or_default();
    if raw.max == Some(0) || raw.idle_ms == Some(0) {
        cx.err_at(
            at,
            format!("upstream `{name}`: person_sessions `max` and `idle_ms` must be at least 1"),
        );
    }
    crate::config::snapshot::PersonSessionLimits {
        max: raw.max.unwrap_or(DEFAULT_PERSON_SESSIONS).max(1),
        idle: Duration::from_millis(raw.idle_ms.unwrap_or(DEFAULT_PERSON_SESSION_IDLE_MS).max(1)),
    }
}

/// State shared by the validation of all upstreams.
pub(super) struct Across<'a> {
    /// Exposed `never`-prefix aliases -> (upstream, line), for collision checks.
    pub(super) bare_aliases: &'a mut HashMap<String, (String, usize)>,
    pub(super) tiers: &'a mut Tiers,
    pub(super) credentials: &'a BTreeMap<String, Arc<Credential>>,
    /// `[guardrail_hooks]`, by name.
    pub(super) hooks: &'a BTreeMap<String, Arc<crate::guard::hook::Hook>>,
    /// `[gateway] envelope`, for upstreams that set none.
    pub(super) envelope: crate::envelope::Mode,
}

/// Tier files, each loaded once per config load.
pub(super) struct Tiers {
    pub(super) dir: std::path::PathBuf,
    pub(super) loaded: HashMap<String, Result<Arc<Tier>, Vec<Diagnostic>>>,
}

impl Tiers {
    /// For a tier that exists nowhere (not built in, no file in the tier folder): a message
    /// listing the tiers that do, with a likely misspelling named.
    pub(super) fn unknown(&self, name: &str) -> Option<String> {
        if tier::BUILT_IN.iter().any(|(n, _)| *n == name)
            || self.dir.join(format!("{name}.toml")).exists()
        {
            return None;
        }
        let mut known: Vec<String> = tier::BUILT_IN.iter().map(|(n, _)| n.to_string()).collect();
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "toml")
                    && let Some(stem) = p.file_stem().and_then(|s| s.to_str())
                {
                    known.push(stem.to_owned());
                }
            }
        }
        known.sort();
        known.dedup();
        let hint = crate::names::did_you_mean(name, known.iter().map(String::as_str));
        Some(format!(
            "unknown trust tier `{}`: known tiers are {} (high, medium and low are built in; \
             others are *.toml files in {}){hint}",
            crate::names::shown(name),
            known.join(", "),
            self.dir.display()
        ))
    }

    /// Reports why tier `t` cannot be used by `who`: the known tiers when it exists nowhere,
    /// else that it is not usable, with the tier file's own problems.
    pub(super) fn refuse(
        &self,
        cx: &mut Ctx<'_>,
        t: &toml::Spanned<String>,
        who: &str,
        diags: Vec<Diagnostic>,
    ) {
        match self.unknown(t.get_ref()) {
            Some(why) => cx.err_at(t.span().start, format!("{who}: {why}")),
            None => {
                cx.err_at(
                    t.span().start,
                    format!("{who}: trust tier `{}` is not usable", t.get_ref()),
                );
                cx.errors.extend(diags);
            }
        }
    }

    pub(super) fn get(&mut self, name: &str) -> Result<Arc<Tier>, Vec<Diagnostic>> {
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
        count: {
            let mut count = b.count.unwrap_or_else(|| DEFAULT_FAILURE_CLASSES.to_vec());
            if b.count_is_error && !count.contains(&FailureClass::IsError) {
                count.push(FailureClass::IsError);
            }
            count
        },
    }
}

fn process_from_launch(l: RawLaunch) -> ProcessSpec {
    ProcessSpec {
        command: l.command,
        args: l.args,
        env: crate::secret::configured(l.env),
        inherit_env: l.inherit_env,
        cwd: None,
        sandbox: None,
    }
}

/// A sandbox the process can run in: `bwrap` is here, every path is absolute and exists, the
/// working directory is one of them, limits are at least 1.
fn sandbox(
    cx: &mut Ctx<'_>,
    at: usize,
    upstream: &str,
    raw: &crate::config::RawSandbox,
    cwd: Option<&str>,
) -> Option<Sandbox> {
    let before = cx.errors.len();
    if !crate::config::command::found(BWRAP, None) {
        cx.err_at(
            at,
            format!(
                "upstream `{upstream}`: its sandbox needs bubblewrap (`bwrap`), which is not on \
                 PATH here: install it (Debian: apt install bubblewrap) or remove the sandbox"
            ),
        );
    }
    let mut paths = |list: &[Spanned<String>], what: &str| -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for p in list {
            let path = std::path::PathBuf::from(p.get_ref());
            let shown = crate::names::shown(p.get_ref());
            if !path.is_absolute() {
                cx.err_at(
                    p.span().start,
                    format!(
                        "upstream `{upstream}`: sandbox {what} path `{shown}` must be absolute"
                    ),
                );
            } else if !path.exists() {
                cx.err_at(
                    p.span().start,
                    format!("upstream `{upstream}`: sandbox {what} path `{shown}` does not exist"),
                );
            } else {
                out.push(path);
            }
        }
        out
    };
    let read = paths(&raw.read, "read");
    let write = paths(&raw.write, "write");
    if let Some(dir) = cwd
        && !read
            .iter()
            .chain(&write)
            .any(|p| std::path::Path::new(dir).starts_with(p))
    {
        cx.err_at(
            at,
            format!(
                "upstream `{upstream}`: its working directory `{}` is not among its sandbox's \
                 `read` or `write` paths, so the process could not start there",
                crate::names::shown(dir)
            ),
        );
    }
    let mut limit = |v: &Option<Spanned<u64>>, what: &str| -> Option<u64> {
        let v = v.as_ref()?;
        if *v.get_ref() == 0 {
            cx.err_at(
                v.span().start,
                format!("upstream `{upstream}`: sandbox `{what}` must be at least 1"),
            );
        }
        Some(*v.get_ref())
    };
    let memory_mb = limit(&raw.memory_mb, "memory_mb");
    let cpu_seconds = limit(&raw.cpu_seconds, "cpu_seconds");
    let open_files = limit(&raw.open_files, "open_files");
    (cx.errors.len() == before).then_some(Sandbox {
        read,
        write,
        network: raw.network,
        memory_mb,
        cpu_seconds,
        open_files,
    })
}

/// A process's environment: every reference must resolve where fedgate runs (the process
/// would not start), and inheriting fedgate's whole environment is said out loud.
fn check_env(
    cx: &mut Ctx<'_>,
    at: usize,
    upstream: &str,
    env: &std::collections::BTreeMap<String, String>,
    inherit: bool,
) {
    for (k, v) in env {
        if crate::secret::is_reference(v)
            && let Err(why) = crate::secret::resolve(v)
        {
            cx.secret_problem(at, format!("upstream `{upstream}`: env `{k}`: {why}"));
        }
    }
    if inherit {
        cx.warn_at(
            at,
            format!(
                "upstream `{upstream}`: inherit_env = true: the process sees every variable \
                 fedgate was started with, secrets of other upstreams included; list what it \
                 needs in `env` instead"
            ),
        );
    }
}

/// Where `key = …` starts inside the table spanning `span` of `text` (serde hands plain fields
/// over without their position).
fn field_offset(text: &str, span: std::ops::Range<usize>, key: &str) -> Option<usize> {
    // A table's span may cover only its `[header]`: search on to the next header.
    let rest = text.get(span.start..)?;
    let end = rest
        .match_indices("\n[")
        .map(|(i, _)| i)
        .find(|&i| span.start + i >= span.end)
        .unwrap_or(rest.len());
    let body = rest.get(..end)?;
    let mut offset = 0;
    for line in body.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            return Some(span.start + offset + (line.len() - trimmed.len()));
        }
        offset += line.len();
    }
    None
}
