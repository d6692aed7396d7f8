//! Secret references (`env:NAME`, `file:PATH`): config holds where a secret is, never the secret.

use std::fmt;

/// A resolved secret; Debug and Display never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A secret serializes as `<redacted>`: no config dump, API answer or record can carry one.
impl serde::Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

/// A configured value that may hold a secret (a header value, a process' environment value):
/// a reference (`env:NAME`, `file:PATH`) is shown as written, a literal never — in Debug,
/// Display and Serialize alike. [`Configured::raw`] is for the one place that uses it.
#[derive(Clone, PartialEq, Eq)]
pub struct Configured(String);

impl Configured {
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The value as configured (a reference or a literal), to use, never to show.
    pub fn raw(&self) -> &str {
        &self.0
    }

    fn shown(&self) -> &str {
        if is_reference(&self.0) {
            &self.0
        } else {
            "<redacted>"
        }
    }
}

impl From<String> for Configured {
    fn from(value: String) -> Self {
        Self(value)
    }
}

/// The values of a configured table (`env`, `headers`) as [`Configured`].
pub fn configured(
    table: std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, Configured> {
    table.into_iter().map(|(k, v)| (k, Configured(v))).collect()
}

impl fmt::Debug for Configured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.shown())
    }
}

impl fmt::Display for Configured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.shown())
    }
}

impl serde::Serialize for Configured {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.shown())
    }
}

/// Whether a value is a secret reference (`env:NAME`, `file:PATH`) rather than a literal.
pub fn is_reference(value: &str) -> bool {
    value.starts_with("env:") || value.starts_with("file:")
}

/// Whether a variable, header or argument name suggests its value is a secret.
pub fn looks_secret(name: &str) -> bool {
    const MARKS: [&str; 9] = [
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "credential",
        "private_key",
        "authorization",
    ];
    let lower = name.to_ascii_lowercase();
    MARKS.iter().any(|m| lower.contains(m))
        || ["key", "auth"].contains(&lower.as_str())
        || lower.ends_with("_key")
        || lower.ends_with("_auth")
}

/// Why a secret reference did not resolve; it names the reference, never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("environment variable `{0}` is not set")]
    EnvUnset(String),
    #[error("cannot read secret file `{0}`: {1}")]
    File(String, String),
    #[error("secrets are references: use `env:NAME` or `file:PATH`, never the value itself")]
    NotAReference,
}

/// Resolves a reference.
pub fn resolve(reference: &str) -> Result<Secret, SecretError> {
    if let Some(name) = reference.strip_prefix("env:") {
        return std::env::var(name)
            .map(|v| Secret(v.trim_end().to_owned()))
            .map_err(|_| SecretError::EnvUnset(name.to_owned()));
    }
    if let Some(path) = reference.strip_prefix("file:") {
        return std::fs::read_to_string(path)
            .map(|v| Secret(v.trim_end().to_owned()))
            .map_err(|e| SecretError::File(path.to_owned(), e.to_string()));
    }
    Err(SecretError::NotAReference)
}

/// A URL without the secrets it may carry: userinfo (`user:password@`) and the values of
/// secret-looking query parameters (`?token=…`).
pub fn redact_url(url: &str) -> String {
    let Ok(mut u) = reqwest::Url::parse(url) else {
        return "<unparsable URL, not shown>".to_owned();
    };
    if !u.username().is_empty() || u.password().is_some() {
        let _ = u.set_username("redacted");
        let _ = u.set_password(None);
    }
    if u.query().is_some() {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let v = if crate::secret::looks_secret(&k) {
                    "redacted".to_owned()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

/// `text` (an error message) with `url` in every form a client library prints it replaced by
/// its redacted form.
pub fn hide_url_secrets(text: &str, url: &str) -> String {
    let redacted = redact_url(url);
    let mut out = text.replace(url, &redacted);
    if let Ok(mut u) = reqwest::Url::parse(url) {
        out = out.replace(u.as_str(), &redacted);
        let _ = u.set_username("");
        let _ = u.set_password(None);
        out = out.replace(u.as_str(), &redacted);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_literal_values_never_serialize_in_clear() {
        let dump = serde_json::json!({
            "secret": Secret::new("s3cr3t".into()),
            "literal": Configured::new("Bearer s3cr3t".into()),
            "reference": Configured::new("env:API_TOKEN".into()),
        });
        let text = dump.to_string();
        assert!(!text.contains("s3cr3t"), "{text}");
        assert_eq!(dump["reference"], "env:API_TOKEN");
        assert_eq!(dump["literal"], "<redacted>");
        assert_eq!(
            format!("{:?}", Configured::new("x1".into())),
            "\"<redacted>\""
        );
        assert_eq!(Configured::new("x1".into()).raw(), "x1");
    }

    #[test]
    fn secrets_are_never_printed() {
        let s = Secret("hunter2".into());
        assert!(!format!("{s:?} {s}").contains("hunter2"));
        assert!(resolve("hunter2").is_err());
        assert!(resolve("env:FEDGATE_TEST_SURELY_UNSET").is_err());
        assert!(looks_secret("GITHUB_TOKEN") && looks_secret("OPENAI_API_KEY"));
        let url = "http://ops:pw@127.0.0.1:9/mcp?token=t0k&region=eu";
        assert_eq!(
            redact_url(url),
            "http://redacted@127.0.0.1:9/mcp?token=redacted&region=eu"
        );
        let msg = "error sending request for url (http://127.0.0.1:9/mcp?token=t0k&region=eu)";
        assert!(!hide_url_secrets(msg, url).contains("t0k"));
        assert!(!looks_secret("LOG_LEVEL") && !looks_secret("KEYBOARD") && !looks_secret("author"));
    }
}
