//! Every log event is exactly one line, whatever its values hold (issue 17, item 6).
//!
//! Caller-supplied names are already cut and escaped where they are logged (`names::shown`),
//! but values reach the log from many places: an upstream's error text, a token's subject, a
//! config path. Rather than trust each call site, the writer under the text log escapes control
//! characters in what the formatter hands it, except the newline that ends the event (and tabs,
//! and the colour codes of a terminal). The formatter writes one event per `write_all`, so a
//! newline inside a value can never start a line of its own. The JSON log needs none of this:
//! serde escapes every control character.

use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// Wraps a [`MakeWriter`] so each event it writes is one line.
pub struct OneLine<M> {
    inner: M,
    /// Colour codes (ESC) pass when the log goes to a terminal with colours on.
    ansi: bool,
}

impl<M> OneLine<M> {
    pub fn new(inner: M, ansi: bool) -> Self {
        Self { inner, ansi }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for OneLine<M> {
    type Writer = Escaping<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Escaping {
            inner: self.inner.make_writer(),
            ansi: self.ansi,
        }
    }
}

pub struct Escaping<W> {
    inner: W,
    ansi: bool,
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let body = buf.strip_suffix(b"\n").unwrap_or(buf);
        let kept = |b: u8| (b >= 0x20 && b != 0x7f) || b == b'\t' || (self.ansi && b == 0x1b);
        if body.iter().all(|&b| kept(b)) {
            self.inner.write_all(buf)?;
            return Ok(buf.len());
        }
        let mut out = Vec::with_capacity(buf.len() + 16);
        for &b in body {
            match b {
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b if kept(b) => out.push(b),
                b => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
            }
        }
        if body.len() < buf.len() {
            out.push(b'\n');
        }
        self.inner.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(input: &[u8], ansi: bool) -> String {
        let mut w = Escaping {
            inner: Vec::new(),
            ansi,
        };
        w.write_all(input).unwrap();
        String::from_utf8(w.inner).unwrap()
    }

    #[test]
    fn a_value_cannot_start_a_line_of_its_own() {
        let out = escaped(b"WARN refused: demo.x\nFORGED ERROR line\r\n", false);
        assert_eq!(out, "WARN refused: demo.x\\nFORGED ERROR line\\r\n");
        assert_eq!(out.lines().count(), 1);
    }

    #[test]
    fn other_controls_are_escaped_and_text_is_kept() {
        assert_eq!(
            escaped("a\tb \u{1b}[31mred é\u{7}\n".as_bytes(), false),
            "a\tb \\x1b[31mred é\\x07\n"
        );
        // A terminal keeps its colours.
        assert_eq!(
            escaped(b"\x1b[2mINFO\x1b[0m ok\n", true),
            "\x1b[2mINFO\x1b[0m ok\n"
        );
        assert_eq!(escaped(b"plain line\n", false), "plain line\n");
    }
}
