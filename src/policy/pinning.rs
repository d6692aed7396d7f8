//! Tool-definition pinning (F6): a tool whose definition changes on an upstream whose tier pins
//! definitions is held back until the new definition is accepted (in config, `pins`).

use dashmap::DashMap;
use rmcp::model::Tool;

/// SHA-256 (hex) of what a tool promises: name, description, schemas, annotations.
pub fn fingerprint(tool: &Tool) -> String {
    // Canonical (keys sorted): a server that reorders keys has not changed its promise.
    let v = serde_json::json!({
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.input_schema,
        "outputSchema": tool.output_schema,
        "annotations": tool.annotations,
    });
    crate::json_digest::sha256_hex(&v)
}

/// Accepted fingerprints per (upstream, tool): from config, else the first definition seen.
#[derive(Debug, Default)]
pub struct Pins {
    accepted: DashMap<(String, String), String>,
    /// Fingerprints an operator accepted (config `pins`, the admin API): they pass the
    /// definition screening too, which first sight never does.
    vouched: DashMap<(String, String), String>,
    /// Flagged definitions already reported in the log, so a rebuild does not repeat them.
    reported: DashMap<(String, String), String>,
    /// Conflicts already logged, by their reason.
    logged: DashMap<(String, String), String>,
}

/// What pinning says about one tool definition.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// The definition differs from the accepted one.
    Changed {
        accepted: String,
        now: String,
    },
}

impl Pins {
    /// Pins from config; they win over first sight.
    pub fn preset(&self, upstream: &str, tool: &str, fingerprint: &str) {
        let key = (upstream.to_owned(), tool.to_owned());
        self.accepted.insert(key.clone(), fingerprint.to_owned());
        self.vouched.insert(key, fingerprint.to_owned());
    }

    /// Whether an operator accepted this very definition.
    pub fn vouched(&self, upstream: &str, tool: &str, fingerprint: &str) -> bool {
        self.vouched
            .get(&(upstream.to_owned(), tool.to_owned()))
            .is_some_and(|fp| *fp == fingerprint)
    }

    /// True the first time a flagged definition (by fingerprint) is seen.
    pub fn first_report(&self, upstream: &str, tool: &str, fingerprint: &str) -> bool {
        let key = (upstream.to_owned(), tool.to_owned());
        match self.reported.insert(key, fingerprint.to_owned()) {
            Some(before) => before != fingerprint,
            None => true,
        }
    }

    /// True the first time a conflict (by its reason) is seen for an item.
    pub fn first_conflict(&self, upstream: &str, item: &str, reason: &str) -> bool {
        let key = (upstream.to_owned(), item.to_owned());
        match self.logged.insert(key, reason.to_owned()) {
            Some(before) => before != reason,
            None => true,
        }
    }

    pub fn check(&self, upstream: &str, tool: &Tool) -> Verdict {
        let now = fingerprint(tool);
        let entry = self
            .accepted
            .entry((upstream.to_owned(), tool.name.to_string()))
            .or_insert_with(|| now.clone());
        if *entry == now {
            Verdict::Accepted
        } else {
            Verdict::Changed {
                accepted: entry.clone(),
                now,
            }
        }
    }
}
