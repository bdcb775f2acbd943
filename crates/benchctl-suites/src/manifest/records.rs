//! The records of a manifest's annotation file, in file order, each with where it was read:
//! a JSON list or object keyed by id, JSON Lines, CSV / TSV with a header row, parquet, or an
//! Arrow IPC file. Binary cells (image bytes) are held beside the records ([`Blobs`]).

use std::path::Path;

use serde_json::{Map, Value};

use super::cells::{Blobs, SourceRecord};
use crate::image::{ParquetCells, Step};
use crate::ImageCell;
use crate::{paths, Error, ErrorKind, Result};

/// The annotation file's formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    Jsonl,
    Csv,
    Tsv,
    Parquet,
    Arrow,
}

impl Format {
    pub const NAMES: &'static str = "json, jsonl, csv, tsv, parquet, arrow";

    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "json" => Format::Json,
            "jsonl" => Format::Jsonl,
            "csv" => Format::Csv,
            "tsv" => Format::Tsv,
            "parquet" => Format::Parquet,
            "arrow" => Format::Arrow,
            _ => return None,
        })
    }
}

/// Reads every record of `path`, its binary cells into `blobs`. `records` is the path of keys
/// to the list or object inside a JSON file (empty: the whole file).
pub(crate) fn read(
    path: &Path,
    format: Format,
    records: &[String],
    how_to_get: &str,
    blobs: &Blobs,
) -> Result<Vec<SourceRecord>> {
    let malformed = |what: String| Error::new(ErrorKind::Malformed, format!("read {}: {what}", path.display()));
    match format {
        Format::Json => {
            let text = paths::read_text(path, how_to_get)?;
            let whole: Value = serde_json::from_str(&text)
                .map_err(|e| Error::caused_by(ErrorKind::Malformed, format!("parse {}: {e}", path.display()), e))?;
            let mut value = &whole;
            for (depth, key) in records.iter().enumerate() {
                value = value.get(key).ok_or_else(|| {
                    malformed(format!(
                        "`source.records` names `{}`, which the file does not have",
                        records[..=depth].join(".")
                    ))
                })?;
            }
            match value {
                Value::Array(list) => Ok(list
                    .iter()
                    .enumerate()
                    .map(|(i, v)| SourceRecord { value: v.clone(), at: format!("entry {i}"), key: None })
                    .collect()),
                Value::Object(map) => Ok(map
                    .iter()
                    .map(|(k, v)| SourceRecord { value: v.clone(), at: format!("key {k:?}"), key: Some(k.clone()) })
                    .collect()),
                _ => Err(malformed("the records must be a list, or an object keyed by id".into())),
            }
        }
        Format::Jsonl => {
            let mut records = Vec::new();
            paths::for_each_line(path, how_to_get, |number, line| {
                if line.trim().is_empty() {
                    return Ok(());
                }
                let value = serde_json::from_str(line).map_err(|e| {
                    Error::caused_by(ErrorKind::Malformed, format!("parse {} line {number}: {e}", path.display()), e)
                })?;
                records.push(SourceRecord { value, at: format!("line {number}"), key: None });
                Ok(())
            })?;
            Ok(records)
        }
        Format::Csv | Format::Tsv => {
            let text = paths::read_text(path, how_to_get)?;
            let delimiter = if format == Format::Csv { ',' } else { '\t' };
            let mut rows = delimited_rows(&text, delimiter).map_err(|e| malformed(e.to_string()))?.into_iter();
            let Some((_, header)) = rows.next() else { return Err(malformed("it is empty (no header row)".into())) };
            // Every record is a map of every column: a header of 10⁶ columns would make each
            // row take hundreds of megabytes.
            if header.len() > MAX_COLUMNS {
                return Err(malformed(format!(
                    "its header has {} columns; a manifest's records may have at most {MAX_COLUMNS}",
                    header.len()
                )));
            }
            rows.filter(|(_, fields)| !(fields.len() == 1 && fields[0].is_empty()))
                .map(|(line, fields)| {
                    if fields.len() != header.len() {
                        return Err(malformed(format!(
                            "line {line} has {} field(s), the header {}",
                            fields.len(),
                            header.len()
                        )));
                    }
                    let map: Map<String, Value> =
                        header.iter().cloned().zip(fields.into_iter().map(Value::String)).collect();
                    Ok(SourceRecord { value: Value::Object(map), at: format!("line {line}"), key: None })
                })
                .collect()
        }
        Format::Parquet => read_parquet(path, how_to_get, blobs),
        Format::Arrow => super::arrow::read(path, how_to_get, blobs),
    }
}

/// Every row of a parquet file as a record, its row groups read on all cores, each by its own
/// reader (the `parquet` crate's file reader seeks one shared file offset). Binary cells (a
/// release's images, most of its bytes) are not held: each record holds the cell's address,
/// read again when a decoder asks for it ([`ParquetCells`]). A binary column outside any list
/// whose chunk has no null by the row group's statistics (`datasets` writes them) is not even
/// read here: every row has its bytes, so its token is set without them.
fn read_parquet(path: &Path, how_to_get: &str, blobs: &Blobs) -> Result<Vec<SourceRecord>> {
    let open = || {
        paths::open_parquet(path, |e| {
            Error::caused_by(ErrorKind::MissingData, format!("read {}: {e} ({how_to_get})", path.display()), e)
        })
    };
    let reader = open()?;
    let cells = std::sync::Arc::new(ParquetCells::new(path));
    let budget = paths::RowBudget::of(path);
    use parquet::file::reader::FileReader;
    let mut first_rows = Vec::new();
    let mut rows = 0usize;
    for group in reader.metadata().row_groups() {
        first_rows.push(rows);
        rows += usize::try_from(group.num_rows()).unwrap_or(0);
    }
    use rayon::prelude::*;
    let groups: Vec<Result<Vec<SourceRecord>>> = first_rows
        .par_iter()
        .enumerate()
        .map(|(group, &first_row)| {
            let reader = open()?;
            let mut unread = full_binary_columns(reader.metadata().row_group(group));
            let root = reader.metadata().file_metadata().schema();
            let projection = if unread.is_empty() { None } else { without_columns(root, &unread, &mut Vec::new()) };
            if projection.is_none() {
                unread.clear();
            }
            paths::reader_guard(path, "parquet", || {
                paths::parquet_group_rows(&reader, path, group, first_row, &budget, projection)?
                    .into_iter()
                    .enumerate()
                    .map(|(i, row)| {
                        let row = row?;
                        let cell = CellPlace { blobs, cells: &cells, group, row: i };
                        let mut map = row
                            .get_column_iter()
                            .map(|(name, field)| {
                                (name.clone(), field_value(field, &cell, &mut vec![Step::Field(name.clone())]))
                            })
                            .collect();
                        for column in &unread {
                            set_unread_cell(&mut map, column, &cell);
                        }
                        if !unread.is_empty() {
                            let columns: Vec<&[String]> = unread.iter().map(Vec::as_slice).collect();
                            in_schema_order(&mut map, root, &columns);
                        }
                        Ok(SourceRecord { value: Value::Object(map), at: format!("row {}", first_row + i), key: None })
                    })
                    .collect()
            })
        })
        .collect();
    let mut records = Vec::with_capacity(rows);
    for group in groups {
        records.extend(group?);
    }
    Ok(records)
}

/// The paths of a row group's binary columns (bytes, not text) outside any list whose chunk
/// has no null by its statistics: every row holds bytes there.
fn full_binary_columns(group: &parquet::file::metadata::RowGroupMetaData) -> Vec<Vec<String>> {
    group
        .columns()
        .iter()
        .filter(|c| {
            let d = c.column_descr();
            d.physical_type() == parquet::basic::Type::BYTE_ARRAY
                && d.converted_type() == parquet::basic::ConvertedType::NONE
                && d.logical_type_ref().is_none()
                && d.max_rep_level() == 0
                && c.statistics().and_then(|s| s.null_count_opt()) == Some(0)
        })
        .map(|c| c.column_path().parts().to_vec())
        .collect()
}

/// `ty` without the columns at `dropped` (paths from the root; `at` is `ty`'s own), and
/// without the groups left empty; `None` where the schema cannot be rebuilt so (the file is
/// then read whole).
fn without_columns(
    ty: &parquet::schema::types::Type,
    dropped: &[Vec<String>],
    at: &mut Vec<String>,
) -> Option<parquet::schema::types::Type> {
    use parquet::schema::types::Type;
    let fields = ty
        .get_fields()
        .iter()
        .map(|field| {
            at.push(field.name().to_string());
            let kept = if !field.is_group() {
                Some((!dropped.contains(at)).then(|| std::sync::Arc::clone(field)))
            } else {
                without_columns(field, dropped, at)
                    .map(|inner| (!inner.get_fields().is_empty()).then(|| std::sync::Arc::new(inner)))
            };
            at.pop();
            kept
        })
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    let builder = Type::group_type_builder(ty.name()).with_fields(fields);
    let info = ty.get_basic_info();
    let builder = if info.has_repetition() { builder.with_repetition(info.repetition()) } else { builder };
    builder.with_converted_type(info.converted_type()).with_logical_type(info.logical_type_ref().cloned()).build().ok()
}

/// `record`'s fields in the order of `ty`'s, and so the groups on the way to `columns` (the
/// unread cells set after the others): a record lists its fields as the file does.
fn in_schema_order(record: &mut Map<String, Value>, ty: &parquet::schema::types::Type, columns: &[&[String]]) {
    let fields = ty.get_fields();
    let position = |name: &str| fields.iter().position(|f| f.name() == name).unwrap_or(usize::MAX);
    let mut entries: Vec<(String, Value)> = std::mem::take(record).into_iter().collect();
    entries.sort_by_key(|(name, _)| position(name));
    for (name, value) in &mut entries {
        let below: Vec<&[String]> = columns.iter().filter(|c| c.len() > 1 && c[0] == *name).map(|c| &c[1..]).collect();
        if let (false, Value::Object(inner), Some(field)) =
            (below.is_empty(), value, fields.iter().find(|f| f.name() == name.as_str()))
        {
            in_schema_order(inner, field, &below);
        }
    }
    *record = entries.into_iter().collect();
}

/// Sets the token of an unread binary cell at `column` (a path of field names) in a row's
/// record, making the groups on the way that the projection left out.
fn set_unread_cell(record: &mut Map<String, Value>, column: &[String], place: &CellPlace<'_>) {
    let Some((leaf, groups)) = column.split_last() else { return };
    let mut at = record;
    for name in groups {
        let entry = at.entry(name.clone()).or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(inner) = entry else { return };
        at = inner;
    }
    let path = column.iter().map(|name| Step::Field(name.clone())).collect();
    let cell = ImageCell::parquet(place.cells, place.group, place.row, path);
    at.insert(leaf.clone(), place.blobs.add(cell, None));
}

/// The row a parquet field is read from: its binary cells' address.
struct CellPlace<'a> {
    blobs: &'a Blobs,
    cells: &'a std::sync::Arc<ParquetCells>,
    group: usize,
    /// The row within its row group.
    row: usize,
}

/// A parquet field as JSON: numbers and text as themselves, lists and groups nested, bytes
/// as a token for their cell (at `path` in the row) held in the blobs, dates as their display
/// text (a manifest's templates read text and numbers only).
fn field_value(field: &parquet::record::Field, place: &CellPlace<'_>, path: &mut Vec<Step>) -> Value {
    use parquet::record::Field as F;
    let mut nested = |step: Step, field: &parquet::record::Field| {
        path.push(step);
        let value = field_value(field, place, path);
        path.pop();
        value
    };
    match field {
        F::Null => Value::Null,
        F::Bool(b) => Value::Bool(*b),
        F::Byte(v) => Value::from(*v),
        F::Short(v) => Value::from(*v),
        F::Int(v) => Value::from(*v),
        F::Long(v) => Value::from(*v),
        F::UByte(v) => Value::from(*v),
        F::UShort(v) => Value::from(*v),
        F::UInt(v) => Value::from(*v),
        F::ULong(v) => Value::from(*v),
        F::Float(v) => Value::from(f64::from(*v)),
        F::Double(v) => Value::from(*v),
        F::Str(s) => Value::String(s.clone()),
        F::Bytes(b) => {
            let cell = ImageCell::parquet(place.cells, place.group, place.row, path.clone());
            place.blobs.add(cell, Some(b.len()))
        }
        F::Group(row) => Value::Object(
            row.get_column_iter()
                .map(|(name, field)| (name.clone(), nested(Step::Field(name.clone()), field)))
                .collect(),
        ),
        F::ListInternal(list) => {
            Value::Array(list.elements().iter().enumerate().map(|(i, f)| nested(Step::Element(i), f)).collect())
        }
        other => Value::String(other.to_string()),
    }
}

/// The most columns a CSV or TSV source may have.
pub const MAX_COLUMNS: usize = 10_000;

/// A quoted field of delimited text that never closes, and the line it opens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UnclosedQuote {
    line: usize,
}

impl std::fmt::Display for UnclosedQuote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a quoted field opened on line {} is never closed", self.line)
    }
}

/// Rows of delimited text as Python's `csv` module reads them by default: fields in double
/// quotes may hold the delimiter, line breaks and doubled quotes; each row with the line it
/// starts on (from 1).
fn delimited_rows(text: &str, delimiter: char) -> std::result::Result<Vec<(usize, Vec<String>)>, UnclosedQuote> {
    let mut rows = Vec::new();
    let (mut fields, mut field) = (Vec::new(), String::new());
    let (mut line, mut row_line) = (1, 1);
    let (mut quoted, mut was_quoted) = (false, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => quoted = false,
                c => {
                    if c == '\n' {
                        line += 1;
                    }
                    field.push(c);
                }
            }
            continue;
        }
        match c {
            '"' if field.is_empty() && !was_quoted => {
                quoted = true;
                was_quoted = true;
            }
            c if c == delimiter => {
                fields.push(std::mem::take(&mut field));
                was_quoted = false;
            }
            '\r' | '\n' => {
                if c == '\r' && chars.peek() == Some(&'\n') {
                    chars.next();
                }
                fields.push(std::mem::take(&mut field));
                rows.push((row_line, std::mem::take(&mut fields)));
                was_quoted = false;
                line += 1;
                row_line = line;
            }
            c => field.push(c),
        }
    }
    if quoted {
        return Err(UnclosedQuote { line: row_line });
    }
    if !field.is_empty() || !fields.is_empty() {
        fields.push(field);
        rows.push((row_line, fields));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::delimited_rows;

    #[test]
    fn quoted_fields_hold_delimiters_quotes_and_line_breaks() {
        let Ok(rows) = delimited_rows("a,b\r\n1,\"x, \"\"y\"\"\"\n2,\"two\nlines\"\n3,\n", ',') else {
            panic!("valid rows refused")
        };
        let fields: Vec<Vec<&str>> = rows.iter().map(|(_, f)| f.iter().map(String::as_str).collect()).collect();
        assert_eq!(fields, [vec!["a", "b"], vec!["1", "x, \"y\""], vec!["2", "two\nlines"], vec!["3", ""]]);
        assert_eq!(rows.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [1, 2, 3, 5]);
        assert!(delimited_rows("a\n\"open", ',').unwrap_err().to_string().contains("line 2"));
    }
}
