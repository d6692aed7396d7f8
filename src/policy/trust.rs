//! Trust tiers (F6): is this call a read, a write or long-running, and may it run here?

use std::time::Duration;

use rmcp::model::Tool;

use crate::config::{UpstreamSpec, tier::Writes};

/// What kind of call this is, which picks the tier's timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallClass {
    Read,
    Write,
    Long,
}

/// Why a tier refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierRefusal {
    /// The tier allows no writes.
    WritesNever,
    /// The tier allows only declared writes and this tool is not declared.
    WriteNotDeclared,
    /// Writes at this tier need approval, which this gateway cannot obtain yet.
    ApprovalRequired,
}

impl TierRefusal {
    pub fn code(self) -> &'static str {
        match self {
            TierRefusal::WritesNever => "writes_never",
            TierRefusal::WriteNotDeclared => "write_not_declared",
            TierRefusal::ApprovalRequired => "approval_required",
        }
    }
}

/// Read or write, by the tier's rules: annotations count only where the tier trusts them;
/// a tool declared `read_only` in config is a read everywhere.
pub fn is_write(spec: &UpstreamSpec, tool: Option<&Tool>, name: &str) -> bool {
    if spec.read_only.contains(name) {
        return false;
    }
    let hinted_read = tool
        .and_then(|t| t.annotations.as_ref())
        .and_then(|a| a.read_only_hint)
        .unwrap_or(false);
    !(spec.tier.trust_annotations && hinted_read)
}

/// The class of a tool call and whether the tier lets it run.
pub fn decide(
    spec: &UpstreamSpec,
    tool: Option<&Tool>,
    name: &str,
) -> Result<CallClass, TierRefusal> {
    let write = is_write(spec, tool, name);
    if write {
        match spec.tier.writes {
            Writes::Never => return Err(TierRefusal::WritesNever),
            Writes::Declared if !spec.writable.contains(name) => {
                return Err(TierRefusal::WriteNotDeclared);
            }
            _ => {}
        }
        if spec.tier.approval_for_writes {
            return Err(TierRefusal::ApprovalRequired);
        }
    }
    Ok(if spec.long_running.contains(name) {
        CallClass::Long
    } else if write {
        CallClass::Write
    } else {
        CallClass::Read
    })
}

/// The tier's timeout for a class.
pub fn timeout(spec: &UpstreamSpec, class: CallClass) -> Duration {
    match class {
        CallClass::Read => spec.tier.read_timeout,
        CallClass::Write => spec.tier.write_timeout,
        CallClass::Long => spec.tier.long_timeout,
    }
}
