//! Which patterns of a set may match a text, from the literals every match of each contains:
//! one SIMD pass (Teddy) over the text for the literals matched as written, one over its ASCII
//! lower-case copy for those matched in any case. A pattern none of whose literals occur is not
//! run at all, so ordinary text costs two vectorised passes, not one automaton per pattern.
//!
//! `aho_corasick::AhoCorasick` gives the same answer but walks its automaton byte by byte for
//! these sets (short literals with many first bytes): about five times slower on prose.

use aho_corasick::{AhoCorasick, Match, Span, packed};

/// One literal and the index of the pattern it stands for (below 64).
#[derive(Debug, Clone, Copy)]
pub(super) struct Anchor {
    pub literal: &'static str,
    pub owner: usize,
    /// Matched in any ASCII case (the pattern is case-insensitive).
    pub folded: bool,
}

/// A compiled set of anchors; [`Anchors::which`] says which owners' literals occur.
pub(super) struct Anchors {
    exact: Option<Group>,
    folded: Option<Group>,
}

impl Anchors {
    /// `None` when a literal is empty or an owner is 64 or more (callers then run every
    /// pattern).
    pub fn new(anchors: &[Anchor]) -> Option<Self> {
        if anchors
            .iter()
            .any(|a| a.literal.is_empty() || a.owner >= 64)
        {
            return None;
        }
        let pick = |folded: bool| -> Vec<(String, usize)> {
            anchors
                .iter()
                .filter(|a| a.folded == folded)
                .map(|a| {
                    let lit = if folded {
                        a.literal.to_ascii_lowercase()
                    } else {
                        a.literal.to_owned()
                    };
                    (lit, a.owner)
                })
                .collect()
        };
        Some(Self {
            exact: Group::new(pick(false)).ok()?,
            folded: Group::new(pick(true)).ok()?,
        })
    }

    /// A bit per owner whose literals occur in `text` (bit `owner`).
    pub fn which(&self, text: &str) -> u64 {
        let mut bits = self.exact.as_ref().map_or(0, |g| g.which(text.as_bytes()));
        if let Some(g) = &self.folded {
            bits |= g.which(text.to_ascii_lowercase().as_bytes());
        }
        bits
    }
}

/// Literals searched in one kind of text, each with what a match of it tells.
struct Group {
    finder: Finder,
    /// Per literal: its owner's bit, and those of every literal that is a prefix of it (the
    /// searcher reports the longest literal at a position, not the others starting there).
    bits: Vec<u64>,
    /// Per literal: how far past a match's start the next literal can start (1 when another
    /// literal can overlap its tail).
    skip: Vec<usize>,
}

enum Finder {
    Teddy(packed::Searcher),
    /// Where Teddy cannot run (no SIMD on this CPU), the automaton: slower, same answer.
    Automaton(AhoCorasick),
}

impl Group {
    /// `Ok(None)` for no literals.
    fn new(literals: Vec<(String, usize)>) -> Result<Option<Self>, aho_corasick::BuildError> {
        if literals.is_empty() {
            return Ok(None);
        }
        let bits = literals
            .iter()
            .map(|(lit, _)| {
                literals
                    .iter()
                    .filter(|(other, _)| lit.starts_with(other.as_str()))
                    .fold(0, |acc, (_, owner)| acc | 1u64 << owner)
            })
            .collect();
        let skip = literals
            .iter()
            .map(|(lit, _)| overlap_start(lit, literals.iter().map(|(l, _)| l.as_str())))
            .collect();
        let teddy = packed::Config::new()
            .match_kind(packed::MatchKind::LeftmostLongest)
            .builder()
            .extend(literals.iter().map(|(l, _)| l))
            .build();
        let finder = match teddy {
            Some(s) => Finder::Teddy(s),
            None => Finder::Automaton(AhoCorasick::new(literals.iter().map(|(l, _)| l))?),
        };
        Ok(Some(Self { finder, bits, skip }))
    }

    fn which(&self, hay: &[u8]) -> u64 {
        let mut bits = 0;
        if let Finder::Automaton(ac) = &self.finder {
            for m in ac.find_overlapping_iter(hay) {
                bits |= self.bits[m.pattern().as_usize()];
            }
            return bits;
        }
        let mut at = 0;
        while let Some(m) = self.find(hay, at) {
            let i = m.pattern().as_usize();
            bits |= self.bits[i];
            at = m.start() + self.skip[i];
        }
        bits
    }

    fn find(&self, hay: &[u8], at: usize) -> Option<Match> {
        match &self.finder {
            Finder::Teddy(s) if at < hay.len() => s.find_in(hay, Span::from(at..hay.len())),
            _ => None,
        }
    }
}

/// The first offset past a match of `lit` at which another literal may start inside it (its
/// length when none can).
fn overlap_start<'a>(lit: &str, all: impl Iterator<Item = &'a str> + Clone) -> usize {
    (1..lit.len())
        .find(|&k| {
            let tail = &lit.as_bytes()[k..];
            all.clone().any(|other| {
                let o = other.as_bytes();
                o.starts_with(tail) || tail.starts_with(o)
            })
        })
        .unwrap_or(lit.len().max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchors(list: &[(&'static str, usize, bool)]) -> Anchors {
        let v: Vec<Anchor> = list
            .iter()
            .map(|&(literal, owner, folded)| Anchor {
                literal,
                owner,
                folded,
            })
            .collect();
        Anchors::new(&v).unwrap()
    }

    #[test]
    fn every_owner_whose_literal_occurs_is_named() {
        let a = anchors(&[
            ("AKIA", 0, false),
            ("password", 1, true),
            ("--password", 2, false),
            ("pass", 3, true),
            ("KIAB", 4, false),
        ]);
        assert_eq!(a.which("nothing to see here"), 0);
        assert_eq!(a.which("id AKIAXYZ"), 1);
        // Literals overlapping or sharing a start are all seen.
        assert_eq!(a.which("curl --PASSWORD x"), 0b1010);
        assert_eq!(a.which("curl --password x"), 0b1110);
        assert_eq!(a.which("AKIAB"), 0b10001);
        // Case counts only for the literals matched as written.
        assert_eq!(a.which("akia PassWord"), 0b1010);
    }

    #[test]
    fn the_same_answer_as_an_overlapping_automaton_on_awkward_text() {
        let lits: [(&str, usize, bool); 6] = [
            ("aa", 0, false),
            ("aab", 1, false),
            ("ab", 2, false),
            ("ba", 3, false),
            ("Key", 4, true),
            ("eyJ", 5, false),
        ];
        let a = anchors(&lits);
        let ac = AhoCorasick::new(lits.iter().map(|l| l.0.to_ascii_lowercase())).unwrap();
        for text in [
            "aaab",
            "abab",
            "xaaba",
            "KEYeyJ",
            "keyJ",
            "a",
            "",
            "é aab ü",
        ] {
            let want = ac
                .find_overlapping_iter(&text.to_ascii_lowercase())
                .map(|m| lits[m.pattern().as_usize()])
                .filter(|l| l.2 || text.contains(l.0))
                .fold(0u64, |acc, l| acc | 1 << l.1);
            assert_eq!(a.which(text), want, "{text}");
        }
    }
}
