//! Rejections of each validation part, each reported at its line.

use crate::config::{Diagnostic, load_str};

fn errors(text: &str) -> Vec<Diagnostic> {
    match load_str("t.toml", text) {
        Ok(_) => Vec::new(),
        Err(e) => e,
    }
}
