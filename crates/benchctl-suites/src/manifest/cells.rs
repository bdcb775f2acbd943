//! What reading an annotation file yields: its records, each with where it was read, and the
//! binary cells (image bytes) beside them, each held or read from the file when asked for.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::ImageCell;

/// One record and where it was read (`line 4`, `entry 3`, `row 12`).
pub(crate) struct SourceRecord {
    pub value: Value,
    pub at: String,
    /// The key of a record in a JSON object keyed by id.
    pub key: Option<String>,
}

/// The binary cells of one annotation file (image bytes, as `datasets` stores an image: a
/// struct of `bytes` and `path`, or a plain binary column), one [`ImageCell`] each. A record's value
/// holds a token in place of each: text that names this process's own nonce, so no text an
/// annotation file holds can pass for one, and a JSON, CSV or TSV file has none.
pub(crate) struct Blobs {
    /// The file the bytes were read from.
    pub file: PathBuf,
    prefix: String,
    /// Added to by the readers of a file's row groups at once.
    cells: std::sync::Mutex<Vec<ImageCell>>,
}

impl Blobs {
    pub fn new(file: &Path) -> Self {
        use std::hash::BuildHasher;
        static NONCE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let nonce = NONCE.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(file));
        Blobs { file: file.to_path_buf(), prefix: format!("\u{0}bytes {nonce:016x} #"), cells: Default::default() }
    }

    /// Holds `cell` (of `len` bytes, where known); the token that stands for it in a record.
    pub fn add(&self, cell: ImageCell, len: Option<usize>) -> Value {
        let mut all = self.cells.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        all.push(cell);
        let index = all.len() - 1;
        Value::String(match len {
            Some(len) => format!("{}{index} ({len} bytes)", self.prefix),
            None => format!("{}{index} (bytes)", self.prefix),
        })
    }

    /// Holds a copy of `bytes`; the token that stands for them in a record.
    pub fn add_copy(&self, bytes: &[u8]) -> Value {
        self.add(ImageCell::held(bytes), Some(bytes.len()))
    }

    /// The cell a record's value stands for, when it is one of this file's tokens.
    pub fn get(&self, value: &Value) -> Option<ImageCell> {
        let rest = value.as_str()?.strip_prefix(&self.prefix)?;
        let index: usize = rest.split(' ').next()?.parse().ok()?;
        self.cells.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(index).cloned()
    }
}
