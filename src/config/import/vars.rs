//! The variables of client config files (`${input:ID}`, `${env:NAME}`, `${workspaceFolder}`,
//! `${userHome}`, …): resolved where fedgate can, turned into secret references where a secret
//! belongs, refused otherwise — a placeholder is never sent to a server as written.

use crate::config::Invalid;
use std::{collections::BTreeMap, path::Path};

/// What an imported file's variables resolve against.
#[derive(Debug, Default)]
pub struct Vars {
    /// `${workspaceFolder}`: for `.vscode/mcp.json` the folder holding `.vscode`, else the
    /// source file's folder.
    workspace: Option<String>,
    /// VS Code's `inputs`: id → description.
    inputs: BTreeMap<String, String>,
}

/// A string after its variables: text, or a secret to take from fedgate's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expanded {
    Text(String),
    /// `prefix` + the value of environment variable `var` (`Bearer ${input:gh-token}`).
    Secret {
        prefix: String,
        var: String,
        /// What the variable holds, for the note that says to set it.
        what: String,
    },
}

impl Vars {
    pub fn new(source: Option<&Path>, inputs: BTreeMap<String, String>) -> Self {
        let workspace = source.and_then(|p| {
            let dir = std::path::absolute(p).ok()?.parent()?.to_owned();
            let dir = if dir.file_name().is_some_and(|n| n == ".vscode") {
                dir.parent()?.to_owned()
            } else {
                dir
            };
            Some(dir.display().to_string())
        });
        Self { workspace, inputs }
    }

    /// Expands `s`. A secret (`${input:…}`, or `${env:…}` when `secret_ok`) may only end the
    /// string, after plain text; any other placeholder is resolved here or is an error.
    pub fn expand(&self, s: &str, secret_ok: bool) -> Result<Expanded, Invalid> {
        let mut out = String::new();
        let mut rest = s;
        while let Some(at) = rest.find("${") {
            out.push_str(&rest[..at]);
            let after = &rest[at + 2..];
            let Some(end) = after.find('}') else {
                return Err(Invalid(format!(
                    "unclosed `${{` in `{}`",
                    crate::names::shown(s)
                )));
            };
            let name = &after[..end];
            let tail = &after[end + 1..];
            if let Some(id) = name.strip_prefix("input:") {
                if !tail.is_empty() || !secret_ok {
                    return Err(Invalid(format!(
                        "`${{{name}}}` is asked of the user by the client; fedgate can pass it \
                         only as a whole `env` value or a header's token"
                    )));
                }
                let what = self
                    .inputs
                    .get(id)
                    .cloned()
                    .unwrap_or_else(|| format!("the client's input `{id}`"));
                return Ok(Expanded::Secret {
                    prefix: out,
                    var: env_name(id),
                    what,
                });
            }
            if let Some(var) = name.strip_prefix("env:") {
                if secret_ok && tail.is_empty() {
                    return Ok(Expanded::Secret {
                        prefix: out,
                        var: var.to_owned(),
                        what: format!("what the client read from `{var}`"),
                    });
                }
                match std::env::var(var) {
                    Ok(v) => out.push_str(&v),
                    Err(_) => {
                        return Err(Invalid(format!(
                            "`${{env:{var}}}` is not set here, and fedgate cannot read it later in \
                             that place"
                        )));
                    }
                }
            } else {
                out.push_str(&self.builtin(name)?);
            }
            rest = tail;
        }
        out.push_str(rest);
        Ok(Expanded::Text(out))
    }

    /// `${workspaceFolder}` and the other variables with one value at import time.
    fn builtin(&self, name: &str) -> Result<String, Invalid> {
        let home = || std::env::var("HOME").map_err(|_| Invalid::from("HOME is not set"));
        match name {
            "workspaceFolder" | "workspaceRoot" => self
                .workspace
                .clone()
                .ok_or_else(|| "`${workspaceFolder}`: the source file's folder is unknown".into()),
            "workspaceFolderBasename" => self
                .workspace
                .as_deref()
                .and_then(|w| Path::new(w).file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| "`${workspaceFolderBasename}`: no workspace folder".into()),
            "userHome" => home(),
            "pathSeparator" | "/" => Ok("/".into()),
            other => Err(Invalid(format!(
                "unknown variable `${{{}}}`",
                crate::names::shown(other)
            ))),
        }
    }
}

/// The environment variable a client input becomes: `gh-token` → `GH_TOKEN`.
fn env_name(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("INPUT_{s}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_resolve_become_secrets_or_are_refused() {
        let vars = Vars::new(
            Some(Path::new("/work/proj/.vscode/mcp.json")),
            [("gh-token".to_owned(), "GitHub PAT".to_owned())].into(),
        );
        assert_eq!(
            vars.expand("${workspaceFolder}/data", false),
            Ok(Expanded::Text("/work/proj/data".into()))
        );
        assert_eq!(
            vars.expand("Bearer ${input:gh-token}", true),
            Ok(Expanded::Secret {
                prefix: "Bearer ".into(),
                var: "GH_TOKEN".into(),
                what: "GitHub PAT".into()
            })
        );
        assert!(vars.expand("--token=${input:gh-token}", false).is_err());
        assert!(vars.expand("${input:gh-token}/x", true).is_err());
        assert!(vars.expand("${nope}", false).is_err());
        assert!(vars.expand("${unclosed", false).is_err());
        assert_eq!(
            vars.expand("${env:FG_IMPORT_SURELY_UNSET}", true),
            Ok(Expanded::Secret {
                prefix: String::new(),
                var: "FG_IMPORT_SURELY_UNSET".into(),
                what: "what the client read from `FG_IMPORT_SURELY_UNSET`".into()
            })
        );
        assert!(
            vars.expand("a${env:FG_IMPORT_SURELY_UNSET}b", false)
                .is_err()
        );
        assert_eq!(
            vars.expand("plain", false),
            Ok(Expanded::Text("plain".into()))
        );
        assert_eq!(env_name("1x-y"), "INPUT_1X_Y");
    }
}
