//! `[cluster]`: the shared stores several replicas use (F16). Without the section every store
//! is embedded and per process, as on a single gateway.

use crate::config::Invalid;
use std::time::Duration;

use serde::Deserialize;

use crate::secret::{self, Secret};

/// `[cluster]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// Redis for rate limits, idempotency records and approval plans: `redis://host:port/db`,
    /// or a secret reference (`env:NAME`, `file:PATH`) when the URL holds a password.
    pub redis: Option<String>,
    /// PostgreSQL for flow runs: a secret reference to a `postgres://…` URL (or a URL without
    /// a password).
    pub postgres: Option<String>,
    /// When Redis does not answer: `local` (per-replica limits and records, counted and logged)
    /// or `closed` (refuse what needs it). Default `local`.
    pub fail: Option<String>,
    /// Longest one store operation may take before it counts as a failure (default 250 ms).
    pub timeout_ms: Option<u64>,
    /// Prefix of every Redis key (default `fedgate:`), so gateways can share one Redis.
    pub key_prefix: Option<String>,
    /// How long a replica's claim on a flow run lasts without renewal (default 15 s).
    pub lease_ms: Option<u64>,
}

/// What a replica does when the shared store does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    Local,
    Closed,
}

/// `[cluster]` after validation.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    pub redis: Option<Secret>,
    pub postgres: Option<Secret>,
    pub fail: FailMode,
    pub timeout: Duration,
    pub key_prefix: String,
    pub lease: Duration,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            redis: None,
            postgres: None,
            fail: FailMode::Local,
            timeout: Duration::from_millis(250),
            key_prefix: "fedgate:".into(),
            lease: Duration::from_secs(15),
        }
    }
}

impl ClusterSettings {
    /// What is shared, and where, for `fedgate check`.
    pub fn describe(&self) -> Vec<String> {
        let redis = if self.redis.is_some() {
            "shared (Redis)"
        } else {
            "per replica"
        };
        let postgres = if self.postgres.is_some() {
            "shared (PostgreSQL, leases)"
        } else {
            "per replica (SQLite)"
        };
        let sqlite_or_redis = if self.redis.is_some() {
            "shared (Redis)"
        } else {
            "per replica (SQLite)"
        };
        vec![
            format!("rate limits: {redis}"),
            format!("idempotency records: {redis}"),
            format!("approval plans: {redis}"),
            format!("flow runs: {postgres}"),
            format!("workspaces' stages: {sqlite_or_redis}"),
            format!("per-user credentials: {sqlite_or_redis}"),
        ]
    }
}

/// A store URL: literal when it carries no password, else only as a secret reference.
fn url(value: &str, schemes: &[&str], what: &str) -> Result<Secret, Invalid> {
    let resolved = if value.starts_with("env:") || value.starts_with("file:") {
        secret::resolve(value).map_err(|e| Invalid(format!("[cluster] {what}: {e}")))?
    } else {
        let parsed = reqwest::Url::parse(value).map_err(|_| {
            Invalid(format!(
                "[cluster] {what} is not a URL or a secret reference"
            ))
        })?;
        if parsed.password().is_some() {
            return Err(Invalid(format!(
                "[cluster] {what}: the URL holds a password; put it in a secret reference (`env:NAME` or `file:PATH`)"
            )));
        }
        Secret::new(value.to_owned())
    };
    let scheme_ok =
        reqwest::Url::parse(resolved.expose()).is_ok_and(|u| schemes.contains(&u.scheme()));
    if !scheme_ok {
        return Err(Invalid(format!(
            "[cluster] {what}: expected a {} URL",
            schemes.join(" or ")
        )));
    }
    Ok(resolved)
}

/// Why a section this build cannot serve is refused.
pub fn without_feature(feature: &str) -> String {
    format!(
        "this fedgate was built without the `{feature}` feature; build it with `cargo build --features {feature}` (it is on by default)"
    )
}

/// Validates `[cluster]`; every problem is one message.
pub fn validate(raw: RawCluster) -> Result<ClusterSettings, Vec<String>> {
    let mut errors = Vec::new();
    for (set, feature, on) in [
        (raw.redis.is_some(), "redis", cfg!(feature = "redis")),
        (
            raw.postgres.is_some(),
            "postgres",
            cfg!(feature = "postgres"),
        ),
    ] {
        if set && !on {
            errors.push(format!("[cluster] {feature}: {}", without_feature(feature)));
        }
    }
    let d = ClusterSettings::default();
    let mut take = |r: Result<Secret, Invalid>| r.map_err(|e| errors.push(e.0)).ok();
    let redis = raw
        .redis
        .as_deref()
        .and_then(|v| take(url(v, &["redis", "rediss"], "redis")));
    let postgres = raw
        .postgres
        .as_deref()
        .and_then(|v| take(url(v, &["postgres", "postgresql"], "postgres")));
    let fail = match raw.fail.as_deref() {
        None | Some("local") => FailMode::Local,
        Some("closed") => FailMode::Closed,
        Some(other) => {
            errors.push(format!(
                "[cluster] fail `{}`: use `local` or `closed`",
                crate::names::shown(other)
            ));
            FailMode::Local
        }
    };
    let timeout = raw.timeout_ms.map_or(d.timeout, Duration::from_millis);
    if timeout.is_zero() {
        errors.push("[cluster] timeout_ms must be above 0".into());
    }
    let lease = raw.lease_ms.map_or(d.lease, Duration::from_millis);
    if lease < Duration::from_secs(1) {
        errors.push("[cluster] lease_ms must be at least 1000".into());
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(ClusterSettings {
        redis,
        postgres,
        fail,
        timeout,
        key_prefix: raw.key_prefix.unwrap_or(d.key_prefix),
        lease,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(redis: Option<&str>, postgres: Option<&str>, fail: Option<&str>) -> RawCluster {
        RawCluster {
            redis: redis.map(str::to_owned),
            postgres: postgres.map(str::to_owned),
            fail: fail.map(str::to_owned),
            ..RawCluster::default()
        }
    }

    // The URL rules of a build that serves both backends (a leaner one refuses the sections).
    #[cfg(all(feature = "redis", feature = "postgres"))]
    #[test]
    fn urls_with_passwords_must_be_secret_references() {
        let errors = validate(raw(Some("redis://:hunter2@10.0.0.1:6379"), None, None)).unwrap_err();
        assert!(errors[0].contains("secret reference"), "{errors:?}");
        assert!(
            !errors[0].contains("hunter2"),
            "the password is never repeated"
        );
        let errors = validate(raw(None, Some("postgres://fg:pw@db/fedgate"), None)).unwrap_err();
        assert!(errors[0].contains("secret reference"), "{errors:?}");
        let ok = validate(raw(Some("redis://127.0.0.1:6379/2"), None, Some("closed"))).unwrap();
        assert_eq!(ok.fail, FailMode::Closed);
        assert!(ok.describe()[0].contains("shared (Redis)"));
        assert!(ok.describe()[3].contains("per replica (SQLite)"));
    }

    // The URL rules of a build that serves both backends (a leaner one refuses the sections).
    #[cfg(all(feature = "redis", feature = "postgres"))]
    #[test]
    fn wrong_schemes_modes_and_missing_references_are_refused() {
        let e = validate(raw(Some("http://127.0.0.1:6379"), None, None)).unwrap_err();
        assert!(e[0].contains("redis or rediss"), "{e:?}");
        let e = validate(raw(None, None, Some("open"))).unwrap_err();
        assert!(e[0].contains("use `local` or `closed`"), "{e:?}");
        let e = validate(raw(
            Some("env:FEDGATE_TEST_SURELY_UNSET_REDIS_URL"),
            None,
            None,
        ))
        .unwrap_err();
        assert!(e[0].contains("is not set"), "{e:?}");
        let d = validate(RawCluster::default()).unwrap();
        assert!(d.redis.is_none() && d.postgres.is_none());
        assert!(d.describe().iter().all(|l| l.contains("per replica")));
    }

    /// A backend is served exactly when its feature is built: otherwise the section is
    /// refused at load, naming the feature to build with.
    #[test]
    fn a_backend_this_build_lacks_is_refused_naming_its_feature() {
        let both = validate(raw(
            Some("redis://127.0.0.1:6379/"),
            Some("postgres://fedgate@127.0.0.1/runs"),
            None,
        ));
        let lacking: Vec<&str> = [
            ("redis", cfg!(feature = "redis")),
            ("postgres", cfg!(feature = "postgres")),
        ]
        .into_iter()
        .filter(|(_, on)| !on)
        .map(|(f, _)| f)
        .collect();
        match both {
            Ok(s) => {
                assert!(lacking.is_empty(), "{lacking:?} accepted");
                assert!(s.redis.is_some() && s.postgres.is_some());
            }
            Err(errors) => {
                assert_eq!(errors.len(), lacking.len(), "{errors:?}");
                for (e, f) in errors.iter().zip(&lacking) {
                    assert!(
                        e.contains(&format!("built without the `{f}` feature")),
                        "{e}"
                    );
                }
            }
        }
    }
}
