//! Reading annotation files and resolving the paths they name inside a data directory.

use std::path::{Component, Path, PathBuf};

use crate::{Error, ErrorKind, Problems, Result};

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

/// A data directory resolved through symbolic links: where a suite's images must really
/// be. An image path that stays inside it by name (checked when the annotations are read)
/// can still lead out through a link (`images/x.png -> /etc/…`);
/// [`DataRoot::leads_outside`] finds that.
///
/// A data directory that is a snapshot of the hub cache ([`crate::hub::Snapshot`]) is made of
/// links into its repo's `blobs/`: those stay inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRoot {
    root: PathBuf,
    /// The snapshot's `blobs/`, resolved, where the root is a hub cache snapshot.
    blobs: Option<PathBuf>,
}

impl DataRoot {
    /// `dir` resolved (or as given, made absolute, when it cannot be resolved).
    pub fn new(dir: &Path) -> Self {
        let resolve = |dir: &Path| {
            std::fs::canonicalize(dir).or_else(|_| std::path::absolute(dir)).unwrap_or_else(|_| dir.to_path_buf())
        };
        let blobs = crate::hub::Snapshot::of(dir).map(|s| resolve(&s.blobs));
        Self { root: resolve(dir), blobs }
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Where `path` really is, if that is outside the root once links are resolved (`None`
    /// inside, or when the path cannot be resolved: its read then names what is missing).
    pub fn leads_outside(&self, path: &Path) -> Option<PathBuf> {
        let real = std::fs::canonicalize(path).ok()?;
        (!self.holds(&real)).then_some(real)
    }

    /// Whether the resolved path `real` is inside the root (or the blobs its snapshot links to).
    pub fn holds(&self, real: &Path) -> bool {
        real.starts_with(&self.root) || self.blobs.as_ref().is_some_and(|b| real.starts_with(b))
    }

    /// [`DataRoot::leads_outside`] as the message that refuses it, naming both paths.
    pub fn refuse_outside(&self, path: &Path) -> Result<()> {
        match self.leads_outside(path) {
            None => Ok(()),
            Some(real) => Err(Error::new(ErrorKind::PathEscapes, format!(
                "{} leads to {}, outside the data directory {} (through a symbolic link); pass --allow-outside-links to read it",
                path.display(),
                real.display(),
                self.root.display()
            ))),
        }
    }
}

/// The text of an annotation file: a missing file is named with `how_to_get`; a directory in
/// its place, or bytes that are not UTF-8 (with the byte offset of the first bad one), are
/// malformed data; a UTF-8 byte order mark (as Windows editors write) is dropped.
pub(crate) fn read_text(path: &Path, how_to_get: &str) -> Result<String> {
    require_regular_file(path)?;
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
    let mut lines = TextLines::open(path, how_to_get)?;
    while let Some(next) = lines.next_line() {
        let (number, text) = next?;
        line(number, text)?;
    }
    Ok(())
}

/// The longest line a line-by-line reader takes (an annotation record is a few hundred
/// bytes, a score dump's line of a 25,000-image gallery's ranks about a megabyte): a longer
/// one is refused after this many bytes, so a file of one endless line is never held.
pub const MAX_LINE_BYTES: u64 = 64 << 20;

/// The lines of a UTF-8 text file, read as a stream (64 KiB at a time; a file of a million
/// lines is never held whole), each with its number from 1 and without its line ending (`\n`
/// or `\r\n`). A byte order mark before the first line is dropped, as Windows editors write
/// one; a byte that is not UTF-8 is an error naming its offset in the file, after which there
/// are no more lines. A missing file is named with the `how_to_get` hint it was opened with;
/// a directory in its place is malformed data.
pub struct TextLines {
    path: PathBuf,
    how_to_get: String,
    reader: std::io::BufReader<std::fs::File>,
    buf: Vec<u8>,
    /// The file offset of `buf`'s first byte.
    offset: usize,
    number: usize,
    done: bool,
}

impl TextLines {
    pub fn open(path: &Path, how_to_get: &str) -> Result<Self> {
        require_regular_file(path)?;
        let file = std::fs::File::open(path).map_err(|e| unreadable(path, how_to_get, e))?;
        Ok(TextLines {
            path: path.to_path_buf(),
            how_to_get: how_to_get.to_string(),
            reader: std::io::BufReader::with_capacity(1 << 16, file),
            buf: Vec::new(),
            offset: 0,
            number: 0,
            done: false,
        })
    }

    /// The next line, borrowed until the next call; `None` after the last line or an error.
    pub fn next_line(&mut self) -> Option<Result<(usize, &str)>> {
        use std::io::BufRead;
        if self.done {
            return None;
        }
        self.offset += self.buf.len();
        self.buf.clear();
        let read = match std::io::Read::take(&mut self.reader, MAX_LINE_BYTES + 1).read_until(b'\n', &mut self.buf) {
            Ok(0) => {
                self.done = true;
                return None;
            }
            Ok(read) if read as u64 > MAX_LINE_BYTES => {
                self.done = true;
                return Some(Err(Error::new(
                    ErrorKind::Malformed,
                    format!(
                        "read {} line {}: it is longer than {MAX_LINE_BYTES} bytes",
                        self.path.display(),
                        self.number + 1
                    ),
                )));
            }
            Ok(read) => read,
            Err(e) => {
                self.done = true;
                return Some(Err(unreadable(&self.path, &self.how_to_get, e)));
            }
        };
        self.number += 1;
        let skip =
            if self.number == 1 && self.buf.starts_with(BOM.to_string().as_bytes()) { BOM.len_utf8() } else { 0 };
        match std::str::from_utf8(&self.buf[skip..read]) {
            Ok(text) => {
                Some(Ok((self.number, text.strip_suffix('\n').map_or(text, |t| t.strip_suffix('\r').unwrap_or(t)))))
            }
            Err(e) => {
                self.done = true;
                Some(Err(not_utf8(&self.path, self.offset + skip + e.valid_up_to())))
            }
        }
    }
}

impl Iterator for TextLines {
    type Item = Result<(usize, String)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_line().map(|line| line.map(|(number, text)| (number, text.to_string())))
    }
}

/// The byte order mark Windows editors open UTF-8 files with.
const BOM: char = '\u{feff}';

/// Refuses what a path names when it is not a regular file (after symbolic links): a
/// directory, or a FIFO, socket or device, which could block a read forever or never end
/// (`/dev/zero`). A path that does not exist is left to the read, which names it.
pub fn require_regular_file(path: &Path) -> Result<()> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let what = if meta.is_dir() {
        "a directory, not a file"
    } else if meta.is_file() {
        return Ok(());
    } else {
        "a FIFO, socket or device, not a regular file"
    };
    Err(Error::new(ErrorKind::Malformed, format!("read {}: it is {what}", path.display())))
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
    problems: &mut Problems,
) -> Option<T> {
    let parsed = read_text(path, how_to_get).and_then(|text| {
        serde_json::from_str(&text)
            .map_err(|e| Error::caused_by(ErrorKind::Malformed, format!("parse {}: {e}", path.display()), e))
    });
    parsed.map_err(|e| problems.push(e)).ok()
}

/// Each element of the JSON list in `path`, read as a stream, so that a list of a million
/// entries is never held whole (nor its text): `element` gets its index and the element.
/// The file's errors are [`read_json`]'s: a missing file named with `how_to_get`, a directory,
/// bytes that are not UTF-8 (their byte offset; a BOM is dropped), or a parse error with its
/// line and column. Returns how many elements there were.
pub(crate) fn for_each_element<T: serde::de::DeserializeOwned>(
    path: &Path,
    how_to_get: &str,
    mut element: impl FnMut(usize, T),
) -> Result<usize> {
    use serde::de::Deserializer as _;
    require_regular_file(path)?;
    let file = std::fs::File::open(path).map_err(|e| unreadable(path, how_to_get, e))?;
    // Checked a buffer at a time; the parser then reads byte by byte from the buffer.
    let bad_byte = std::cell::Cell::new(None);
    let checked = Utf8Reader { inner: file, offset: 0, held: Vec::new(), bad_byte: &bad_byte };
    let reader = std::io::BufReader::with_capacity(1 << 16, checked);
    let mut deserializer = serde_json::Deserializer::from_reader(reader);
    let mut count = 0;
    let parsed = deserializer
        .deserialize_seq(EachElement { element: &mut element, count: &mut count, marker: std::marker::PhantomData })
        .and_then(|()| deserializer.end());
    parsed.map_err(|e| match (bad_byte.get(), e.is_io()) {
        (Some(offset), _) => not_utf8(path, offset),
        (None, true) => Error::caused_by(ErrorKind::MissingData, format!("read {}: {e}", path.display()), e),
        (None, false) => Error::caused_by(ErrorKind::Malformed, format!("parse {}: {e}", path.display()), e),
    })?;
    Ok(count)
}

/// The visitor of [`for_each_element`]: each element handed over as it is parsed.
struct EachElement<'a, T, F> {
    element: &'a mut F,
    count: &'a mut usize,
    marker: std::marker::PhantomData<T>,
}

impl<'de, T: serde::de::DeserializeOwned, F: FnMut(usize, T)> serde::de::Visitor<'de> for EachElement<'_, T, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON list")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(value) = seq.next_element::<T>()? {
            (self.element)(*self.count, value);
            *self.count += 1;
        }
        Ok(())
    }
}

/// A reader that checks its bytes are UTF-8 as they pass, failing with `InvalidData` (the
/// file offset of the first bad byte in `bad_byte` and the message), and drops a leading byte
/// order mark. A character that straddles two reads is held back until it is complete, so the
/// parser never sees a byte that is later found bad.
struct Utf8Reader<'a, R> {
    inner: R,
    /// Bytes given out so far (and the BOM).
    offset: usize,
    /// The start of a character the last read ended inside (at most 3 bytes).
    held: Vec<u8>,
    bad_byte: &'a std::cell::Cell<Option<usize>>,
}

impl<R: std::io::Read> std::io::Read for Utf8Reader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let invalid = |at: usize| {
            self.bad_byte.set(Some(at));
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("invalid byte at {at}"))
        };
        loop {
            let held = self.held.len();
            if buf.len() <= held {
                // Only a caller's tiny buffer; the parser reads through a 64 KiB `BufReader`.
                return Err(std::io::Error::other("read UTF-8 text: a buffer of at least 4 bytes is needed"));
            }
            buf[..held].copy_from_slice(&self.held);
            let read = self.inner.read(&mut buf[held..])?;
            if read == 0 {
                return match held {
                    0 => Ok(0),
                    _ => Err(invalid(self.offset)),
                };
            }
            let total = held + read;
            let valid = match std::str::from_utf8(&buf[..total]) {
                Ok(_) => total,
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(e) => return Err(invalid(self.offset + e.valid_up_to())),
            };
            self.held = buf[valid..total].to_vec();
            let mut given = valid;
            // A byte order mark (Windows editors write one) opens the text, not the JSON.
            let bom = BOM.to_string();
            if self.offset == 0 && buf[..valid].starts_with(bom.as_bytes()) {
                buf.copy_within(bom.len()..valid, 0);
                given -= bom.len();
                self.offset = bom.len();
            }
            self.offset += given;
            if given > 0 {
                return Ok(given);
            }
        }
    }
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

/// A parquet file opened for its rows, its footer checked first: every column chunk must lie
/// inside the file (the `parquet` crate asserts, and so panics, on a chunk at a negative offset
/// or of a negative length, as a damaged footer can say). `missing` names a file that cannot
/// be opened; the other problems are malformed data naming the file.
pub(crate) fn open_parquet(
    path: &Path,
    missing: impl FnOnce(std::io::Error) -> Error,
) -> Result<parquet::file::reader::SerializedFileReader<std::fs::File>> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let malformed = |what: String| Error::new(ErrorKind::Malformed, format!("read {}: {what}", path.display()));
    require_regular_file(path)?;
    let file = std::fs::File::open(path).map_err(missing)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let reader = SerializedFileReader::new(file).map_err(|e| malformed(format!("not a parquet file: {e}")))?;
    let metadata = reader.metadata();
    if metadata.file_metadata().num_rows() < 0 {
        return Err(malformed(format!("its footer claims {} rows", metadata.file_metadata().num_rows())));
    }
    for (g, group) in metadata.row_groups().iter().enumerate() {
        for (c, column) in group.columns().iter().enumerate() {
            // Every codec pyarrow writes is built in; LZO has no reader here.
            if let parquet::basic::Compression::LZO = column.compression() {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "read {}: row group {g} column `{}` is compressed with LZO, which benchctl does not read (snappy, gzip, zstd, brotli and lz4 it does): write the file with another codec",
                        path.display(),
                        column.column_path().string()
                    ),
                ));
            }
            let start = column.dictionary_page_offset().unwrap_or_else(|| column.data_page_offset());
            let len = column.compressed_size();
            let inside =
                start >= 0 && len >= 0 && (start as u64).checked_add(len as u64).is_some_and(|end| end <= size);
            if !inside {
                return Err(malformed(format!(
                    "row group {g} column {c}: its footer places the column at bytes {start}+{len}, outside the file's {size}"
                )));
            }
        }
    }
    Ok(reader)
}

/// The most a parquet file's rows may decode to, for a file of `file_bytes`: 256 MiB and 64
/// times the file. Text and bytes compress a few times at most; a file whose rows decode to
/// far more is a dictionary or compression bomb (one 100 kB string repeated in a million
/// rows is a 1 MB file of 100 GB).
pub fn parquet_row_budget(file_bytes: u64) -> u64 {
    (256 << 20) + 64 * file_bytes
}

/// What a parquet file's rows may decode to ([`parquet_row_budget`]), shared by the readers of
/// its row groups.
pub(crate) struct RowBudget {
    limit: u64,
    size: u64,
    decoded: std::sync::atomic::AtomicU64,
}

impl RowBudget {
    pub fn of(path: &Path) -> Self {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        RowBudget { limit: parquet_row_budget(size), size, decoded: Default::default() }
    }
}

/// The rows of row group `group` (its first row is the file's row `first_row`) of a parquet
/// file opened by [`open_parquet`], only the columns of `projection` where one is given (a
/// projection of no column gives empty rows): no more than its footer declares, none after
/// the first that fails (the reader does not move past a broken page: it would return the
/// same error forever), and none once the rows the file's readers decoded take more than
/// `budget`. Errors name the file and the row.
pub(crate) fn parquet_group_rows(
    reader: &parquet::file::reader::SerializedFileReader<std::fs::File>,
    path: &Path,
    group: usize,
    first_row: usize,
    budget: &RowBudget,
    projection: Option<parquet::schema::types::Type>,
) -> Result<Vec<Result<parquet::record::Row>>> {
    use parquet::file::reader::FileReader;
    let malformed = move |what: String| Error::new(ErrorKind::Malformed, format!("read {}: {what}", path.display()));
    let group_reader = reader.get_row_group(group).map_err(|e| malformed(format!("row group {group}: {e}")))?;
    let declared = usize::try_from(group_reader.metadata().num_rows()).unwrap_or(0);
    if projection.as_ref().is_some_and(|p| p.get_fields().is_empty()) {
        return Ok((0..declared).map(|_| Ok(parquet::record::Row::new(Vec::new()))).collect());
    }
    let rows: Vec<Result<parquet::record::Row>> = {
        let iter = group_reader.get_row_iter(projection).map_err(|e| malformed(format!("row group {group}: {e}")))?;
        let mut out = Vec::new();
        for (i, row) in iter.take(declared).enumerate() {
            let at = first_row + i;
            let row = row.map_err(|e| malformed(format!("row {at}: {e}"))).and_then(|row| {
                let total = budget.decoded.fetch_add(row_bytes(&row), std::sync::atomic::Ordering::Relaxed)
                    + row_bytes(&row);
                if total > budget.limit {
                    return Err(malformed(format!(
                        "its rows decode to more than {} bytes by row {at} (256 MiB and 64 times the file's {}): a dictionary or compression bomb, refused",
                        budget.limit, budget.size
                    )));
                }
                Ok(row)
            });
            let failed = row.is_err();
            out.push(row);
            if failed {
                break;
            }
        }
        out
    };
    Ok(rows)
}

/// What a decoded parquet row takes: its text and bytes by length, 8 bytes for any other value.
fn row_bytes(row: &parquet::record::Row) -> u64 {
    row.get_column_iter().map(|(name, field)| name.len() as u64 + field_bytes(field)).sum()
}

fn field_bytes(field: &parquet::record::Field) -> u64 {
    use parquet::record::Field as F;
    match field {
        F::Str(s) => s.len() as u64 + 8,
        F::Bytes(b) => b.len() as u64 + 8,
        F::Group(row) => row_bytes(row) + 8,
        F::ListInternal(list) => list.elements().iter().map(field_bytes).sum::<u64>() + 8,
        F::MapInternal(map) => map.entries().iter().map(|(k, v)| field_bytes(k) + field_bytes(v)).sum::<u64>() + 8,
        _ => 8,
    }
}

/// Runs `read` (the work of a `reader` of binary files: parquet, Arrow IPC), turning a panic
/// of the reader into a malformed-data error naming `path`: such readers assert (and so
/// panic) on some damaged pages rather than returning an error, and a hostile file must not
/// end the process. The panic's own report is silenced while `read` runs on this thread.
pub(crate) fn reader_guard<T>(path: &Path, reader: &str, read: impl FnOnce() -> Result<T>) -> Result<T> {
    thread_local! {
        static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(std::cell::Cell::get) {
                report(info);
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(read));
    QUIET.with(|q| q.set(false));
    outcome.unwrap_or_else(|payload| {
        let why = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no reason given".into());
        Err(Error::new(
            ErrorKind::Malformed,
            format!("read {}: the {reader} reader failed on damaged data ({why})", path.display()),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Gives out its bytes a few at a time, so that characters straddle reads.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.min(self.0.len()).min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn through(bytes: &[u8], step: usize) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let bad_byte = std::cell::Cell::new(None);
        let mut reader = Utf8Reader { inner: Trickle(bytes, step), offset: 0, held: Vec::new(), bad_byte: &bad_byte };
        let mut buf = [0u8; 8];
        loop {
            match reader.read(&mut buf)? {
                0 => return Ok(out),
                n => out.extend_from_slice(&buf[..n]),
            }
        }
    }

    #[test]
    fn utf8_text_passes_whole_and_a_bad_byte_is_placed_exactly() -> std::io::Result<()> {
        let text = "\u{feff}añ€😀b".as_bytes().to_vec();
        let message = |result: std::io::Result<Vec<u8>>| result.err().map(|e| (e.kind(), e.to_string()));
        for step in 1..=5 {
            assert_eq!(through(&text, step)?, "añ€😀b".as_bytes(), "step {step}");
            // The emoji's last byte broken: its first byte is where the bad character starts.
            let mut broken = text.clone();
            let emoji = broken.len() - 2;
            broken[emoji] = b'x';
            let expected = Some((std::io::ErrorKind::InvalidData, format!("invalid byte at {}", emoji - 3)));
            assert_eq!(message(through(&broken, step)), expected, "step {step}");
            // A character cut short by the end.
            let cut = &text[..text.len() - 2];
            assert_eq!(message(through(cut, step)), expected, "step {step}");
        }
        Ok(())
    }
}
