//! The records of a parquet file, and its binary cells (a release's images, most of its
//! bytes) read from it when asked for ([`ParquetCells`]), not held.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::cells::{Blobs, SourceRecord};
use crate::image::{stamp, CellFile, ImageBytes, RecentParts, Stamp, Step};
use crate::{paths, Error, ErrorKind, ImageCell, Result};

/// Every row of a parquet file as a record, its row groups read on all cores, each by its own
/// reader (the `parquet` crate's file reader seeks one shared file offset). Binary cells (a
/// release's images, most of its bytes) are not held: each record holds the cell's address,
/// read again when a decoder asks for it ([`ParquetCells`]). A binary column outside any list
/// whose chunk has no null by the row group's statistics (`datasets` writes them) is not even
/// read here: every row has its bytes, so its token is set without them.
pub(crate) fn read(path: &Path, how_to_get: &str, blobs: &Blobs) -> Result<Vec<SourceRecord>> {
    let open = || {
        paths::open_parquet(path, |e| {
            Error::caused_by(ErrorKind::MissingData, format!("read {}: {e} ({how_to_get})", path.display()), e)
        })
    };
    let reader = open()?;
    let cells: Arc<dyn CellFile> = Arc::new(ParquetCells::new(path, reader.metadata().file_metadata().schema_descr()));
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
    let cell = ImageCell::in_file(place.cells, place.group, place.row, path);
    at.insert(leaf.clone(), place.blobs.add(cell, None));
}

/// The row a parquet field is read from: its binary cells' address.
struct CellPlace<'a> {
    blobs: &'a Blobs,
    cells: &'a Arc<dyn CellFile>,
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
            let cell = ImageCell::in_file(place.cells, place.group, place.row, path.clone());
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

/// A parquet file whose cells are read when asked for. A cell of a binary column outside any
/// list is read with its window of [`WINDOW`] rows: the pages before it are skipped by their
/// headers, not decompressed, so threads decoding neighbouring rows read their own windows at
/// once. Any other cell (inside a list) is read with its row group's rows of its top-level
/// column.
struct ParquetCells {
    path: PathBuf,
    stamp: Stamp,
    /// The path of each leaf column read by windows (binary, outside any list), its index and
    /// its maximum definition level.
    windowed: Vec<(Vec<String>, usize, i16)>,
    recent: RecentParts<PartKey, Part>,
}

/// Rows a window of a binary column holds: an item's batch of images is a few rows.
const WINDOW: usize = 8;

#[derive(PartialEq)]
enum PartKey {
    /// (row group, leaf column, first row / [`WINDOW`]).
    Window(usize, usize, usize),
    /// (row group, top-level column).
    Rows(usize, String),
}

enum Part {
    /// A window's cells, `None` where null.
    Window(Vec<Option<parquet::data_type::ByteArray>>),
    /// A row group's rows holding one top-level column.
    Rows(Vec<parquet::record::Row>),
}

impl ParquetCells {
    fn new(path: &Path, schema: &parquet::schema::types::SchemaDescriptor) -> Self {
        let windowed = schema
            .columns()
            .iter()
            .enumerate()
            .filter(|(_, c)| c.physical_type() == parquet::basic::Type::BYTE_ARRAY && c.max_rep_level() == 0)
            .map(|(i, c)| (c.path().parts().to_vec(), i, c.max_def_level()))
            .collect();
        ParquetCells { path: path.to_path_buf(), stamp: stamp(path), windowed, recent: RecentParts::new(2) }
    }

    fn open(&self) -> Result<parquet::file::reader::SerializedFileReader<std::fs::File>> {
        paths::open_parquet(&self.path, |e| {
            Error::caused_by(ErrorKind::MissingData, format!("read {}: {e}", self.path.display()), e)
        })
    }

    fn malformed(&self, group: usize, what: String) -> Error {
        Error::new(ErrorKind::Malformed, format!("read {} row group {group}: {what}", self.path.display()))
    }

    /// The cells of rows `window · WINDOW ..` of leaf column `leaf` in row group `group`.
    fn read_window(
        &self,
        group: usize,
        leaf: usize,
        max_def: i16,
        window: usize,
    ) -> std::result::Result<Vec<Option<parquet::data_type::ByteArray>>, String> {
        use parquet::file::reader::FileReader;
        let read = || -> Result<Vec<Option<parquet::data_type::ByteArray>>> {
            let reader = self.open()?;
            let malformed = |e: parquet::errors::ParquetError| self.malformed(group, e.to_string());
            let group_reader = reader.get_row_group(group).map_err(malformed)?;
            let parquet::column::reader::ColumnReader::ByteArrayColumnReader(mut column) =
                group_reader.get_column_reader(leaf).map_err(malformed)?
            else {
                return Err(self.malformed(group, format!("column {leaf} is not binary")));
            };
            column.skip_records(window * WINDOW).map_err(malformed)?;
            let (mut levels, mut values) = (Vec::new(), Vec::new());
            let levels_of = (max_def > 0).then_some(&mut levels);
            let (rows, _, _) = column.read_records(WINDOW, levels_of, None, &mut values).map_err(malformed)?;
            if max_def == 0 {
                return Ok(values.into_iter().map(Some).collect());
            }
            let mut values = values.into_iter();
            Ok(levels.iter().take(rows).map(|&level| if level == max_def { values.next() } else { None }).collect())
        };
        paths::reader_guard(&self.path, "parquet", read).map_err(|e| e.to_string())
    }

    /// The rows of row group `group` holding only its top-level column `column`.
    fn read_rows(&self, group: usize, column: &str) -> std::result::Result<Vec<parquet::record::Row>, String> {
        use parquet::file::reader::FileReader;
        let read = || -> Result<Vec<parquet::record::Row>> {
            let reader = self.open()?;
            let malformed = |what: String| self.malformed(group, what);
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
        paths::reader_guard(&self.path, "parquet", read).map_err(|e| e.to_string())
    }
}

impl CellFile for ParquetCells {
    fn path(&self) -> &Path {
        &self.path
    }

    fn stamp(&self) -> Stamp {
        self.stamp
    }

    fn read(&self, group: usize, row: usize, path: &[Step]) -> std::result::Result<ImageBytes, String> {
        let gone = || format!("{} no longer holds bytes where the suite read them", self.path.display());
        let names: Option<Vec<&str>> =
            path.iter().map(|step| if let Step::Field(name) = step { Some(name.as_str()) } else { None }).collect();
        let windowed = names.and_then(|names| self.windowed.iter().find(|(leaf, _, _)| *leaf == names));
        if let Some(&(_, leaf, max_def)) = windowed {
            let key = PartKey::Window(group, leaf, row / WINDOW);
            let part =
                self.recent.get(key, || self.read_window(group, leaf, max_def, row / WINDOW).map(Part::Window))?;
            let Part::Window(cells) = &*part else { return Err(gone()) };
            return cells.get(row % WINDOW).cloned().flatten().map(ImageBytes::from).ok_or_else(gone);
        }
        let Some(Step::Field(column)) = path.first() else {
            return Err("the cell's address names no column".into());
        };
        let part =
            self.recent.get(PartKey::Rows(group, column.clone()), || self.read_rows(group, column).map(Part::Rows))?;
        let Part::Rows(rows) = &*part else { return Err(gone()) };
        let row = rows.get(row).ok_or_else(|| format!("row group {group} has no row {row}"))?;
        let mut field = row.get_column_iter().find(|(name, _)| *name == column).map(|(_, f)| f);
        for step in &path[1..] {
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
            _ => Err(gone()),
        }
    }
}
