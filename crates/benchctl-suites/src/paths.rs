//! Reading annotation files and resolving the paths they name inside a data directory.

use std::path::{Component, Path, PathBuf};

use crate::{Error, ErrorKind, Result};

/// `root/relative`, refusing paths that could leave `root` (absolute, or with `..`).
pub(crate) fn inside(root: &Path, relative: &str, named_in: &str) -> Result<PathBuf> {
    let rel = Path::new(relative);
    let escapes = rel.components().any(|c| {
        matches!(c, Component::ParentDir | Component::RootDir | Component::Prefix(_))
    });
    if escapes || relative.is_empty() {
        return Err(Error::new(
            ErrorKind::PathEscapes,
            format!("accept image path `{relative}` in {named_in}: paths must stay inside the data directory"),
        ));
    }
    Ok(root.join(rel))
}

/// The JSON in `path`, or `None` with the reason added to `problems` (a missing file, named
/// with `how_to_get`, or a parse error with its line and column).
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    how_to_get: &str,
    problems: &mut Vec<Error>,
) -> Option<T> {
    let parsed = std::fs::read_to_string(path)
        .map_err(|e| Error::new(ErrorKind::MissingData, format!("read {}: {e} ({how_to_get})", path.display())))
        .and_then(|text| {
            // A UTF-8 byte order mark (as Windows editors write) is not part of the JSON.
            serde_json::from_str(text.strip_prefix('\u{feff}').unwrap_or(&text))
                .map_err(|e| Error::new(ErrorKind::Malformed, format!("parse {}: {e}", path.display())))
        });
    parsed.map_err(|e| problems.push(e)).ok()
}
