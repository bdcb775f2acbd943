//! Images held inside annotation files, as the hub's `datasets` releases hold them (parquet
//! and Arrow IPC cells): [`EmbeddedImage`] names the file and the cell, [`ImageCell`] says
//! where the bytes are.
//!
//! A parquet release is mostly its images' bytes (a few GB), so its cells are not held: each
//! is an address (row group, row, the path to the bytes inside the row) read again when a
//! decoder first asks for it. Reading one cell reads its row group's column (one top-level
//! field: pages are compressed, so a cell alone cannot be read); the few column chunks read
//! last are kept, since the decoders walk a suite's images in file order and a row group
//! holds a hundred of them. A suite's memory is then its texts and those chunks, not the file.

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

/// Where an embedded image's bytes are: held in memory, or a parquet cell read when asked for.
#[derive(Clone, PartialEq, Eq)]
pub struct ImageCell(Cell);

#[derive(Clone, PartialEq, Eq)]
enum Cell {
    Held(ImageBytes),
    Parquet(ParquetCell),
}

impl ImageCell {
    /// Bytes held in memory.
    pub fn held(bytes: impl Into<ImageBytes>) -> Self {
        ImageCell(Cell::Held(bytes.into()))
    }

    /// The bytes at `path` inside row `row` of row group `group` of `file`'s parquet file.
    pub(crate) fn parquet(file: &Arc<ParquetCells>, group: usize, row: usize, path: Vec<Step>) -> Self {
        ImageCell(Cell::Parquet(ParquetCell { file: Arc::clone(file), group, row, path: path.into() }))
    }

    /// The bytes, read from their file where they are not held; the error says why they could
    /// not be (the file changed or vanished since the suite was read, a damaged page).
    pub fn read(&self) -> std::result::Result<ImageBytes, String> {
        match &self.0 {
            Cell::Held(bytes) => Ok(bytes.clone()),
            Cell::Parquet(cell) => cell.read(),
        }
    }

    /// Whether the bytes are read from the file when asked for, not held.
    pub fn is_read_when_asked(&self) -> bool {
        matches!(self.0, Cell::Parquet(_))
    }
}

impl std::fmt::Debug for ImageCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Cell::Held(bytes) => bytes.fmt(f),
            Cell::Parquet(cell) => {
                write!(f, "ParquetCell(row group {}, row {}, {:?})", cell.group, cell.row, cell.path)
            }
        }
    }
}

/// One step from a parquet row to a cell inside it: a named field, or a list's element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    Field(String),
    Element(usize),
}

/// A parquet cell holding image bytes: its row group, its row in the group, and the path to
/// the bytes (the first step is the row's top-level column).
#[derive(Clone)]
struct ParquetCell {
    file: Arc<ParquetCells>,
    group: usize,
    row: usize,
    path: Arc<[Step]>,
}

impl PartialEq for ParquetCell {
    fn eq(&self, other: &Self) -> bool {
        self.file.path == other.file.path
            && (self.group, self.row) == (other.group, other.row)
            && self.path == other.path
    }
}

impl Eq for ParquetCell {}

impl ParquetCell {
    fn read(&self) -> std::result::Result<ImageBytes, String> {
        let Some(Step::Field(column)) = self.path.first() else {
            return Err("the cell's address names no column".into());
        };
        let rows = self.file.column_chunk(self.group, column)?;
        let row = rows.get(self.row).ok_or_else(|| format!("row group {} has no row {}", self.group, self.row))?;
        let mut field = row.get_column_iter().find(|(name, _)| *name == column).map(|(_, f)| f);
        for step in &self.path[1..] {
            use parquet::record::Field as F;
            field = match (field, step) {
                (Some(F::Group(row)), Step::Field(name)) => {
                    row.get_column_iter().find(|(n, _)| *n == name).map(|(_, f)| f)
                }
                (Some(F::ListInternal(list)), &Step::Element(i)) => list.elements().get(i),
                _ => None,
            };
        }
        match field {
            Some(parquet::record::Field::Bytes(bytes)) => Ok(bytes.clone().into()),
            _ => Err(format!("{} no longer holds bytes where the suite read them", self.file.path.display())),
        }
    }
}

/// The parquet file a suite's cells are read from when asked for, and the column chunks read
/// last (a row group's rows of one top-level column).
pub(crate) struct ParquetCells {
    path: PathBuf,
    /// The file's size and modification time when the suite was read: a file changed since
    /// is not read for its cells (they may be elsewhere now).
    stamp: (u64, Option<std::time::SystemTime>),
    /// Most recently used last.
    recent: Mutex<Vec<(ChunkKey, Arc<ChunkSlot>)>>,
}

type ChunkKey = (usize, String);
type ChunkSlot = OnceLock<std::result::Result<Arc<Vec<parquet::record::Row>>, String>>;

impl ParquetCells {
    /// Cells of the parquet file at `path`, as it is now.
    pub fn new(path: &Path) -> Self {
        ParquetCells { path: path.to_path_buf(), stamp: stamp(path), recent: Mutex::default() }
    }

    /// How many column chunks are kept: two per thread decoding (an item's images are often
    /// two columns of one row group), and one more pair.
    fn keep() -> usize {
        2 * rayon::current_num_threads() + 2
    }

    /// The rows of row group `group` holding only its top-level column `column`: kept, or
    /// read (once, when several threads ask at the same time); none once the file has changed.
    fn column_chunk(&self, group: usize, column: &str) -> std::result::Result<Arc<Vec<parquet::record::Row>>, String> {
        if stamp(&self.path) != self.stamp {
            return Err(format!("{} changed since the suite was read: read the suite again", self.path.display()));
        }
        let slot = {
            let mut recent = self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let key = (group, column.to_string());
            let slot = match recent.iter().position(|(k, _)| *k == key) {
                Some(at) => recent.remove(at).1,
                None => Arc::default(),
            };
            recent.push((key, Arc::clone(&slot)));
            let over = recent.len().saturating_sub(Self::keep());
            recent.drain(..over);
            slot
        };
        slot.get_or_init(|| self.read_chunk(group, column).map(Arc::new)).clone()
    }

    fn read_chunk(&self, group: usize, column: &str) -> std::result::Result<Vec<parquet::record::Row>, String> {
        use parquet::file::reader::FileReader;
        let read = || -> Result<Vec<parquet::record::Row>> {
            let reader = crate::paths::open_parquet(&self.path, |e| {
                Error::caused_by(ErrorKind::MissingData, format!("read {}: {e}", self.path.display()), e)
            })?;
            let malformed = |what: String| {
                Error::new(ErrorKind::Malformed, format!("read {} row group {group}: {what}", self.path.display()))
            };
            let schema = reader.metadata().file_metadata().schema();
            let field = schema
                .get_fields()
                .iter()
                .find(|f| f.name() == column)
                .ok_or_else(|| malformed(format!("no column `{column}`")))?;
            let projection = parquet::schema::types::Type::group_type_builder(schema.name())
                .with_fields(vec![Arc::clone(field)])
                .build()
                .map_err(|e| malformed(e.to_string()))?;
            let group_reader = reader.get_row_group(group).map_err(|e| malformed(e.to_string()))?;
            let rows = group_reader.get_row_iter(Some(projection)).map_err(|e| malformed(e.to_string()))?;
            rows.map(|row| row.map_err(|e| malformed(e.to_string()))).collect()
        };
        crate::paths::reader_guard(&self.path, "parquet", read).map_err(|e| e.to_string())
    }
}

fn stamp(path: &Path) -> (u64, Option<std::time::SystemTime>) {
    std::fs::metadata(path).map(|m| (m.len(), m.modified().ok())).unwrap_or((0, None))
}
