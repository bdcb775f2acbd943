//! The records of an Arrow IPC file: the stream format, which `datasets` writes
//! (`save_to_disk`'s `data-*.arrow`, and its cache), and the file format (`ARROW1`). Each row
//! a record as a parquet row is one: text and numbers as themselves, structs as objects, lists
//! as lists, binary cells held in [`Blobs`] (an image's bytes).
//!
//! Bounded like parquet: the batches may decode to at most [`paths::parquet_row_budget`] of
//! the file's size (compressed buffers make a small file large), a type benchctl does not
//! read is refused naming its column, and a panic of the reader on damaged data is an error
//! naming the file.

use std::io::Read;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use serde_json::{Map, Value};

use super::cells::{Blobs, SourceRecord};
use crate::{paths, Error, ErrorKind, Result};

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
    let file = std::fs::File::open(path).map_err(|e| malformed(e.to_string()))?;
    let budget = paths::parquet_row_budget(size);
    paths::reader_guard(path, "Arrow IPC", || {
        let not_arrow = |e: arrow_schema::ArrowError| malformed(format!("not an Arrow IPC file: {e}"));
        let batches: Box<dyn Iterator<Item = std::result::Result<RecordBatch, arrow_schema::ArrowError>>> =
            if is_file_format {
                Box::new(arrow_ipc::reader::FileReader::try_new(file, None).map_err(not_arrow)?)
            } else {
                Box::new(
                    arrow_ipc::reader::StreamReader::try_new(std::io::BufReader::new(file), None).map_err(not_arrow)?,
                )
            };
        let mut records = Vec::new();
        let mut decoded = 0u64;
        for (b, batch) in batches.enumerate() {
            let batch = batch.map_err(|e| malformed(format!("record batch {b}: {e}")))?;
            decoded += batch.get_array_memory_size() as u64;
            if decoded > budget {
                return Err(malformed(format!(
                    "its record batches decode to more than {budget} bytes by batch {b} (256 MiB and 64 times the file's {size}): a compression bomb, refused"
                )));
            }
            let schema = batch.schema();
            for row in 0..batch.num_rows() {
                let at = format!("row {}", records.len());
                let mut map = Map::new();
                for (field, column) in schema.fields().iter().zip(batch.columns()) {
                    let value = cell(column.as_ref(), row, blobs)
                        .map_err(|what| malformed(format!("{at} column `{}`: {what}", field.name())))?;
                    map.insert(field.name().clone(), value);
                }
                records.push(SourceRecord { value: Value::Object(map), at, key: None });
            }
        }
        Ok(records)
    })
}

/// The cell at `row` of `array` as JSON (binary cells into `blobs`); the error says what the
/// column's type is when benchctl does not read it.
fn cell(array: &dyn Array, row: usize, blobs: &Blobs) -> std::result::Result<Value, String> {
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
        DataType::Binary => blobs.add_copy(array.as_binary::<i32>().value(row)),
        DataType::LargeBinary => blobs.add_copy(array.as_binary::<i64>().value(row)),
        DataType::BinaryView => blobs.add_copy(array.as_binary_view().value(row)),
        DataType::FixedSizeBinary(_) => blobs.add_copy(array.as_fixed_size_binary().value(row)),
        DataType::Struct(fields) => {
            let array = array.as_struct();
            let mut map = Map::new();
            for (field, child) in fields.iter().zip(array.columns()) {
                map.insert(field.name().clone(), cell(child.as_ref(), row, blobs)?);
            }
            Value::Object(map)
        }
        DataType::List(_) => list(array.as_list::<i32>().value(row).as_ref(), blobs)?,
        DataType::LargeList(_) => list(array.as_list::<i64>().value(row).as_ref(), blobs)?,
        DataType::FixedSizeList(_, _) => list(array.as_fixed_size_list().value(row).as_ref(), blobs)?,
        DataType::Dictionary(_, _) => {
            // `datasets` writes none, pyarrow's `dictionary_encode` does: the value a key names.
            let dictionary = array.as_any_dictionary();
            let values = dictionary.values();
            let key = cell(dictionary.keys(), row, blobs)?
                .as_u64()
                .and_then(|k| usize::try_from(k).ok())
                .filter(|&k| k < values.len())
                .ok_or_else(|| format!("a dictionary key outside its {} values", values.len()))?;
            cell(values.as_ref(), key, blobs)?
        }
        other => {
            return Err(format!("its type {other} is not one benchctl reads (text, numbers, binary, structs, lists)"))
        }
    })
}

fn list(elements: &dyn Array, blobs: &Blobs) -> std::result::Result<Value, String> {
    (0..elements.len()).map(|i| cell(elements, i, blobs)).collect::<std::result::Result<Vec<_>, _>>().map(Value::Array)
}
