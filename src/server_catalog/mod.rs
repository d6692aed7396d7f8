//! The catalog of popular MCP servers shipped in the binary (`fedgate catalog`, `fedgate add`):
//! for each, how to start it, the trust tier that fits it, its read-only tools and declared
//! writes, and the credentials it needs as secret references.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The catalog's text, in the binary.
const SERVERS: &str = include_str!("servers.toml");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    servers: BTreeMap<String, Entry>,
}

/// One server of the catalog.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub description: String,
    pub source: String,
    pub runner: Runner,
    pub package: String,
    /// The executable an installed copy puts on PATH (npm's `bin`, a Python console script).
    pub bin: Option<String>,
    /// What the server needs as arguments, when it needs any.
    pub needs_args: Option<String>,
    /// Environment variables it reads (credentials): name → what to set it to.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub tier: String,
    #[serde(default)]
    pub read_only: Vec<String>,
    #[serde(default)]
    pub writable: Vec<String>,
}

/// How a server is fetched and started when no installed copy is on PATH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runner {
    Npx,
    Uvx,
    Docker,
}

/// The built-in catalog did not parse (a build defect; a unit test checks it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the built-in server catalog does not parse: {0}")]
pub struct BrokenCatalog(String);

/// Every entry, by name. The catalog is part of the binary and checked by a unit test, so a
/// parse failure is a build defect; it still answers with an error, never a panic.
pub fn all() -> Result<BTreeMap<String, Entry>, BrokenCatalog> {
    toml::from_str::<File>(SERVERS)
        .map(|f| f.servers)
        .map_err(|e| BrokenCatalog(e.to_string()))
}

/// Entries whose name, description or package contains `word` (case-insensitive).
pub fn search(word: &str) -> Result<Vec<(String, Entry)>, BrokenCatalog> {
    let w = word.to_lowercase();
    Ok(all()?
        .into_iter()
        .filter(|(n, e)| {
            n.contains(&w)
                || e.description.to_lowercase().contains(&w)
                || e.package.to_lowercase().contains(&w)
        })
        .collect())
}

impl Entry {
    /// The command and arguments that start it: the installed `bin` when `installed` finds it,
    /// else the runner's way of fetching the package.
    pub fn command(
        &self,
        installed: impl Fn(&str) -> bool,
        extra: &[String],
    ) -> (String, Vec<String>) {
        let (command, mut args) = match (&self.bin, self.runner) {
            (Some(bin), _) if installed(bin) => (bin.clone(), Vec::new()),
            (_, Runner::Npx) => (
                "npx".to_owned(),
                vec!["-y".to_owned(), self.package.clone()],
            ),
            (_, Runner::Uvx) => ("uvx".to_owned(), vec![self.package.clone()]),
            (_, Runner::Docker) => {
                let mut a = vec!["run".to_owned(), "-i".into(), "--rm".into()];
                // Docker passes the credentials through from fedgate's environment by name.
                for k in self.env.keys() {
                    a.push("-e".into());
                    a.push(k.clone());
                }
                a.push(self.package.clone());
                ("docker".to_owned(), a)
            }
        };
        args.extend(extra.iter().cloned());
        (command, args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_parses_and_every_entry_is_usable() {
        let all = all().expect("catalog");
        assert!(all.len() >= 15, "{}", all.len());
        for (name, e) in &all {
            assert!(
                crate::names::unportable(name).is_none() && !name.contains("__"),
                "{name}"
            );
            assert!(
                ["high", "medium", "low"].contains(&e.tier.as_str()),
                "{name}"
            );
            assert!(e.source.starts_with("https://"), "{name}");
            assert!(!e.description.is_empty(), "{name}");
        }
        for want in [
            "filesystem",
            "memory",
            "fetch",
            "git",
            "github",
            "gitlab",
            "postgres",
            "sqlite",
            "time",
            "everything",
            "playwright",
            "slack",
            "brave-search",
            "sequential-thinking",
        ] {
            assert!(all.contains_key(want), "{want}");
        }
        assert!(all.values().any(|e| e.runner == Runner::Uvx));
    }

    #[test]
    fn an_installed_copy_is_preferred_and_extra_arguments_follow() {
        let all = all().expect("catalog");
        let fs = &all["filesystem"];
        let extra = vec!["/data".to_owned()];
        assert_eq!(
            fs.command(|_| false, &extra),
            (
                "npx".into(),
                vec![
                    "-y".into(),
                    "@modelcontextprotocol/server-filesystem".into(),
                    "/data".into()
                ]
            )
        );
        assert_eq!(
            fs.command(|b| b == "mcp-server-filesystem", &extra),
            ("mcp-server-filesystem".into(), extra.clone())
        );
        let (cmd, args) = all["github"].command(|_| false, &[]);
        assert_eq!(cmd, "docker");
        assert!(
            args.windows(2)
                .any(|w| w == ["-e", "GITHUB_PERSONAL_ACCESS_TOKEN"]),
            "{args:?}"
        );
    }
}
