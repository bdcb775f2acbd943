//! Images held inside annotation files, as the hub's `datasets` releases hold them (parquet
//! and Arrow IPC cells): [`EmbeddedImage`] names the file and the cell, [`ImageCell`] says
//! where the bytes are.
//!
//! A release is mostly its images' bytes (a few GB), so its cells are not held: each is an
//! address in its file ([`CellFile`]: a part of it, a row of the part, the path to the bytes
//! inside the row) read again when a decoder first asks for it. A part is what the format
//! reads at once (a parquet binary column's window of rows, or a row group's column; an Arrow
//! record batch); the few parts read last are kept ([`RecentParts`]), since the decoders walk
//! a suite's images in file order and a part holds several of them. A suite's memory is then
//! its texts and those parts, not the file.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::{Error, ErrorKind, Result};

/// An image's encoded bytes held inside an annotation file: the file, the cell's name in it
/// (`ex_0_img_0`, `row 12 image_0`) and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedImage {
    /// The file holding the bytes.
    pub file: PathBuf,
    /// The image's name inside it (e.g. `ex_0_img_0`, `row 12 image_0`).
    pub name: String,
    pub cell: ImageCell,
}

impl EmbeddedImage {
    /// The image's encoded bytes; an error names the file and the cell.
    pub fn bytes(&self) -> Result<ImageBytes> {
        self.cell.read().map_err(|e| {
            Error::new(ErrorKind::CorruptImage, format!("read image {}#{}: {e}", self.file.display(), self.name))
        })
    }
}

/// By file and name only: equal images have equal names, and hashing every image's bytes to
/// find a suite's distinct images would read them all again.
impl std::hash::Hash for EmbeddedImage {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.file.hash(state);
        self.name.hash(state);
    }
}

/// An embedded image's encoded bytes, shared: a copy of them, or the parquet reader's own
/// buffer (a slice of the decompressed page, not copied again).
#[derive(Clone)]
pub struct ImageBytes(HeldBytes);

#[derive(Clone)]
enum HeldBytes {
    Shared(Arc<[u8]>),
    Parquet(parquet::data_type::ByteArray),
}

impl std::ops::Deref for ImageBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            HeldBytes::Shared(bytes) => bytes,
            HeldBytes::Parquet(bytes) => bytes.data(),
        }
    }
}

impl AsRef<[u8]> for ImageBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<&[u8]> for ImageBytes {
    fn from(bytes: &[u8]) -> Self {
        ImageBytes(HeldBytes::Shared(bytes.into()))
    }
}

impl From<Vec<u8>> for ImageBytes {
    fn from(bytes: Vec<u8>) -> Self {
        ImageBytes(HeldBytes::Shared(bytes.into()))
    }
}

impl From<parquet::data_type::ByteArray> for ImageBytes {
    fn from(bytes: parquet::data_type::ByteArray) -> Self {
        ImageBytes(HeldBytes::Parquet(bytes))
    }
}

impl PartialEq for ImageBytes {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

impl Eq for ImageBytes {}

impl std::fmt::Debug for ImageBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ImageBytes({} bytes)", self.len())
    }
}

/// Where an embedded image's bytes are: held in memory, or a cell of a file read when asked
/// for.
#[derive(Clone, PartialEq, Eq)]
pub struct ImageCell(Cell);

#[derive(Clone, PartialEq, Eq)]
enum Cell {
    Held(ImageBytes),
    InFile(FileCell),
    /// Bytes stored as they are at a known place of the file (an uncompressed Arrow body).
    InRange(RangeCell),
}

impl ImageCell {
    /// Bytes held in memory.
    pub fn held(bytes: impl Into<ImageBytes>) -> Self {
        ImageCell(Cell::Held(bytes.into()))
    }

    /// The bytes at `path` inside row `row` of part `part` of `file`.
    pub(crate) fn in_file(file: &Arc<dyn CellFile>, part: usize, row: usize, path: Vec<Step>) -> Self {
        ImageCell(Cell::InFile(FileCell { file: Arc::clone(file), part, row, path: path.into() }))
    }

    /// The `len` bytes at byte `offset` of `file`, stored there as they are.
    pub(crate) fn in_range(file: &Arc<dyn CellFile>, offset: u64, len: usize) -> Self {
        ImageCell(Cell::InRange(RangeCell { file: Arc::clone(file), offset, len }))
    }

    /// The bytes, read from their file where they are not held; the error says why they could
    /// not be (the file changed or vanished since the suite was read, a damaged page).
    pub fn read(&self) -> std::result::Result<ImageBytes, String> {
        let unchanged = |file: &dyn CellFile| {
            if stamp(file.path()) == file.stamp() {
                Ok(())
            } else {
                Err(format!("{} changed since the suite was read: read the suite again", file.path().display()))
            }
        };
        match &self.0 {
            Cell::Held(bytes) => Ok(bytes.clone()),
            Cell::InFile(cell) => {
                unchanged(cell.file.as_ref())?;
                cell.file.read(cell.part, cell.row, &cell.path)
            }
            Cell::InRange(cell) => {
                unchanged(cell.file.as_ref())?;
                read_range(cell.file.path(), cell.offset, cell.len)
            }
        }
    }

    /// Whether the bytes are read from their file when asked for, not held.
    pub fn is_read_when_asked(&self) -> bool {
        !matches!(self.0, Cell::Held(_))
    }
}

/// The `len` bytes at `offset` of the file at `path`.
fn read_range(path: &Path, offset: u64, len: usize) -> std::result::Result<ImageBytes, String> {
    use std::io::{Read, Seek};
    let read = || -> std::io::Result<Vec<u8>> {
        let mut file = std::fs::File::open(path)?;
        file.seek(std::io::SeekFrom::Start(offset))?;
        let mut bytes = vec![0u8; len];
        file.read_exact(&mut bytes)?;
        Ok(bytes)
    };
    read().map(ImageBytes::from).map_err(|e| format!("read {} bytes at byte {offset} of {}: {e}", len, path.display()))
}

impl std::fmt::Debug for ImageCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Cell::Held(bytes) => bytes.fmt(f),
            Cell::InFile(cell) => write!(f, "FileCell(part {}, row {}, {:?})", cell.part, cell.row, cell.path),
            Cell::InRange(cell) => write!(f, "RangeCell({} bytes at byte {})", cell.len, cell.offset),
        }
    }
}

/// One step from a row to a cell inside it: a named field, or a list's element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    Field(String),
    Element(usize),
}

/// A file whose cells are read when asked for: a parquet or Arrow IPC file, as its reader
/// (`crate::manifest`) addresses its cells.
pub(crate) trait CellFile: Send + Sync {
    /// The file.
    fn path(&self) -> &Path;

    /// Its size and modification time when the suite was read ([`stamp`]).
    fn stamp(&self) -> Stamp;

    /// The bytes at `path` inside row `row` of part `part`.
    fn read(&self, part: usize, row: usize, path: &[Step]) -> std::result::Result<ImageBytes, String>;
}

/// A cell of a [`CellFile`].
#[derive(Clone)]
struct FileCell {
    file: Arc<dyn CellFile>,
    part: usize,
    row: usize,
    path: Arc<[Step]>,
}

impl PartialEq for FileCell {
    fn eq(&self, other: &Self) -> bool {
        self.file.path() == other.file.path()
            && (self.part, self.row) == (other.part, other.row)
            && self.path == other.path
    }
}

impl Eq for FileCell {}

/// Bytes stored as they are at a place of a [`CellFile`].
#[derive(Clone)]
struct RangeCell {
    file: Arc<dyn CellFile>,
    offset: u64,
    len: usize,
}

impl PartialEq for RangeCell {
    fn eq(&self, other: &Self) -> bool {
        self.file.path() == other.file.path() && (self.offset, self.len) == (other.offset, other.len)
    }
}

impl Eq for RangeCell {}

/// A file's size and modification time: a file changed since its suite was read is not read
/// for its cells (they may be elsewhere now).
pub(crate) type Stamp = (u64, Option<std::time::SystemTime>);

pub(crate) fn stamp(path: &Path) -> Stamp {
    std::fs::metadata(path).map(|m| (m.len(), m.modified().ok())).unwrap_or((0, None))
}

/// The parts of a file read last (a parquet row group's column, an Arrow record batch), each
/// read once however many threads ask for it at the same time, the least recently used
/// dropped beyond `per_thread` for each thread and `per_thread` more: the parts a thread
/// reads from at once (a row group's two image columns are two parts, a record batch one).
pub(crate) struct RecentParts<K, V> {
    per_thread: usize,
    /// Most recently used last.
    parts: Mutex<Vec<(K, Arc<PartSlot<V>>)>>,
}

/// A part, once read (or why it could not be).
type PartSlot<V> = OnceLock<std::result::Result<Arc<V>, String>>;

impl<K: PartialEq, V> RecentParts<K, V> {
    pub fn new(per_thread: usize) -> Self {
        RecentParts { per_thread, parts: Mutex::default() }
    }

    /// Part `key`: kept, or `read` (once, when several threads ask at the same time).
    pub fn get(
        &self,
        key: K,
        read: impl FnOnce() -> std::result::Result<V, String>,
    ) -> std::result::Result<Arc<V>, String> {
        let slot = {
            let mut parts = self.parts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let slot = match parts.iter().position(|(k, _)| *k == key) {
                Some(at) => parts.remove(at).1,
                None => Arc::default(),
            };
            parts.push((key, Arc::clone(&slot)));
            let over = parts.len().saturating_sub(self.per_thread * (rayon::current_num_threads() + 1));
            parts.drain(..over);
            slot
        };
        slot.get_or_init(|| read().map(Arc::new)).clone()
    }
}
