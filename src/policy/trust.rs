//! Trust tiers (F6): is this call a read, a write or long-running, and may it run here?

use std::{collections::BTreeSet, time::Duration};

use rmcp::model::Tool;

/// How a write that needs approval is approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// Not needed (a tool setting that overrides its tier).
    None,
    /// An `ok` plan that is not run, approved with `fedgate__approve`.
    Plan,
    /// Ask the caller's human with an elicitation when the client supports it; else a plan.
    Elicit,
}

/// Whether writes are allowed at a tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Writes {
    Always,
    /// Only tools listed in the upstream's `writable`.
    Declared,
    Never,
}

/// A validated tier.
#[derive(Debug, Clone)]
pub struct Tier {
    pub name: String,
    /// Higher = more trusted; a role's `max_tier` admits tiers up to its rank.
    pub rank: u32,
    pub writes: Writes,
    /// Whether `readOnlyHint` decides read vs write; otherwise only config declares reads.
    pub trust_annotations: bool,
    pub approval_for_writes: bool,
    /// How approval is obtained when `approval_for_writes` (a plan, or an elicitation).
    pub approval: Approval,
    /// Roles whose holders approve; empty = the caller approves its own plans.
    pub approvers: Vec<String>,
    pub pin_tool_definitions: bool,
    pub max_response_bytes: Option<usize>,
    pub credential_classes: Vec<String>,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    pub long_timeout: Duration,
    /// Calls per second (and burst) through this tier, per upstream.
    pub rate_limit: Option<(u32, u32)>,
    /// Secrets in arguments and results (an upstream may override each).
    pub guardrails: crate::guard::Policy,
    /// External guardrail hooks asked for this tier's upstreams, in order.
    pub guardrail_hooks: Vec<String>,
}

impl Tier {
    /// The tier of upstreams that name none: writes allowed, annotations trusted, the
    /// upstream's own `call_timeout_ms` for every class.
    pub fn unrestricted(call_timeout: Duration) -> Self {
        Self {
            name: "default".into(),
            // Untiered upstreams are unrestricted, so only roles without `max_tier` reach them.
            rank: u32::MAX,
            writes: Writes::Always,
            trust_annotations: true,
            approval_for_writes: false,
            approval: Approval::Plan,
            approvers: Vec::new(),
            pin_tool_definitions: false,
            max_response_bytes: None,
            credential_classes: Vec::new(),
            read_timeout: call_timeout,
            write_timeout: call_timeout,
            long_timeout: call_timeout,
            rate_limit: None,
            guardrails: crate::guard::Policy::untiered(),
            guardrail_hooks: Vec::new(),
        }
    }
}

/// What an upstream's config declares about its tools, beside the tier's rules.
#[derive(Debug, Clone, Copy)]
pub struct Declared<'a> {
    /// May write at a `writes = "declared"` tier.
    pub writable: &'a BTreeSet<String>,
    /// Reads, whatever their annotations say.
    pub read_only: &'a BTreeSet<String>,
    /// Get the tier's `long` timeout.
    pub long_running: &'a BTreeSet<String>,
}

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
}

impl TierRefusal {
    pub fn code(self) -> &'static str {
        match self {
            TierRefusal::WritesNever => "writes_never",
            TierRefusal::WriteNotDeclared => "write_not_declared",
        }
    }
}

/// Read or write, by the tier's rules: annotations count only where the tier trusts them;
/// a tool declared `read_only` in config is a read everywhere.
pub fn is_write(tier: &Tier, declared: Declared<'_>, tool: Option<&Tool>, name: &str) -> bool {
    if declared.read_only.contains(name) {
        return false;
    }
    let hinted_read = tool
        .and_then(|t| t.annotations.as_ref())
        .and_then(|a| a.read_only_hint)
        .unwrap_or(false);
    !(tier.trust_annotations && hinted_read)
}

/// The class of a tool call and whether the tier lets it run.
pub fn decide(
    tier: &Tier,
    declared: Declared<'_>,
    tool: Option<&Tool>,
    name: &str,
) -> Result<CallClass, TierRefusal> {
    let write = is_write(tier, declared, tool, name);
    if write {
        match tier.writes {
            Writes::Never => return Err(TierRefusal::WritesNever),
            Writes::Declared if !declared.writable.contains(name) => {
                return Err(TierRefusal::WriteNotDeclared);
            }
            _ => {}
        }
    }
    Ok(if declared.long_running.contains(name) {
        CallClass::Long
    } else if write {
        CallClass::Write
    } else {
        CallClass::Read
    })
}

/// Whether a call of class `class` needs approval, and how: the tool's own `approval`
/// setting wins; else the tier's `approval_for_writes` decides for writes.
pub fn approval_needed(
    tier: &Tier,
    tool_setting: Option<Approval>,
    class: CallClass,
) -> Option<Approval> {
    use Approval;
    match tool_setting {
        Some(Approval::None) => None,
        Some(a) => Some(a),
        None if tier.approval_for_writes && class != CallClass::Read => Some(tier.approval),
        None => None,
    }
}

/// The tier's timeout for a class.
pub fn timeout(tier: &Tier, class: CallClass) -> Duration {
    match class {
        CallClass::Read => tier.read_timeout,
        CallClass::Write => tier.write_timeout,
        CallClass::Long => tier.long_timeout,
    }
}
