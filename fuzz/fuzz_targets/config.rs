//! Config, trust tier and flow files: any text gives a snapshot or diagnostics, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = fedgate::config::load_str("fuzz.toml", text);
    let _ = fedgate::config::tier::parse("fuzz-tier.toml", "fuzz", text);
    let upstreams = ["demo".to_owned(), "github".to_owned()];
    if let Err(diags) = fedgate::config::flows::parse("fuzz-flow.toml", text, &upstreams, ".") {
        // Every diagnostic names a line of the file (or 0 for the whole file).
        let lines = text.lines().count() + 1;
        for d in diags {
            assert!(d.line <= lines, "line {} of {lines}: {}", d.line, d.message);
        }
    }
});
