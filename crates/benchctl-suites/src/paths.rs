//! Resolving annotation paths inside a data directory.

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
