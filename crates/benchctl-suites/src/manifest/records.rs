//! The records of a manifest's annotation file, in file order, each with where it was read:
//! a JSON list or object keyed by id, JSON Lines, CSV / TSV with a header row, parquet, or an
//! Arrow IPC file (`parquet.rs`, `arrow.rs`). Binary cells (image bytes) stand in the records
//! as tokens for their cells ([`Blobs`]).

use std::path::Path;

use serde_json::{Map, Value};

use super::cells::{Blobs, SourceRecord};
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
        Format::Parquet => super::parquet::read(path, how_to_get, blobs),
        Format::Arrow => super::arrow::read(path, how_to_get, blobs),
    }
}

/// The most columns a CSV or TSV source may have.
pub const MAX_COLUMNS: usize = 10_000;

/// A quoted field of delimited text that never closes, and the line it opens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnclosedQuote {
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
pub fn delimited_rows(text: &str, delimiter: char) -> std::result::Result<Vec<(usize, Vec<String>)>, UnclosedQuote> {
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
