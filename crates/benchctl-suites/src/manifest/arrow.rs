//! The records of an Arrow IPC file: the stream format, which `datasets` writes
//! (`save_to_disk`'s `data-*.arrow`, and its cache), and the file format (`ARROW1`: the
//! stream format after its magic, then a footer). Each row a record as a parquet row is one:
//! text and numbers as themselves, structs as objects, lists as lists, binary cells (an
//! image's bytes) read from the file when asked for, not held: where the batch's body is
//! stored as it decodes (uncompressed, what `datasets` writes), as the cell's own bytes at
//! their place in the file; else from the record batch holding them, read again
//! ([`ArrowCells`]).
//!
//! The file is read message by message, each framed and checked here before the `arrow-ipc`
//! decoder sees it: a message must lie inside the file. Bounded like parquet: the batches may
//! decode to at most [`paths::parquet_row_budget`] of the file's size (compressed buffers make
//! a small file large), a type benchctl does not read is refused naming its column, and a
//! panic of the reader on damaged data is an error naming the file.

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_ipc::reader::StreamDecoder;
use arrow_ipc::MessageHeader;
use arrow_schema::DataType;
use serde_json::{Map, Value};

use super::cells::{Blobs, SourceRecord};
use crate::image::{stamp, CellFile, ImageBytes, RecentParts, Stamp, Step};
use crate::{paths, Error, ErrorKind, ImageCell, Result};

/// The first bytes of an Arrow IPC file in the file format; the stream format has none.
const FILE_MAGIC: &[u8] = b"ARROW1";

pub(super) fn read(path: &Path, how_to_get: &str, blobs: &Blobs) -> Result<Vec<SourceRecord>> {
    let malformed = |what: String| Error::new(ErrorKind::Malformed, format!("read {}: {what}", path.display()));
    paths::require_regular_file(path)?;
    let mut file = std::fs::File::open(path).map_err(|e| {
        Error::caused_by(ErrorKind::MissingData, format!("read {}: {e} ({how_to_get})", path.display()), e)
    })?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut magic = [0u8; 6];
    let is_file_format = file.read_exact(&mut magic).is_ok() && magic == FILE_MAGIC;
    // The file format's stream starts after its magic, padded to 8 bytes.
    let start = if is_file_format { 8 } else { 0 };
    file.seek(std::io::SeekFrom::Start(start)).map_err(|e| malformed(e.to_string()))?;
    let budget = paths::parquet_row_budget(size);
    let cells = Arc::new(ArrowCells {
        path: path.to_path_buf(),
        stamp: stamp(path),
        index: OnceLock::new(),
        recent: RecentParts::new(1),
    });
    let in_file: Arc<dyn CellFile> = cells.clone();
    paths::reader_guard(path, "Arrow IPC", || {
        let not_arrow = |e: String| malformed(format!("not an Arrow IPC file: {e}"));
        let mut reader = Messages { reader: std::io::BufReader::new(file), at: start, size };
        let mut decoder = StreamDecoder::new();
        let mut index = BatchIndex::default();
        let mut dictionaries = false;
        let mut records = Vec::new();
        let mut decoded = 0u64;
        while let Some((at, bytes, header)) = reader.next().map_err(not_arrow)? {
            match header {
                MessageHeader::Schema => index.schema = bytes.clone(),
                MessageHeader::DictionaryBatch => dictionaries = true,
                _ => {}
            }
            let len = bytes.len();
            let mut buffer = arrow_buffer::Buffer::from_vec(bytes);
            // Where the message lies in memory: a cell the decoder left in place (an
            // uncompressed body) is at the same place in the file.
            let message = Message { at, memory: buffer.as_ptr() as usize..buffer.as_ptr() as usize + len };
            let batch = decoder.decode(&mut buffer).map_err(|e| not_arrow(e.to_string()))?;
            let Some(batch) = batch else { continue };
            let b = index.batches.len();
            index.batches.push((at, len));
            decoded += batch.get_array_memory_size() as u64;
            if decoded > budget {
                return Err(malformed(format!(
                    "its record batches decode to more than {budget} bytes by batch {b} (256 MiB and 64 times the file's {size}): a compression bomb, refused"
                )));
            }
            // A batch's cells are read again from it alone, with the schema; dictionaries
            // sent before it would be missing, so their files' cells are held.
            let file = (!dictionaries).then_some(&in_file);
            let schema = batch.schema();
            for row in 0..batch.num_rows() {
                let at = format!("row {}", records.len());
                let place = Place { blobs, file, batch: b, row, message: Some(&message) };
                let mut map = Map::new();
                for (field, column) in schema.fields().iter().zip(batch.columns()) {
                    let mut path = vec![Step::Field(field.name().clone())];
                    let value = cell(column.as_ref(), row, &place, &mut path)
                        .map_err(|what| malformed(format!("{at} column `{}`: {what}", field.name())))?;
                    map.insert(field.name().clone(), value);
                }
                records.push(SourceRecord { value: Value::Object(map), at, key: None });
            }
        }
        let _ = cells.index.set(index);
        Ok(records)
    })
}

/// The messages of an Arrow IPC stream, each framed (continuation marker and length, or the
/// length alone as older writers frame it) and inside the file.
struct Messages<R> {
    reader: R,
    /// Where the next message starts.
    at: u64,
    /// The file's size.
    size: u64,
}

impl<R: Read> Messages<R> {
    /// The next message: where it starts, its bytes (framing, metadata and body) and its
    /// type; `None` at the end-of-stream marker or the file's end.
    fn next(&mut self) -> std::result::Result<Option<(u64, Vec<u8>, MessageHeader)>, String> {
        let at = self.at;
        let mut word = [0u8; 4];
        match self.reader.read_exact(&mut word) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            other => other.map_err(|e| e.to_string())?,
        }
        let mut bytes = word.to_vec();
        if word == [0xFF; 4] {
            self.reader.read_exact(&mut word).map_err(|e| format!("the message at byte {at}: {e}"))?;
            bytes.extend_from_slice(&word);
        }
        let metadata = i32::from_le_bytes(word);
        if metadata == 0 {
            return Ok(None);
        }
        let framing = bytes.len();
        let past_end = |len: i64| len < 0 || (at + framing as u64).saturating_add(len as u64) > self.size;
        if past_end(i64::from(metadata)) {
            return Err(format!("the message at byte {at} claims {metadata} bytes of metadata, past the file's end"));
        }
        bytes.resize(framing + metadata as usize, 0);
        self.reader.read_exact(&mut bytes[framing..]).map_err(|e| format!("the message at byte {at}: {e}"))?;
        let message =
            arrow_ipc::root_as_message(&bytes[framing..]).map_err(|e| format!("the message at byte {at}: {e}"))?;
        let (header, body) = (message.header_type(), message.bodyLength());
        if past_end(body.saturating_add(i64::from(metadata))) {
            return Err(format!("the message at byte {at} claims a body of {body} bytes, past the file's end"));
        }
        let head = bytes.len();
        bytes.resize(head + body as usize, 0);
        self.reader.read_exact(&mut bytes[head..]).map_err(|e| format!("the message at byte {at}: {e}"))?;
        self.at += bytes.len() as u64;
        Ok(Some((at, bytes, header)))
    }
}

/// Where an Arrow file's messages are: its schema's bytes, and each record batch's start and
/// length.
#[derive(Default)]
struct BatchIndex {
    schema: Vec<u8>,
    batches: Vec<(u64, usize)>,
}

/// An Arrow IPC file whose cells are read when asked for: a part is a record batch, decoded
/// again from its message and the schema's.
struct ArrowCells {
    path: PathBuf,
    stamp: Stamp,
    /// Set once the file is read.
    index: OnceLock<BatchIndex>,
    recent: RecentParts<usize, RecordBatch>,
}

impl CellFile for ArrowCells {
    fn path(&self) -> &Path {
        &self.path
    }

    fn stamp(&self) -> Stamp {
        self.stamp
    }

    fn read(&self, batch: usize, row: usize, path: &[Step]) -> std::result::Result<ImageBytes, String> {
        let Some(Step::Field(column)) = path.first() else {
            return Err("the cell's address names no column".into());
        };
        let batch = self.recent.get(batch, || self.read_batch(batch))?;
        let gone = || format!("{} no longer holds bytes where the suite read them", self.path.display());
        let mut array: ArrayRef = Arc::clone(batch.column_by_name(column).ok_or_else(gone)?);
        let mut row = row;
        for step in &path[1..] {
            array = match step {
                Step::Field(name) => {
                    Arc::clone(array.as_struct_opt().and_then(|s| s.column_by_name(name)).ok_or_else(gone)?)
                }
                &Step::Element(i) => {
                    let elements = match array.data_type() {
                        DataType::List(_) => array.as_list::<i32>().value(row),
                        DataType::LargeList(_) => array.as_list::<i64>().value(row),
                        DataType::FixedSizeList(_, _) => array.as_fixed_size_list().value(row),
                        _ => return Err(gone()),
                    };
                    row = i;
                    elements
                }
            };
        }
        if row >= array.len() || array.is_null(row) {
            return Err(gone());
        }
        let bytes: &[u8] = match array.data_type() {
            DataType::Binary => array.as_binary::<i32>().value(row),
            DataType::LargeBinary => array.as_binary::<i64>().value(row),
            DataType::BinaryView => array.as_binary_view().value(row),
            DataType::FixedSizeBinary(_) => array.as_fixed_size_binary().value(row),
            _ => return Err(gone()),
        };
        Ok(bytes.into())
    }
}

impl ArrowCells {
    /// Record batch `b`, decoded from its message after the schema's.
    fn read_batch(&self, b: usize) -> std::result::Result<RecordBatch, String> {
        let index = self.index.get().ok_or("the file was not read whole")?;
        let &(at, len) = index.batches.get(b).ok_or_else(|| format!("the file has no record batch {b}"))?;
        let read = || -> std::result::Result<RecordBatch, String> {
            let mut file = std::fs::File::open(&self.path).map_err(|e| e.to_string())?;
            file.seek(std::io::SeekFrom::Start(at)).map_err(|e| e.to_string())?;
            let mut bytes = vec![0u8; len];
            file.read_exact(&mut bytes).map_err(|e| e.to_string())?;
            let mut decoder = StreamDecoder::new();
            let mut schema = arrow_buffer::Buffer::from_vec(index.schema.clone());
            decoder.decode(&mut schema).map_err(|e| e.to_string())?;
            let mut message = arrow_buffer::Buffer::from_vec(bytes);
            decoder
                .decode(&mut message)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("record batch {b} is no longer where the suite read it"))
        };
        paths::reader_guard(&self.path, "Arrow IPC", || {
            read().map_err(|e| {
                Error::new(ErrorKind::Malformed, format!("read {} record batch {b}: {e}", self.path.display()))
            })
        })
        .map_err(|e| e.to_string())
    }
}

/// Where a cell is read: the blobs its bytes' token goes into, and (where the file's cells are
/// read when asked for) the file, the batch and the row, and the batch's message.
struct Place<'a> {
    blobs: &'a Blobs,
    file: Option<&'a Arc<dyn CellFile>>,
    batch: usize,
    row: usize,
    message: Option<&'a Message>,
}

/// A record batch's message: where it starts in the file, and the addresses its bytes were
/// read into.
struct Message {
    at: u64,
    memory: std::ops::Range<usize>,
}

impl Message {
    /// Where `bytes` are in the file, when they lie inside the message as it was read (the
    /// decoder sliced them from it rather than decompressing or copying them).
    fn offset_of(&self, bytes: &[u8]) -> Option<u64> {
        let start = bytes.as_ptr() as usize;
        let inside = self.memory.start <= start && start.checked_add(bytes.len())? <= self.memory.end;
        inside.then(|| self.at + (start - self.memory.start) as u64)
    }
}

/// The cell at `row` of `array` as JSON (binary cells as tokens in the blobs: `path` from the
/// record's row to this cell addresses them); the error says what the column's type is when
/// benchctl does not read it.
fn cell(array: &dyn Array, row: usize, place: &Place<'_>, path: &mut Vec<Step>) -> std::result::Result<Value, String> {
    if array.is_null(row) {
        return Ok(Value::Null);
    }
    let number = |x: f64| serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number);
    Ok(match array.data_type() {
        DataType::Null => Value::Null,
        DataType::Boolean => Value::Bool(array.as_boolean().value(row)),
        DataType::Int8 => array.as_primitive::<Int8Type>().value(row).into(),
        DataType::Int16 => array.as_primitive::<Int16Type>().value(row).into(),
        DataType::Int32 => array.as_primitive::<Int32Type>().value(row).into(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).into(),
        DataType::UInt8 => array.as_primitive::<UInt8Type>().value(row).into(),
        DataType::UInt16 => array.as_primitive::<UInt16Type>().value(row).into(),
        DataType::UInt32 => array.as_primitive::<UInt32Type>().value(row).into(),
        DataType::UInt64 => array.as_primitive::<UInt64Type>().value(row).into(),
        DataType::Float16 => number(f64::from(array.as_primitive::<Float16Type>().value(row))),
        DataType::Float32 => number(f64::from(array.as_primitive::<Float32Type>().value(row))),
        DataType::Float64 => number(array.as_primitive::<Float64Type>().value(row)),
        DataType::Utf8 => array.as_string::<i32>().value(row).into(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row).into(),
        DataType::Utf8View => array.as_string_view().value(row).into(),
        DataType::Binary => binary(array.as_binary::<i32>().value(row), place, path),
        DataType::LargeBinary => binary(array.as_binary::<i64>().value(row), place, path),
        DataType::BinaryView => binary(array.as_binary_view().value(row), place, path),
        DataType::FixedSizeBinary(_) => binary(array.as_fixed_size_binary().value(row), place, path),
        DataType::Struct(fields) => {
            let array = array.as_struct();
            let mut map = Map::new();
            for (field, child) in fields.iter().zip(array.columns()) {
                path.push(Step::Field(field.name().clone()));
                let value = cell(child.as_ref(), row, place, path);
                path.pop();
                map.insert(field.name().clone(), value?);
            }
            Value::Object(map)
        }
        DataType::List(_) => list(array.as_list::<i32>().value(row).as_ref(), place, path)?,
        DataType::LargeList(_) => list(array.as_list::<i64>().value(row).as_ref(), place, path)?,
        DataType::FixedSizeList(_, _) => list(array.as_fixed_size_list().value(row).as_ref(), place, path)?,
        DataType::Dictionary(_, _) => {
            // `datasets` writes none, pyarrow's `dictionary_encode` does: the value a key names.
            let dictionary = array.as_any_dictionary();
            let values = dictionary.values();
            // Its values are not the row's: a binary value is held, not addressed.
            let held = Place { file: None, message: None, ..*place };
            let key = cell(dictionary.keys(), row, &held, path)?
                .as_u64()
                .and_then(|k| usize::try_from(k).ok())
                .filter(|&k| k < values.len())
                .ok_or_else(|| format!("a dictionary key outside its {} values", values.len()))?;
            cell(values.as_ref(), key, &held, path)?
        }
        other => {
            return Err(format!("its type {other} is not one benchctl reads (text, numbers, binary, structs, lists)"))
        }
    })
}

fn list(elements: &dyn Array, place: &Place<'_>, path: &mut Vec<Step>) -> std::result::Result<Value, String> {
    let mut values = Vec::with_capacity(elements.len());
    for i in 0..elements.len() {
        path.push(Step::Element(i));
        // An element's cell is the element's row of the list's values, at the record's row.
        let value = cell(elements, i, place, path);
        path.pop();
        values.push(value?);
    }
    Ok(Value::Array(values))
}

/// A binary cell's token: where the file's cells are read when asked for, its place in the
/// file (bytes stored as they are) or else its address in its batch; else a copy of its bytes.
fn binary(bytes: &[u8], place: &Place<'_>, path: &[Step]) -> Value {
    let Some(file) = place.file else { return place.blobs.add_copy(bytes) };
    let cell = match place.message.and_then(|message| message.offset_of(bytes)) {
        Some(offset) => ImageCell::in_range(file, offset, bytes.len()),
        None => ImageCell::in_file(file, place.batch, place.row, path.to_vec()),
    };
    place.blobs.add(cell, Some(bytes.len()))
}
