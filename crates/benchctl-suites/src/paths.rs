//! Reading annotation files and resolving the paths they name inside a data directory.

use std::path::{Component, Path, PathBuf};

use crate::{Error, ErrorKind, Result};

/// `root/relative`, refusing paths that could leave `root` (absolute, or with `..`).
pub(crate) fn inside(root: &Path, relative: &str, named_in: &str) -> Result<PathBuf> {
    let rel = Path::new(relative);
    let escapes =
        rel.components().any(|c| matches!(c, Component::ParentDir | Component::RootDir | Component::Prefix(_)));
    if escapes || relative.is_empty() {
        return Err(Error::new(
            ErrorKind::PathEscapes,
            format!("accept image path `{relative}` in {named_in}: paths must stay inside the data directory"),
        ));
    }
    Ok(root.join(rel))
}

/// The text of an annotation file: a missing file is named with `how_to_get`; a directory in
/// its place, or bytes that are not UTF-8 (with the byte offset of the first bad one), are
/// malformed data; a UTF-8 byte order mark (as Windows editors write) is dropped.
pub(crate) fn read_text(path: &Path, how_to_get: &str) -> Result<String> {
    refuse_directory(path)?;
    let bytes = std::fs::read(path).map_err(|e| unreadable(path, how_to_get, e))?;
    let mut text = String::from_utf8(bytes).map_err(|e| not_utf8(path, e.utf8_error().valid_up_to()))?;
    if text.starts_with(BOM) {
        text.drain(..BOM.len_utf8());
    }
    Ok(text)
}

/// Each line of a text file (JSON Lines), read as a stream so that a file of a million lines
/// is never held whole: `line` gets its number (from 1) and its text without the line ending
/// (`\n` or `\r\n`), and its first error ends the reading. The file's own errors are
/// [`read_text`]'s (a non-UTF-8 byte is found once the lines before it were given).
pub(crate) fn for_each_line(
    path: &Path,
    how_to_get: &str,
    mut line: impl FnMut(usize, &str) -> Result<()>,
) -> Result<()> {
    use std::io::BufRead;
    refuse_directory(path)?;
    let file = std::fs::File::open(path).map_err(|e| unreadable(path, how_to_get, e))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let (mut buf, mut offset, mut number) = (Vec::new(), 0, 0);
    loop {
        buf.clear();
        let read = reader.read_until(b'\n', &mut buf).map_err(|e| unreadable(path, how_to_get, e))?;
        if read == 0 {
            return Ok(());
        }
        number += 1;
        let skip = if number == 1 && buf.starts_with(BOM.to_string().as_bytes()) { BOM.len_utf8() } else { 0 };
        let text = std::str::from_utf8(&buf[skip..]).map_err(|e| not_utf8(path, offset + skip + e.valid_up_to()))?;
        line(number, text.strip_suffix('\n').map_or(text, |t| t.strip_suffix('\r').unwrap_or(t)))?;
        offset += read;
    }
}

/// The byte order mark Windows editors open UTF-8 files with.
const BOM: char = '\u{feff}';

fn refuse_directory(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(Error::new(
            ErrorKind::Malformed,
            format!("read {}: it is a directory, not a file", path.display()),
        ));
    }
    Ok(())
}

fn unreadable(path: &Path, how_to_get: &str, e: std::io::Error) -> Error {
    Error::caused_by(ErrorKind::MissingData, format!("read {}: {e} ({how_to_get})", path.display()), e)
}

fn not_utf8(path: &Path, offset: usize) -> Error {
    Error::new(
        ErrorKind::Malformed,
        format!("read {}: not UTF-8 text (invalid byte at offset {offset})", path.display()),
    )
}

/// The JSON in `path`, or `None` with the reason added to `problems` (a missing file, named
/// with `how_to_get`, unreadable text, or a parse error with its line and column).
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    how_to_get: &str,
    problems: &mut Vec<Error>,
) -> Option<T> {
    let parsed = read_text(path, how_to_get).and_then(|text| {
        serde_json::from_str(&text)
            .map_err(|e| Error::caused_by(ErrorKind::Malformed, format!("parse {}: {e}", path.display()), e))
    });
    parsed.map_err(|e| problems.push(e)).ok()
}

/// A JSON object's entries in file order, duplicates kept (a `serde_json` map keeps only the
/// last value of a repeated key, silently dropping a record).
pub(crate) struct Entries(pub Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}
