//! Guardrail hooks asked about tool definitions (phase `definitions`): an external scanner
//! sees each new definition (by fingerprint) before it is listed, and its `deny` holds the tool
//! back like a flag of fedgate's own screening. The catalog is built without waiting: a
//! definition not yet answered is held (fail closed) or listed (fail open) until the answer
//! comes, and the answer rebuilds the catalog.
//!
//! The payload: `{"version": 1, "phase": "definitions", "hook", "upstream", "tool": {…the
//! definition…}, "fingerprint"}`; the answer `{"decision": "pass"}` or
//! `{"decision": "deny", "reason": "…"}` (at most 64 KiB).

use std::sync::Arc;

use dashmap::{DashMap, DashSet};
use rmcp::model::Tool;
use serde_json::json;

use super::hook::{self, Decision, Hook, Phase};

/// What a hook said about one definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Denied, with the hook's reason; or the hook failed while failing closed.
    Held(String),
}

/// One definition a hook has still to be asked about.
#[derive(Debug, Clone)]
pub struct Pending {
    pub hook: Arc<Hook>,
    pub upstream: String,
    pub tool: Tool,
    pub fingerprint: String,
}

/// Hooks' verdicts by (hook, fingerprint), kept for the process's life: a definition is asked
/// about once, not at every rebuild.
#[derive(Debug, Default)]
pub struct Verdicts {
    known: DashMap<(String, String), Verdict>,
    asking: DashSet<(String, String)>,
}

impl Verdicts {
    pub fn get(&self, hook: &str, fingerprint: &str) -> Option<Verdict> {
        self.known
            .get(&(hook.to_owned(), fingerprint.to_owned()))
            .map(|v| v.clone())
    }

    /// Asks each pending hook (once per hook and fingerprint, however many rebuilds list it);
    /// true if any verdict was recorded.
    pub async fn ask_all(&self, pending: Vec<Pending>) -> bool {
        let mut recorded = false;
        for p in pending {
            let key = (p.hook.name.clone(), p.fingerprint.clone());
            if self.known.contains_key(&key) || !self.asking.insert(key.clone()) {
                continue;
            }
            let verdict = ask(&p).await;
            self.asking.remove(&key);
            if let Some(v) = verdict {
                self.known.insert(key, v);
                recorded = true;
            }
        }
        recorded
    }
}

/// The hook's verdict; `None` when it failed and fails open (listed, asked again next time).
async fn ask(p: &Pending) -> Option<Verdict> {
    let payload = json!({
        "version": 1, "phase": Phase::Definitions, "hook": p.hook.name,
        "upstream": p.upstream, "tool": p.tool, "fingerprint": p.fingerprint,
    });
    match hook::ask(&p.hook, Phase::Definitions, &payload).await {
        Ok(Decision::Deny(why)) => Some(Verdict::Held(why)),
        Ok(_) => Some(Verdict::Pass),
        Err(e) if p.hook.fail_open => {
            tracing::warn!(hook = %p.hook.name, upstream = %p.upstream, tool = %p.tool.name, "guardrail hook failed on a definition, listed (it fails open): the hook {e}");
            None
        }
        Err(e) => Some(Verdict::Held(format!("the hook {e}"))),
    }
}
