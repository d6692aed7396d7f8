//! Replacing a file a user owns (a client's config, a gateway.toml): the new text goes to a
//! temporary file beside it, is checked there, the old text is kept as `<file>.bak`, and only
//! then does the new file take the old one's place — nothing is overwritten without a backup.

use super::CliError;
use std::path::{Path, PathBuf};

/// Writes `text` to `file` (whose current text is `old`, if it exists) once `check` accepts
/// the temporary copy; the backup's path when there was an old file.
pub fn replace(
    file: &Path,
    old: Option<&str>,
    text: &str,
    check: impl FnOnce(&Path) -> Result<(), CliError>,
) -> Result<Option<PathBuf>, CliError> {
    let shown = file.display();
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let tmp = with_suffix(file, ".fedgate-tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write next to {shown}: {e}"))?;
    let removing = |why: CliError| {
        let _ = std::fs::remove_file(&tmp);
        why
    };
    check(&tmp).map_err(removing)?;
    let backup = match old {
        Some(old) => {
            let b = with_suffix(file, ".bak");
            std::fs::write(&b, old).map_err(|e| {
                removing(
                    format!(
                        "cannot keep a backup at {}: {e}; nothing was changed",
                        b.display()
                    )
                    .into(),
                )
            })?;
            Some(b)
        }
        None => None,
    };
    std::fs::rename(&tmp, file)
        .map_err(|e| removing(format!("cannot write {shown}: {e}; nothing was changed").into()))?;
    Ok(backup)
}

fn with_suffix(file: &Path, suffix: &str) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}
