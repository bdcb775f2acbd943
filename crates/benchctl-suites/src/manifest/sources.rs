//! A manifest's annotation files: one (`source.file`), or several (`source.files`: names, or
//! patterns whose last component holds `*`), each file's items tagged with its stem
//! (`source.tag`, default `subset`). A record's file stem is `{_source}` in templates.

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::manifest_error;
use super::raw::RawSource;
use crate::pattern::matches;
use crate::{paths, Error, ErrorKind, Result};

/// The annotation files a manifest reads.
#[derive(Debug)]
pub(crate) struct Sources {
    /// File names or patterns, relative to the data directory, in the manifest's order.
    pub patterns: Vec<String>,
    /// With `source.files`: the tag each file's stem becomes.
    pub tag: Option<String>,
    /// Where `source.tag` is, for messages.
    pub tag_span: Option<Range<usize>>,
}

impl Sources {
    pub fn parse(raw: &RawSource, origin: &str, line: &dyn Fn(Range<usize>) -> usize) -> Result<Self> {
        let bad = |key: &str, span: Range<usize>, what: &str| manifest_error(origin, key, line(span), what.to_string());
        let (patterns, several) = match (&raw.file, &raw.files) {
            (Some(file), None) => (vec![(file.get_ref().clone(), file.span(), "source.file".to_string())], false),
            (None, Some(files)) if !files.get_ref().is_empty() => {
                let each = files.get_ref().iter().enumerate();
                (each.map(|(i, f)| (f.get_ref().clone(), f.span(), format!("source.files[{i}]"))).collect(), true)
            }
            (None, Some(files)) => return Err(bad("source.files", files.span(), "lists no file")),
            (Some(_), Some(files)) => return Err(bad("source.files", files.span(), "give `file` or `files`, not both")),
            (None, None) => {
                return Err(Error::new(
                    ErrorKind::Manifest,
                    format!("read manifest {origin}: `[source]` needs `file` (one file) or `files` (a list of files or patterns)"),
                ))
            }
        };
        for (pattern, span, key) in &patterns {
            let parent = Path::new(pattern).parent().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
            if parent.contains('*') {
                return Err(bad(key, span.clone(), "a pattern's `*` may only be in its file name"));
            }
            paths::inside(Path::new(""), &pattern.replace('*', "x"), "the manifest")
                .map_err(|_| bad(key, span.clone(), "must be a path inside the data directory"))?;
        }
        let tag = match (&raw.tag, several) {
            (Some(tag), false) => {
                return Err(bad("source.tag", tag.span(), "names the tag of `files`; with one `file` there is none"))
            }
            (Some(tag), true) if tag.get_ref().is_empty() => {
                return Err(bad("source.tag", tag.span(), "must not be empty"))
            }
            (Some(tag), true) => Some(tag.get_ref().clone()),
            (None, true) => Some("subset".to_string()),
            (None, false) => None,
        };
        Ok(Sources {
            patterns: patterns.into_iter().map(|(p, _, _)| p).collect(),
            tag,
            tag_span: raw.tag.as_ref().map(|t| t.span()),
        })
    }

    /// The files under `data_dir`, each pattern's matches in name order; a pattern nothing
    /// matches is missing data, naming it. A file may be a symbolic link (a hub cache's
    /// snapshot is made of them) as long as it leads to a file inside the data directory: one
    /// that leads out of it is refused, as an image's is, naming both paths; a loop or a
    /// broken link is named.
    pub fn files(&self, data_dir: &Path) -> Result<Vec<PathBuf>> {
        let root = paths::DataRoot::new(data_dir);
        let mut files = Vec::new();
        for pattern in &self.patterns {
            if !pattern.contains('*') {
                let file = data_dir.join(pattern);
                if file.is_symlink() {
                    check_link(&file, &root, pattern)?;
                }
                files.push(file);
                continue;
            }
            let relative = Path::new(pattern);
            let dir = data_dir.join(relative.parent().unwrap_or(Path::new("")));
            let name = relative.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let entries = std::fs::read_dir(&dir).map_err(|e| {
                Error::caused_by(
                    ErrorKind::MissingData,
                    format!("find `{pattern}` (the manifest's `source.files`) in {}: {e}", dir.display()),
                    e,
                )
            })?;
            let mut matched = Vec::new();
            for entry in entries.flatten() {
                if !matches(&name, &entry.file_name().to_string_lossy()) {
                    continue;
                }
                let path = entry.path();
                let is_file = match entry.file_type() {
                    Ok(t) if t.is_symlink() => check_link(&path, &root, pattern)?,
                    Ok(t) => t.is_file(),
                    Err(_) => false,
                };
                if is_file {
                    matched.push(path);
                }
            }
            if matched.is_empty() {
                return Err(Error::new(
                    ErrorKind::MissingData,
                    format!(
                        "find `{pattern}` (the manifest's `source.files`): no file in {} matches it",
                        dir.display()
                    ),
                ));
            }
            matched.sort();
            files.extend(matched);
        }
        Ok(files)
    }

    /// What a missing file is named as: the manifest key that lists it.
    pub fn key(&self) -> &'static str {
        if self.tag.is_some() {
            "source.files"
        } else {
            "source.file"
        }
    }
}

/// Whether the symbolic link `path` (listed by `pattern`) leads to a file inside the data
/// directory: an error when it leads out of it, loops, or leads nowhere.
fn check_link(path: &Path, root: &paths::DataRoot, pattern: &str) -> Result<bool> {
    let target = std::fs::metadata(path).map_err(|e| {
        let what = if e.raw_os_error() == Some(libc_eloop()) {
            "it is a loop of symbolic links".to_string()
        } else {
            format!("it is a symbolic link that leads nowhere ({e})")
        };
        Error::caused_by(
            ErrorKind::MissingData,
            format!("read {} (`{pattern}` of the manifest's `source`): {what}", path.display()),
            e,
        )
    })?;
    if let Some(real) = root.leads_outside(path) {
        return Err(Error::new(
            ErrorKind::PathEscapes,
            format!(
                "read {} (`{pattern}` of the manifest's `source`): it leads to {}, outside the data directory {} (through a symbolic link); link or copy the file inside it",
                path.display(),
                real.display(),
                root.path().display()
            ),
        ));
    }
    Ok(target.is_file())
}

/// `ELOOP`, the error a loop of symbolic links gives (40 on Linux, 62 on the BSDs and macOS).
fn libc_eloop() -> i32 {
    if cfg!(any(
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "openbsd",
        target_os = "netbsd"
    )) {
        62
    } else {
        40
    }
}

/// The stem of an annotation file.
pub(crate) fn stem(file: &Path) -> String {
    file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Each annotation file's name as `{_source}`, the files' tag and default ids give it: its
/// stem, or, where two files share a stem (`a/color.json`, `b/color.json`), its path below the
/// data directory without the extension (`a/color`, `b/color`), `/`-separated.
pub(crate) fn source_names(files: &[PathBuf], data_dir: &Path) -> Vec<String> {
    let stems: Vec<String> = files.iter().map(|f| stem(f)).collect();
    files
        .iter()
        .zip(&stems)
        .map(|(file, own)| {
            if stems.iter().filter(|s| *s == own).count() < 2 {
                return own.clone();
            }
            let below = file.strip_prefix(data_dir).unwrap_or(file).with_extension("");
            below.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/")
        })
        .collect()
}
