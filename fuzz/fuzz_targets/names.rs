//! Name handling: what errors, logs and audit records repeat of a caller's name is bounded and
//! free of control characters; the name checks and the closest-name search accept anything.
#![no_main]

use fedgate::names::{self, MAX_SHOWN_CHARS, PrefixMode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(name) = std::str::from_utf8(data) else {
        return;
    };
    let shown = names::shown(name);
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    // At most MAX_SHOWN_CHARS characters of the name, each control character escaped as at
    // most `\u{9f}` (6), and the length note.
    assert!(
        shown.chars().count() <= MAX_SHOWN_CHARS * 6 + 40,
        "{}",
        shown.len()
    );
    if name.chars().count() <= MAX_SHOWN_CHARS && !name.chars().any(char::is_control) {
        assert_eq!(shown, name);
    }
    let valid = names::check_tool_name(name).is_ok();
    if valid {
        assert!(names::unportable(name).is_none() || name.contains('.') || name.len() > 64);
    }
    let upstreams = ["demo".to_owned(), "gh".to_owned()];
    let exposed = names::expose("demo", ".", PrefixMode::Always, name);
    assert_eq!(
        names::namespace_owner(&exposed, ".", &upstreams),
        Some("demo")
    );
    let _ = names::namespace_owner(name, ".", &upstreams);
    let candidates = [
        "demo.echo",
        "demo.add",
        "gh.create_issue",
        "fedgate.approve",
    ];
    let _ = names::did_you_mean(name, candidates);
    let mid = (0..=name.len() / 2)
        .rev()
        .find(|&i| name.is_char_boundary(i))
        .unwrap_or(0);
    let (a, b) = name.split_at(mid);
    let d = names::edit_distance(a, b);
    assert!(d <= a.chars().count().max(b.chars().count()));
});
