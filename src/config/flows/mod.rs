//! Flow definitions (F12): one TOML file per flow in the `[flows] dir` folder, parsed into
//! typed definitions and checked once at load. A bad flow file never fails the config: the
//! flow is left out and its problems are reported (by `fedgate check`, at start and on reload).

pub mod check;
pub mod template;

use crate::config::Invalid;
use std::{collections::BTreeMap, path::Path, sync::Arc};

use serde::Deserialize;
use serde_json::Value;
use toml::Spanned;

use self::template::Template;
use super::Diagnostic;
use crate::{names::Naming, policy::arguments::ArgCheck};

/// Tool namespace of flows: flow `x` is the tool `flows<sep>x`.
pub const FLOWS_NAMESPACE: &str = "flows";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFlow {
    id: Spanned<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    inputs: Option<toml::Value>,
    nodes: Vec<Spanned<RawNode>>,
    #[serde(default)]
    outputs: BTreeMap<String, toml::Value>,
    parallelism: Option<usize>,
    #[serde(default)]
    idempotency: Idempotency,
    #[serde(default)]
    export: bool,
    /// The output contract (JSON Schema of the outputs), listed as the tool's `outputSchema`.
    output_schema: Option<toml::Value>,
    /// The stages of a workflow (`[stages.NAME]`) in which the flow may be started.
    stage: Option<FlowStage>,
}

/// A flow's stage requirement: `stage = { workflow = "research", states = ["verifying"] }`
/// (`workflow` may be left out when one workflow is configured).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FlowStage {
    pub workflow: Option<String>,
    pub states: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    id: String,
    tool: String,
    #[serde(default)]
    params: BTreeMap<String, toml::Value>,
    #[serde(default)]
    depends_on: Vec<Spanned<String>>,
    when: Option<String>,
    retry: Option<Retry>,
    timeout_ms: Option<u64>,
}

/// Whether nodes get an idempotency key per attempt (run id + node id).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Idempotency {
    #[default]
    Enforce,
    Off,
}

/// Retries of a node whose tool is safe to repeat: `min(max, base·2ⁿ) + random(0, jitter)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    pub max_attempts: u32,
    #[serde(default = "default_base_ms")]
    pub base_ms: u64,
    #[serde(default = "default_max_ms")]
    pub max_ms: u64,
    #[serde(default)]
    pub jitter_ms: u64,
}

fn default_base_ms() -> u64 {
    100
}
fn default_max_ms() -> u64 {
    5_000
}

/// One checked flow.
#[derive(Debug)]
pub struct FlowDef {
    pub id: String,
    pub description: String,
    pub file: String,
    pub line: usize,
    /// JSON Schema of the inputs (an open object when the file declares none).
    pub inputs: Value,
    pub input_check: ArgCheck,
    /// In topological order (every node after its dependencies).
    pub nodes: Vec<NodeDef>,
    pub outputs: Vec<(String, Template)>,
    pub parallelism: usize,
    pub idempotency: Idempotency,
    pub export: bool,
    pub output_schema: Option<Value>,
    /// The stages in which it may be started (checked against `[stages]` with the config).
    pub stage: Option<FlowStage>,
    /// Digest of the file's text: a run records the version of the flow it ran.
    pub digest: String,
}

#[derive(Debug)]
pub struct NodeDef {
    pub id: String,
    /// The namespaced tool.
    pub tool: String,
    pub params: Template,
    pub depends_on: Vec<String>,
    pub when: Option<Condition>,
    pub retry: Option<Retry>,
    pub timeout_ms: Option<u64>,
    pub line: usize,
}

/// A `when` condition: a JMESPath expression over `{"inputs": …, "<node>": {"output": …,
/// "status": …}}`, true when its result is truthy.
pub struct Condition {
    pub source: String,
    expr: jmespath::Expression<'static>,
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}

impl Condition {
    pub fn compile(source: &str) -> Result<Self, Invalid> {
        jmespath::compile(source)
            .map(|expr| Self {
                source: source.to_owned(),
                expr,
            })
            .map_err(|e| Invalid(one_line(&e.to_string())))
    }

    /// Whether the condition holds in `scope`; an evaluation error says why.
    pub fn holds(&self, scope: &Value) -> Result<bool, Invalid> {
        self.expr
            .search(scope)
            .map(|v| v.is_truthy())
            .map_err(|e| Invalid(one_line(&e.to_string())))
    }
}

/// JMESPath's multi-line messages (with a caret under the spot) on one line.
fn one_line(s: &str) -> String {
    s.split_whitespace()
        .filter(|w| *w != "^")
        .collect::<Vec<_>>()
        .join(" ")
}

/// The flows of a config: those that loaded, and the problems of those that did not.
#[derive(Debug, Clone, Default)]
pub struct FlowSet {
    pub flows: Vec<Arc<FlowDef>>,
    pub problems: Vec<Diagnostic>,
    /// Accepted but written in a form to change (today's tool references).
    pub warnings: Vec<Diagnostic>,
}

/// Where flows come from, from `[flows]`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawFlows {
    /// Folder of flow files (`*.toml`), relative to the config file.
    pub dir: Option<String>,
    /// The run log (SQLite), relative to the config file.
    pub db: Option<String>,
    /// Nodes running at once across all runs.
    pub parallelism: Option<usize>,
    /// Nodes running at once against one upstream, across all runs.
    pub upstream_parallelism: Option<usize>,
    /// Node outputs larger than this are stored as artifacts, by reference.
    pub artifact_bytes: Option<usize>,
}

/// Flow nodes running at once across all runs, unless `[flows] parallelism` says otherwise.
pub const DEFAULT_PARALLELISM: usize = 16;
/// Nodes running at once against one upstream unless `[flows] upstream_parallelism` says otherwise.
pub const DEFAULT_UPSTREAM_PARALLELISM: usize = 8;
/// Per-flow parallelism unless the flow sets its own.
pub const DEFAULT_FLOW_PARALLELISM: usize = 4;
/// Node outputs over this size are artifacts.
pub const DEFAULT_ARTIFACT_BYTES: usize = 1 << 20;

/// Loads every `*.toml` in `dir` (sorted by name). `upstreams` are the configured upstream
/// names and `naming` how tools are exposed: a node's tool must lie in an upstream's namespace.
pub fn load_dir(dir: &Path, upstreams: &[String], naming: &Naming) -> FlowSet {
    let mut set = FlowSet::default();
    let mut files: Vec<_> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect(),
        Err(e) => {
            set.problems.push(Diagnostic {
                file: dir.display().to_string(),
                line: 0,
                message: format!("cannot read the flows folder: {e}"),
            });
            return set;
        }
    };
    files.sort();
    for path in files {
        let file = path.display().to_string();
        match std::fs::read_to_string(&path) {
            Ok(text) => match parse(&file, &text, upstreams, naming, &mut set.warnings) {
                Ok(def) if set.flows.iter().any(|f| f.id == def.id) => {
                    set.problems.push(Diagnostic {
                        file,
                        line: def.line,
                        message: format!("flow id `{}` is defined twice", def.id),
                    })
                }
                Ok(def) => set.flows.push(Arc::new(def)),
                Err(problems) => set.problems.extend(problems),
            },
            Err(e) => set.problems.push(Diagnostic {
                file,
                line: 0,
                message: format!("cannot read flow: {e}"),
            }),
        }
    }
    set
}

/// Parses and checks one flow file.
pub fn parse(
    file: &str,
    text: &str,
    upstreams: &[String],
    naming: &Naming,
    warnings: &mut Vec<Diagnostic>,
) -> Result<FlowDef, Vec<Diagnostic>> {
    let at = |line: usize, message: String| Diagnostic {
        file: file.to_owned(),
        line,
        message,
    };
    let raw: RawFlow = toml::from_str(text).map_err(|e| {
        vec![at(
            e.span().map(|s| super::line_of(text, s.start)).unwrap_or(0),
            e.message().trim().to_owned(),
        )]
    })?;
    let line_of = |span: std::ops::Range<usize>| super::line_of(text, span.start);
    let mut problems = Vec::new();
    let id_line = line_of(raw.id.span());
    let id = raw.id.into_inner();
    if !is_identifier(&id) {
        problems.push(at(
            id_line,
            format!(
                "flow id `{}`: use letters, digits, `_` and `-`",
                crate::names::shown(&id)
            ),
        ));
    }
    let inputs = match raw.inputs.map(to_json) {
        Some(v) => v,
        None => serde_json::json!({"type": "object"}),
    };
    let input_check = match ArgCheck::compile(&inputs) {
        Ok(c) => Some(c),
        Err(e) => {
            problems.push(at(id_line, format!("`inputs` is not a JSON Schema: {e}")));
            None
        }
    };
    let mut nodes = Vec::new();
    for node in raw.nodes {
        let line = line_of(node.span());
        let node = node.into_inner();
        let params = Value::Object(
            node.params
                .into_iter()
                .map(|(k, v)| (k, to_json(v)))
                .collect(),
        );
        let params = Template::parse(&params).unwrap_or_else(|e| {
            problems.push(at(line, format!("node `{}`: {e}", node.id)));
            Template::Literal(Value::Null)
        });
        let when = node.when.as_deref().and_then(|w| {
            Condition::compile(w)
                .map_err(|e| {
                    problems.push(at(line, format!("node `{}`: bad `when`: {e}", node.id)))
                })
                .ok()
        });
        let mut depends_on = Vec::new();
        for d in node.depends_on {
            depends_on.push((d.get_ref().clone(), line_of(d.span())));
        }
        let tool = match check::tool_reference(&node.tool, upstreams, naming) {
            Ok((exposed, None)) => exposed,
            Ok((exposed, Some(warning))) => {
                warnings.push(at(line, format!("node `{}`: {warning}", node.id)));
                exposed
            }
            Err(why) => {
                problems.push(at(line, format!("node `{}`: {why}", node.id)));
                node.tool
            }
        };
        nodes.push(check::Node {
            def: NodeDef {
                id: node.id,
                tool,
                params,
                depends_on: depends_on.iter().map(|(d, _)| d.clone()).collect(),
                when,
                retry: node.retry,
                timeout_ms: node.timeout_ms,
                line,
            },
            depends_lines: depends_on.into_iter().map(|(_, l)| l).collect(),
        });
    }
    let mut outputs = Vec::new();
    for (name, v) in raw.outputs {
        match Template::parse(&to_json(v)) {
            Ok(t) => outputs.push((name, t)),
            Err(e) => problems.push(at(id_line, format!("output `{name}`: {e}"))),
        }
    }
    let nodes = check::graph(&at, id_line, nodes, &outputs, &mut problems);
    if raw.idempotency == Idempotency::Off {
        tracing::warn!(flow = %id, "flow runs with idempotency = \"off\": nodes get no idempotency key, and a node interrupted by a crash is re-run without one");
    }
    match (problems.is_empty(), input_check) {
        (true, Some(input_check)) => Ok(FlowDef {
            id,
            description: raw.description,
            file: file.to_owned(),
            line: id_line,
            inputs,
            input_check,
            nodes,
            outputs,
            parallelism: raw.parallelism.unwrap_or(DEFAULT_FLOW_PARALLELISM).max(1),
            idempotency: raw.idempotency,
            export: raw.export,
            output_schema: raw.output_schema.map(to_json),
            stage: raw.stage,
            digest: digest(text),
        }),
        _ => Err(problems),
    }
}

/// Letters, digits, `_` and `-`, 1–64 characters.
pub(crate) fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The first 16 hex digits of the text's SHA-256.
fn digest(text: &str) -> String {
    use sha2::Digest;
    let mut hex = hex::encode(sha2::Sha256::digest(text.as_bytes()));
    hex.truncate(16);
    hex
}

fn to_json(v: toml::Value) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}
