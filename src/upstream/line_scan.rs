//! What can be told of a stdio upstream's line that did not decode: how deep its JSON nests,
//! and which request it answers (from its first bytes, when the rest was cut).

/// Deepest nesting serde_json reads; a deeper line never decodes.
pub const MAX_DEPTH: usize = 128;

/// How many of a line's first bytes are kept when the rest is cut (enough for its id).
pub const PREFIX: usize = 256;

/// Whether `line` nests deeper than [`MAX_DEPTH`] (brackets inside strings do not count).
pub fn too_deep(line: &[u8]) -> bool {
    let mut nesting = Nesting::default();
    line.iter().any(|&b| nesting.step(b) > MAX_DEPTH)
}

/// How deep JSON text nests, byte by byte, brackets inside strings not counted.
#[derive(Default)]
struct Nesting {
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl Nesting {
    /// Takes the next byte; the depth after it.
    fn step(&mut self, b: u8) -> usize {
        if self.in_string {
            match (self.escaped, b) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return self.depth;
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
        self.depth
    }
}

/// The `id` of the JSON-RPC response whose line starts with `prefix`, as JSON text (`7`,
/// `"a"`), if its first top-level keys show it is a response (`result` or `error`, no
/// `method`) and hold a complete id.
pub fn response_id(prefix: &[u8]) -> Option<String> {
    let mut keys = TopLevelKeys::new(prefix);
    let (mut id, mut response) = (None, false);
    while let Some((key, value)) = keys.next_entry() {
        match key {
            b"id" => id = value.map(|v| String::from_utf8_lossy(v).into_owned()),
            b"result" | b"error" => response = true,
            b"method" => return None,
            _ => {}
        }
        if id.is_some() && response {
            break;
        }
    }
    id.filter(|_| response)
}

/// Walks the keys of the outermost object; gives a key's value text only for strings and
/// numbers (what an id may be), and stops where the prefix ends.
struct TopLevelKeys<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> TopLevelKeys<'a> {
    fn new(s: &'a [u8]) -> Self {
        let i = s.iter().position(|b| *b == b'{').map_or(s.len(), |i| i + 1);
        Self { s, i }
    }

    fn skip_ws(&mut self) {
        while self.s.get(self.i).is_some_and(|b| b.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    /// A string starting at `i` (at its quote): its contents, and `i` past its end.
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.i + 1;
        let mut j = start;
        while let Some(&b) = self.s.get(j) {
            match b {
                b'\\' => j += 2,
                b'"' => {
                    self.i = j + 1;
                    return self.s.get(start..j);
                }
                _ => j += 1,
            }
        }
        None
    }

    /// Skips one value (any JSON) at `i`; returns the text of a string (with quotes) or number.
    fn value(&mut self) -> Option<Option<&'a [u8]>> {
        let start = self.i;
        match self.s.get(self.i)? {
            b'"' => {
                self.string()?;
                Some(self.s.get(start..self.i))
            }
            b'{' | b'[' => {
                // Starts at the opening bracket, so depth 0 again is its closing one.
                let mut nesting = Nesting::default();
                while let Some(&b) = self.s.get(self.i) {
                    self.i += 1;
                    if nesting.step(b) == 0 {
                        return Some(None);
                    }
                }
                None
            }
            _ => {
                while self
                    .s
                    .get(self.i)
                    .is_some_and(|b| !matches!(b, b',' | b'}') && !b.is_ascii_whitespace())
                {
                    self.i += 1;
                }
                // A number or literal cut by the end of the prefix is not complete.
                (self.i < self.s.len()).then(|| self.s.get(start..self.i))
            }
        }
    }

    fn next_entry(&mut self) -> Option<(&'a [u8], Option<&'a [u8]>)> {
        self.skip_ws();
        if self.s.get(self.i) == Some(&b',') {
            self.i += 1;
            self.skip_ws();
        }
        if self.s.get(self.i) != Some(&b'"') {
            return None;
        }
        let key = self.string()?;
        self.skip_ws();
        if self.s.get(self.i) != Some(&b':') {
            return None;
        }
        self.i += 1;
        self.skip_ws();
        // A key whose value the prefix cuts off is still reported (for `result`/`method`).
        let value = self.value();
        Some((key, value.flatten()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_responses_only() {
        let r = |s: &str| response_id(s.as_bytes());
        assert_eq!(
            r(r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"te"#),
            Some("7".into())
        );
        assert_eq!(
            r(r#"{"jsonrpc":"2.0","id":"a\"b","error":{"code":1"#),
            Some(r#""a\"b""#.into())
        );
        assert_eq!(
            r(r#"{"result":{"x":[1,2,{"id":9}]},"id":3}"#),
            Some("3".into())
        );
        // A server-to-client request, a notification, an id the prefix cuts, no object.
        assert_eq!(
            r(r#"{"jsonrpc":"2.0","id":4,"method":"sampling/createMessage","params":{"#),
            None
        );
        assert_eq!(
            r(r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#),
            None
        );
        assert_eq!(r(r#"{"jsonrpc":"2.0","result":{},"id":12"#), None);
        assert_eq!(r("garbage"), None);
    }

    #[test]
    fn depth_counts_brackets_outside_strings() {
        assert!(!too_deep("[".repeat(MAX_DEPTH).as_bytes()));
        assert!(too_deep("[".repeat(MAX_DEPTH + 1).as_bytes()));
        let text = format!("\"{}\\\"{}\"", "[".repeat(500), "{".repeat(500));
        assert!(!too_deep(text.as_bytes()), "{text}");
    }
}
