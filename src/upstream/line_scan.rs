//! One line of a stdio upstream's stdout, scanned as it streams by: its length, how deep its
//! JSON nests, and its first bytes — enough to tell, before the line ends, that no JSON-RPC
//! peer will be able to read it, and which request it answers.

/// Deepest nesting serde_json (rmcp's parser) reads; a deeper line is never delivered.
pub const MAX_DEPTH: usize = 128;

/// How many of a line's first bytes are kept (for its id, and to show a non-JSON line).
pub const PREFIX: usize = 256;

/// Why a line will not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    TooLong,
    TooDeep,
}

#[derive(Debug, Default)]
pub struct LineScan {
    pub len: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    pub prefix: Vec<u8>,
}

impl LineScan {
    /// Takes one byte of the line (not its newline).
    pub fn push(&mut self, b: u8, limit: usize) -> Result<(), Unreadable> {
        self.len += 1;
        if self.prefix.len() < PREFIX {
            self.prefix.push(b);
        }
        if self.len > limit {
            return Err(Unreadable::TooLong);
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            return Ok(());
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return Err(Unreadable::TooDeep);
                }
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
        Ok(())
    }

    pub fn reset(&mut self) {
        self.len = 0;
        self.depth = 0;
        self.in_string = false;
        self.escaped = false;
        self.prefix.clear();
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
                let (mut depth, mut in_str, mut esc) = (0usize, false, false);
                while let Some(&b) = self.s.get(self.i) {
                    self.i += 1;
                    if in_str {
                        match (esc, b) {
                            (true, _) => esc = false,
                            (false, b'\\') => esc = true,
                            (false, b'"') => in_str = false,
                            _ => {}
                        }
                        continue;
                    }
                    match b {
                        b'"' => in_str = true,
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                return Some(None);
                            }
                        }
                        _ => {}
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
    fn length_and_depth_trip_where_they_are_crossed() {
        let mut s = LineScan::default();
        let deep = "[".repeat(MAX_DEPTH + 1);
        let tripped = deep
            .bytes()
            .map(|b| s.push(b, usize::MAX))
            .position(|r| r.is_err());
        assert_eq!(tripped, Some(MAX_DEPTH));
        s.reset();
        // Brackets inside strings do not nest.
        let text = format!("\"{}\"", "[".repeat(500));
        assert!(text.bytes().all(|b| s.push(b, usize::MAX).is_ok()));
        s.reset();
        assert_eq!(
            "abcd".bytes().map(|b| s.push(b, 3)).last(),
            Some(Err(Unreadable::TooLong))
        );
    }
}
