//! Whether a stdio command can be started here (for `fedgate check`'s warning and for
//! `fedgate add`, which prefers an installed copy of a server).

use std::path::Path;

/// `@self`, a path that exists (relative ones against `cwd` when given), or a name found on
/// PATH.
pub fn found(command: &str, cwd: Option<&str>) -> bool {
    if command == "@self" {
        return true;
    }
    let path = Path::new(command);
    if command.contains('/') {
        return match cwd {
            Some(dir) if path.is_relative() => Path::new(dir).join(path).exists(),
            _ => path.exists(),
        };
    }
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(command).is_file()))
}
