//! BM25 over the catalog's tools: names, titles, descriptions and parameter names. One index
//! per catalog version, built on the first search after a change.

use std::sync::Arc;

use bm25::{Embedder, EmbedderBuilder, Scorer, Tokenizer};
use rmcp::model::Tool;

use crate::upstream::Catalog;

/// Words of a name or text: split at anything not a letter or digit and at camelCase humps,
/// lower-cased, plurals folded, and the commonest English words dropped.
#[derive(Debug, Default, Clone, Copy)]
pub struct Words;

const STOP: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is", "it", "its", "of",
    "on", "or", "that", "the", "this", "to", "with",
];

impl Tokenizer for Words {
    fn tokenize(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut word = String::new();
        let mut prev_lower = false;
        let flush = |word: &mut String, out: &mut Vec<String>| {
            if word.is_empty() {
                return;
            }
            let w = std::mem::take(word);
            if STOP.contains(&w.as_str()) {
                return;
            }
            out.push(fold(w));
        };
        for c in text.chars() {
            if !c.is_alphanumeric() {
                flush(&mut word, &mut out);
                prev_lower = false;
                continue;
            }
            if c.is_uppercase() && prev_lower {
                flush(&mut word, &mut out);
            }
            prev_lower = c.is_lowercase() || c.is_ascii_digit();
            word.extend(c.to_lowercase());
        }
        flush(&mut word, &mut out);
        out
    }
}

/// `issues` and `issue` are one word to a search.
fn fold(mut w: String) -> String {
    if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") {
        w.pop();
    }
    w
}

/// The text a tool is found by; the name counts twice (a name's words say most).
pub fn document(t: &Tool) -> String {
    let mut doc = format!("{0} {0}", t.name);
    if let Some(title) = &t.title {
        doc.push(' ');
        doc.push_str(title);
    }
    if let Some(d) = &t.description {
        doc.push(' ');
        doc.push_str(d);
    }
    if let Some(props) = t.input_schema.get("properties").and_then(|p| p.as_object()) {
        for k in props.keys() {
            doc.push(' ');
            doc.push_str(k);
        }
    }
    doc
}

/// The index of one catalog version.
pub struct Index {
    pub catalog: Arc<Catalog>,
    embedder: Embedder<u32, Words>,
    scorer: Scorer<usize, u32>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Index({} tools)", self.catalog.tools.len())
    }
}

impl Index {
    pub fn build(catalog: Arc<Catalog>) -> Self {
        let docs: Vec<String> = catalog.tools.iter().map(document).collect();
        let corpus: Vec<&str> = docs.iter().map(String::as_str).collect();
        let embedder: Embedder<u32, Words> =
            EmbedderBuilder::with_tokenizer_and_fit_to_corpus(Words, &corpus).build();
        let mut scorer = Scorer::new();
        for (i, d) in docs.iter().enumerate() {
            scorer.upsert(&i, embedder.embed(d));
        }
        Self {
            catalog,
            embedder,
            scorer,
        }
    }

    /// The best `limit` tools for `query` among those `visible` lets through, best first, with
    /// how many matched in all.
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        visible: impl Fn(&Tool) -> bool,
    ) -> (Vec<&Tool>, usize) {
        let q = self.embedder.embed(query);
        let mut found = Vec::new();
        let mut total = 0;
        for m in self.scorer.matches(&q) {
            let Some(t) = self.catalog.tools.get(m.id) else {
                continue;
            };
            if !visible(t) {
                continue;
            }
            total += 1;
            if found.len() < limit {
                found.push(t);
            }
        }
        (found, total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_names_humps_and_fold_plurals() {
        assert_eq!(
            Words.tokenize("github__createIssue lists the Issues of a repo"),
            ["github", "create", "issue", "list", "issue", "repo"]
        );
        assert_eq!(Words.tokenize("échéance: 2 x"), ["échéance", "2", "x"]);
        assert!(Words.tokenize("the of a").is_empty());
    }
}
