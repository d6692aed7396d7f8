//! The serving gateway's admin API, as the operator's commands (`plans`, `credentials`) reach
//! it: the `[admin]` address and token of the config, one bounded request, the answer's JSON or
//! its error in words.

use std::{path::Path, time::Duration};

use serde_json::Value;

use super::{CliError, serve::load_for_reading};

/// How long one admin request may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The admin API of the gateway serving `config`.
pub struct AdminApi {
    base: String,
    token: crate::secret::Secret,
    client: reqwest::Client,
    /// What lives in the serving gateway, for the error when none answers (`plans`).
    what: &'static str,
}

impl AdminApi {
    pub fn of(config: &Path, what: &'static str) -> Result<Self, CliError> {
        let snapshot = load_for_reading(config)?;
        let admin = snapshot.admin.as_ref().ok_or_else(|| {
            format!(
                "{}: no [admin] section: {what} are managed through the serving gateway's admin API",
                config.display()
            )
        })?;
        if let Some(why) = &admin.token_missing {
            return Err(CliError::Message(format!(
                "cannot reach the serving gateway's admin API: [admin] token: {why}; {what} live in the serving gateway"
            )));
        }
        Ok(Self {
            base: format!("http://{}", admin.listen),
            token: admin.token.clone(),
            client: reqwest::Client::new(),
            what,
        })
    }

    /// `path`'s full URL (`/admin/...`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends `method` to `path`: the answer's JSON, or its `error` as the message. `unreachable`
    /// is said when nothing answers.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        unreachable: &str,
    ) -> Result<Value, CliError> {
        let url = self.url(path);
        let resp = self
            .client
            .request(method, &url)
            .bearer_auth(self.token.expose())
            .timeout(TIMEOUT)
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    format!(
                        "no gateway answers at {url}: {} live in the serving gateway; {unreachable}",
                        self.what
                    )
                } else {
                    format!("admin API: {e}")
                }
            })?;
        let status = resp.status();
        let body: Value = resp.json().await.map_err(|e| format!("admin API: {e}"))?;
        if !status.is_success() {
            let state = body["state"]
                .as_str()
                .map(|s| format!(" (plan is {s})"))
                .unwrap_or_default();
            return Err(CliError::Message(format!(
                "{}{state}",
                body["error"].as_str().unwrap_or("the admin API refused")
            )));
        }
        Ok(body)
    }
}
