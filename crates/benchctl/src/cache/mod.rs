//! The embedding cache: each image and text is encoded once per model, across runs.
//!
//! Location: `BENCHCTL_CACHE`, else `$XDG_CACHE_HOME/benchctl`, else `~/.cache/benchctl`;
//! `--no-cache` turns it off. One folder per namespace, named by the hash of its
//! [`CacheIdentity`] (every part a model's or a server's outputs depend on, declared once in
//! [`identity`]) and described by its `identity.json`. Besides embeddings and pair scores, a
//! namespace holds the model's score head (`model::ResolvedModel::load`). Entries are keyed
//! ([`keys::KeyTag`]) by the SHA-256 of the image file's bytes (for an altered image, of both
//! sources and the recipe) or of the text.
//!
//! Each process appends to its own segment file, one flushed record per encoded batch, so a
//! killed run loses at most the batch in flight and concurrent runs never interleave. A
//! segment opens with `"BCS2" | namespace (32)`, the SHA-256 of the namespace it was written
//! for; a segment of another namespace (copied or moved into this folder) is ignored whole. A
//! record is `"BCE2" | key (32) | dim (u32 LE) | dim × f32 LE | check (8)`, the check being
//! the first bytes of SHA-256 over the namespace, key and values (a text entry, a generated
//! reply, is its byte length as u32 LE and its UTF-8 bytes, zero-padded to whole values, in
//! place of the values: [`EmbeddingCache::append_texts`]): a truncated tail, a corrupt
//! record or one spliced in from another namespace is skipped (and so recomputed), never
//! trusted.
//!
//! Opening a namespace reads its segments through once, checking every record, and keeps
//! only where each valid record lies (about 60 bytes an entry); [`EmbeddingCache::get`] reads
//! the values then, and checks them again, through at most eight open segments (a cache used
//! by thousands of runs has thousands of segments). Millions of cached embeddings (2,000,000
//! captions of a 512-wide model are 4 GB) are never held in memory at once.

use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use benchctl_base::spill::{Map, SpillVec};
use sha2::{Digest, Sha256};

use crate::{Error, ErrorKind, Result};

pub mod identity;
pub mod keys;
pub use identity::CacheIdentity;
pub use keys::{image_keys, remember, text_keys, KeyTag, Keys, SourceList};

/// The file in each namespace folder that says what the folder holds ([`CacheIdentity`]).
pub const IDENTITY_FILE: &str = "identity.json";

const MAGIC: &[u8; 4] = b"BCE2";
const SEGMENT_MAGIC: &[u8; 4] = b"BCS2";
/// A segment's header: magic and the namespace's hash.
const SEGMENT_HEAD: usize = 4 + 32;

/// A content key.
pub type Key = [u8; 32];

/// Prints a warning that the cache cannot be written, once per process: the embeddings and
/// the file-key memo share one location, and a full disk is one problem, not one per writer.
pub(crate) fn warn_unwritable(message: &str) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        benchctl_base::stderr_line!("warning: {message}");
    }
}

/// SHA-256 of `parts`, each length-prefixed so that boundaries are unambiguous.
pub fn key(parts: &[&[u8]]) -> Key {
    let mut h = Sha256::new();
    for part in parts {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize().into()
}

fn check(namespace: &Key, key: &Key, values: &[u8]) -> [u8; 8] {
    let digest = Sha256::new().chain_update(namespace).chain_update(key).chain_update(values).finalize();
    let mut out = [0u8; 8];
    out.copy_from_slice(&digest[..8]);
    out
}

/// Little-endian u32 / f32 from exactly four bytes.
fn le4(b: &[u8]) -> [u8; 4] {
    [b[0], b[1], b[2], b[3]]
}

/// The default cache root from the environment.
pub fn default_root() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("BENCHCTL_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("benchctl")))
        .or_else(|| var("HOME").map(|d| d.join(".cache/benchctl")))
}

/// One model namespace of the cache.
pub struct EmbeddingCache {
    dir: Option<PathBuf>,
    /// SHA-256 of the namespace string: written at the head of every segment, and part of
    /// every record's check.
    namespace: Key,
    /// Every checked record's key and where its values lie (a later record of a key replaces
    /// an earlier one): spilled past the memory budget
    /// ([`benchctl_base::spill`]), since a cache grows with every suite it has seen.
    entries: Map<Key, Location>,
    /// The segments read at open, for [`EmbeddingCache::get`], and the few it has open (a
    /// cache used by thousands of runs has thousands of segments: never one descriptor each).
    segments: Vec<PathBuf>,
    open_segments: std::sync::Mutex<Vec<(u32, std::fs::File)>>,
    segment: Option<std::fs::File>,
    /// Records skipped on load as truncated or corrupt.
    pub skipped: usize,
    /// Set once a write failed: the run goes on without storing (warned once).
    write_failed: bool,
}

impl EmbeddingCache {
    /// A cache that stores nothing.
    pub fn disabled() -> Self {
        Self {
            dir: None,
            namespace: [0; 32],
            entries: Map::default(),
            segments: Vec::new(),
            open_segments: Default::default(),
            segment: None,
            skipped: 0,
            write_failed: false,
        }
    }

    /// Whether entries are written anywhere (not `--no-cache`, and a usable location).
    pub fn is_enabled(&self) -> bool {
        self.dir.is_some()
    }

    /// Opens (creating) the folder of `identity` under `root`, writing its `identity.json`
    /// the first time, and reads its segments.
    pub fn open_for(root: &Path, identity: &CacheIdentity) -> Result<Self> {
        let cache = Self::open(root, &identity.canonical())?;
        if let Some(dir) = &cache.dir {
            let file = dir.join(IDENTITY_FILE);
            if !file.exists() {
                // Written beside and renamed, so a reader never sees half of it; a failure only
                // leaves the folder undescribed.
                let partial = dir.join(format!("{IDENTITY_FILE}.{}.partial", std::process::id()));
                let written =
                    std::fs::write(&partial, identity.pretty() + "\n").and_then(|_| std::fs::rename(&partial, &file));
                if written.is_err() {
                    let _ = std::fs::remove_file(&partial);
                }
            }
        }
        Ok(cache)
    }

    /// Opens (creating) the namespace whose canonical text is `namespace` under `root` and
    /// reads its segments ([`EmbeddingCache::open_for`] with an identity's canonical form).
    pub fn open(root: &Path, namespace: &str) -> Result<Self> {
        let namespace = key(&[namespace.as_bytes()]);
        let dir = root.join(hex(&namespace[..16]));
        std::fs::create_dir_all(&dir).map_err(|e| {
            Error::caused_by(ErrorKind::Results, format!("create cache directory {}: {e}", dir.display()), e)
        })?;
        let mut cache = Self { dir: Some(dir.clone()), namespace, ..Self::disabled() };
        let mut segments: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| {
                Error::caused_by(ErrorKind::Results, format!("read cache directory {}: {e}", dir.display()), e)
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "bin"))
            .collect();
        segments.sort();
        for path in segments {
            // An unreadable segment is skipped like a corrupt one: its entries are recomputed.
            match std::fs::File::open(&path) {
                Ok(file) => cache.read_segment(file, path),
                Err(_) => cache.skipped += 1,
            }
        }
        Ok(cache)
    }

    /// Indexes the valid records of one segment, read as a stream. A record that fails its
    /// check is skipped; one that is truncated or has no valid header ends the segment (each
    /// counted in `skipped`).
    fn read_segment(&mut self, file: std::fs::File, path: PathBuf) {
        let segment = self.segments.len() as u32;
        let mut reader = BufReader::with_capacity(1 << 16, &file);
        let mut head = [0u8; SEGMENT_HEAD];
        // A segment written for another namespace, or in an older format, is not this model's.
        if reader.read_exact(&mut head).is_err() || &head[..4] != SEGMENT_MAGIC || head[4..] != self.namespace {
            self.skipped += 1;
            return;
        }
        let mut offset = SEGMENT_HEAD as u64;
        let mut record_head = [0u8; RECORD_HEAD];
        let mut values = Vec::new();
        let mut found = 0usize;
        loop {
            match reader.read(&mut record_head[..1]) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => {
                    self.skipped += 1;
                    break;
                }
            }
            if reader.read_exact(&mut record_head[1..]).is_err() || &record_head[..4] != MAGIC {
                self.skipped += 1;
                break;
            }
            let mut key: Key = [0; 32];
            key.copy_from_slice(&record_head[4..36]);
            let dim = u32::from_le_bytes(le4(&record_head[36..40]));
            if dim == 0 || dim > MAX_RECORD_VALUES {
                self.skipped += 1;
                break;
            }
            values.resize(dim as usize * 4 + 8, 0);
            if reader.read_exact(&mut values).is_err() {
                self.skipped += 1;
                break;
            }
            // A record whose check fails is skipped alone: its framing still holds.
            let (raw, stored) = values.split_at(dim as usize * 4);
            if check(&self.namespace, &key, raw) == stored {
                self.entries.insert(key, Location { segment, offset: offset + RECORD_HEAD as u64, dim });
                found += 1;
            } else {
                self.skipped += 1;
            }
            offset += (RECORD_HEAD + values.len()) as u64;
        }
        if found > 0 {
            self.segments.push(path);
        }
    }

    /// The values stored under `key`, read from their segment and checked again (a segment
    /// changed since it was opened gives a miss, and the input is encoded again).
    pub fn get(&self, key: &Key) -> Option<Vec<f32>> {
        let raw = self.get_raw(key)?;
        Some(raw.chunks_exact(4).map(|c| f32::from_le_bytes(le4(c))).collect())
    }

    /// The text stored under `key` ([`EmbeddingCache::append_texts`]); a miss where the entry
    /// is not a whole text of valid UTF-8.
    pub fn get_text(&self, key: &Key) -> Option<String> {
        let raw = self.get_raw(key)?;
        let len = u32::from_le_bytes(le4(&raw[..4])) as usize;
        let text = raw.get(4..4 + len)?;
        String::from_utf8(text.to_vec()).ok()
    }

    /// The checked bytes of the values under `key`.
    fn get_raw(&self, key: &Key) -> Option<Vec<u8>> {
        let at = self.entries.get(key)?;
        let mut bytes = vec![0u8; at.dim as usize * 4 + 8];
        self.read_at(at.segment, &mut bytes, at.offset).ok()?;
        let (raw, stored) = bytes.split_at(at.dim as usize * 4);
        (check(&self.namespace, key, raw) == stored).then(|| raw.to_vec())
    }

    /// Reads `buf.len()` bytes of segment `segment` at `offset`, through a handful of open
    /// segments (the most recently used last; runs read their rows mostly from one segment).
    fn read_at(&self, segment: u32, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        const KEEP_OPEN: usize = 8;
        let mut open = self.open_segments.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let file = match open.iter().position(|(s, _)| *s == segment) {
            Some(i) => {
                let entry = open.remove(i);
                open.push(entry);
                &open[open.len() - 1].1
            }
            None => {
                let file = std::fs::File::open(&self.segments[segment as usize])?;
                if open.len() == KEEP_OPEN {
                    open.remove(0);
                }
                open.push((segment, file));
                &open[open.len() - 1].1
            }
        };
        read_exact_at(file, buf, offset)
    }

    /// How many values `key` has, without reading them.
    pub fn dim(&self, key: &Key) -> Option<usize> {
        self.entries.get(key).map(|at| at.dim as usize)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Stores a batch of embeddings: appended to this process's segment and flushed, not kept
    /// in memory (the caller holds what it encoded; [`EmbeddingCache::get`] serves what
    /// earlier runs stored). The cache is an accelerator, never a point of failure: a write
    /// that fails (read-only location, full disk) warns once, and the run goes on without
    /// storing.
    pub fn append(&mut self, batch: &[(Key, &[f32])]) -> Result<()> {
        let raw = batch.iter().map(|(key, values)| (*key, values.iter().flat_map(|v| v.to_le_bytes()).collect()));
        self.append_raw(raw.collect())
    }

    /// Stores texts (generated replies) as [`EmbeddingCache::append`] stores values: each its
    /// byte length (u32 LE) and its bytes, zero-padded to whole 4-byte values.
    pub fn append_texts(&mut self, batch: &[(Key, &str)]) -> Result<()> {
        let raw = batch.iter().map(|(key, text)| {
            let mut raw = (text.len() as u32).to_le_bytes().to_vec();
            raw.extend_from_slice(text.as_bytes());
            raw.resize(raw.len().next_multiple_of(4), 0);
            (*key, raw)
        });
        self.append_raw(raw.collect())
    }

    fn append_raw(&mut self, mut batch: Vec<(Key, Vec<u8>)>) -> Result<()> {
        if self.write_failed {
            return Ok(());
        }
        // Too long to read back (a reply of more than 4 MiB): left uncached.
        batch.retain(|(_, raw)| raw.len() / 4 <= MAX_RECORD_VALUES as usize);
        if let Err(e) = self.write(&batch) {
            self.write_failed = true;
            warn_unwritable(&format!("failed to {e}; the run goes on without storing in the embedding cache"));
        }
        Ok(())
    }

    /// Appends records of `raw` values (whole 4-byte values, at most [`MAX_RECORD_VALUES`]).
    fn write(&mut self, batch: &[(Key, Vec<u8>)]) -> Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let mut buf = Vec::new();
        for (key, raw) in batch {
            buf.extend_from_slice(MAGIC);
            buf.extend_from_slice(key);
            buf.extend_from_slice(&((raw.len() / 4) as u32).to_le_bytes());
            buf.extend_from_slice(raw);
            buf.extend_from_slice(&check(&self.namespace, key, raw));
        }
        let write_error = |e: std::io::Error| {
            Error::new(ErrorKind::Results, format!("write the embedding cache in {}: {e}", dir.display()))
        };
        let file = match &mut self.segment {
            Some(file) => file,
            None => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                let path = dir.join(format!("seg-{nanos}-{}.bin", std::process::id()));
                let mut file =
                    std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(write_error)?;
                file.write_all(SEGMENT_MAGIC).and_then(|_| file.write_all(&self.namespace)).map_err(write_error)?;
                self.segment.insert(file)
            }
        };
        file.write_all(&buf).and_then(|_| file.flush()).map_err(write_error)
    }
}

/// The most values a record holds: a longer one is taken for a corrupt header when read (and
/// ends its segment), so it is never written.
const MAX_RECORD_VALUES: u32 = 1 << 20;

/// A record's header: magic, key and dim.
const RECORD_HEAD: usize = 4 + 32 + 4;

/// Where a checked record's values lie: its segment (an index into `segments`), the byte
/// offset of its values, and how many there are.
#[derive(Debug, Clone, Copy)]
struct Location {
    segment: u32,
    offset: u64,
    dim: u32,
}

fn read_exact_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(not(unix))]
    {
        use std::io::Seek;
        let mut file = file;
        file.seek(std::io::SeekFrom::Start(offset))?;
        file.read_exact(buf)
    }
}

/// Lower-case hexadecimal of bytes (digests in run records and file names).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `tag.key(&[<the file's bytes>])`, streamed: a file is never held in memory to hash it.
pub fn key_of_file(path: &Path, tag: KeyTag, len: u64) -> std::io::Result<Key> {
    use std::io::Read;
    let tag = tag.bytes();
    let mut h = Sha256::new();
    h.update((tag.len() as u64).to_le_bytes());
    h.update(tag);
    h.update(len.to_le_bytes());
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut read = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        read += n as u64;
        h.update(&buf[..n]);
    }
    if read != len {
        return Err(std::io::Error::other(format!(
            "{} changed while it was read ({len} then {read} bytes)",
            path.display()
        )));
    }
    Ok(h.finalize().into())
}

/// Content keys of image files remembered by path, size and modification time, so a re-run
/// hashes no file it has hashed before (EqBen's images are ~100 GB). Kept under
/// `<cache root>/file-keys/`, one append-only segment per process; a record is `"BCK1" |
/// path length (u32) | path | size (u64) | mtime (ns, u128) | tag length (u8) | tag | key (32) |
/// check (8)`, the check being SHA-256 over everything before it. A record that does not
/// check out is skipped; a file whose size or mtime changed is hashed again. Unreadable or
/// unwritable, the memo is simply not used: it is an accelerator, never a point of failure.
pub struct FileKeys {
    dir: Option<PathBuf>,
    /// Each remembered file's identity digest ([`file_id`]) and content key, in
    /// a spilled map, since the memo grows with every image it has seen.
    known: Map<Key, Key>,
    /// The records this process will append (already encoded), spilled as they grow.
    fresh: std::sync::Mutex<SpillVec<u8>>,
    /// Files whose bytes were read and hashed by this process.
    pub hashed: std::sync::atomic::AtomicUsize,
    /// Where every keyed file must really be (a suite's data directory), unless the user
    /// allowed links out of it.
    pub inside: Option<benchctl_suites::paths::DataRoot>,
}

const FILE_KEY_MAGIC: &[u8; 4] = b"BCK1";

/// What a remembered key is valid for, as one digest: the file's absolute path (as the
/// records store it), size, mtime (ns) and the key's tag (`file`, `npy-bgr`).
fn file_id(path: &str, size: u64, mtime: u128, tag: &[u8]) -> Key {
    KeyTag::FileId.key(&[path.as_bytes(), &size.to_le_bytes(), &mtime.to_le_bytes(), tag])
}

impl FileKeys {
    /// A memo that remembers nothing (every file is hashed).
    pub fn disabled() -> Self {
        Self { dir: None, known: Map::default(), fresh: Default::default(), hashed: Default::default(), inside: None }
    }

    /// The memo under `root`, with every readable record loaded.
    pub fn open(root: &Path) -> Self {
        let dir = root.join("file-keys");
        let mut memo = Self { dir: Some(dir.clone()), ..Self::disabled() };
        let Ok(entries) = std::fs::read_dir(&dir) else { return memo };
        for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            if let Ok(file) = std::fs::File::open(&path) {
                memo.read_segment(BufReader::new(file));
            }
        }
        memo
    }

    /// Loads one segment's records, read as a stream, up to the first that does not check out.
    fn read_segment(&mut self, mut reader: impl Read) {
        let mut take = |n: usize, body: &mut Vec<u8>| -> Option<std::ops::Range<usize>> {
            let start = body.len();
            body.resize(start + n, 0);
            reader.read_exact(&mut body[start..]).ok()?;
            Some(start..start + n)
        };
        let mut body = Vec::new();
        loop {
            body.clear();
            let record = (|| {
                let magic = take(4, &mut body)?;
                if body[magic] != FILE_KEY_MAGIC[..] {
                    return None;
                }
                let len = take(4, &mut body)?;
                let len = u32::from_le_bytes(body[len].try_into().ok()?) as usize;
                // A path longer than any file system allows is a corrupt length, not a read.
                if len > 1 << 16 {
                    return None;
                }
                let path = take(len, &mut body)?;
                let size = take(8, &mut body)?;
                let mtime = take(16, &mut body)?;
                let tag_len = take(1, &mut body)?;
                let tag = take(body[tag_len.start] as usize, &mut body)?;
                let content = take(32, &mut body)?;
                let check = take(8, &mut body)?;
                if Sha256::digest(&body[..check.start])[..8] != body[check] {
                    return None;
                }
                let path = std::str::from_utf8(&body[path]).ok()?;
                let size = u64::from_le_bytes(body[size].try_into().ok()?);
                let mtime = u128::from_le_bytes(body[mtime].try_into().ok()?);
                Some((file_id(path, size, mtime, &body[tag]), body[content].try_into().ok()?))
            })();
            // A torn or corrupt tail (or the end): the rest of the segment is not trusted.
            let Some((id, content)) = record else { return };
            self.known.insert(id, content);
        }
    }

    /// The content key `key(&[tag, bytes])` of the file at `path`: remembered when its size
    /// and mtime are unchanged, else read, hashed and remembered. A path that is not UTF-8
    /// is not remembered (the records store paths as text).
    pub fn key_of(&self, path: &Path, tag: KeyTag) -> std::io::Result<Key> {
        let (meta, mtime, absolute) = self.stat(path)?;
        let remembered = absolute.to_str().filter(|_| self.dir.is_some() && mtime != 0).map(str::to_string);
        self.remembered_or(remembered, meta.len(), mtime, tag, || key_of_file(path, tag, meta.len()))
    }

    /// The content key `key(&[tag, bytes])` of an image held inside the annotation file
    /// `file` as its cell `name` (`row 12 image_0`): remembered, as a file's is, while that
    /// file's size and mtime are unchanged (a warm run reads no cell), else the cell `read`
    /// and hashed.
    pub fn key_of_cell<B: AsRef<[u8]>>(
        &self,
        file: &Path,
        name: &str,
        read: impl FnOnce() -> std::result::Result<B, String>,
        tag: KeyTag,
    ) -> std::io::Result<Key> {
        let (meta, mtime, absolute) = self.stat(file)?;
        let remembered =
            absolute.to_str().filter(|_| self.dir.is_some() && mtime != 0).map(|file| format!("{file}#{name}"));
        self.remembered_or(remembered, meta.len(), mtime, tag, || {
            read().map(|bytes| tag.key(&[bytes.as_ref()])).map_err(std::io::Error::other)
        })
    }

    /// A file's metadata, its mtime in nanoseconds (0: unknown) and its absolute path, which
    /// must be inside the data directory when the memo says so.
    fn stat(&self, path: &Path) -> std::io::Result<(std::fs::Metadata, u128, std::path::PathBuf)> {
        let meta = std::fs::metadata(path)?;
        // A FIFO would block the read, a device never end.
        if !meta.is_file() {
            return Err(std::io::Error::other("it is not a regular file"));
        }
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let absolute = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if let Some(root) = &self.inside {
            if !root.holds(&absolute) {
                return Err(std::io::Error::other(format!(
                    "it leads to {}, outside the data directory {} (through a symbolic link); pass --allow-outside-links to read it",
                    absolute.display(),
                    root.path().display()
                )));
            }
        }
        Ok((meta, mtime, absolute))
    }

    /// The key remembered for `remembered` (a path, or a file's path and cell) at this size
    /// and mtime, else `compute`d, counted and remembered.
    fn remembered_or(
        &self,
        remembered: Option<String>,
        size: u64,
        mtime: u128,
        tag: KeyTag,
        compute: impl FnOnce() -> std::io::Result<Key>,
    ) -> std::io::Result<Key> {
        let id = remembered.as_deref().map(|p| file_id(p, size, mtime, tag.bytes()));
        if let Some(id) = &id {
            if let Some(content) = self.known.get(id) {
                return Ok(content);
            }
        }
        let key = compute()?;
        self.hashed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(path) = remembered {
            if let Ok(mut fresh) = self.fresh.lock() {
                let start = fresh.len();
                fresh.extend_from_slice(FILE_KEY_MAGIC);
                fresh.extend_from_slice(&(path.len() as u32).to_le_bytes());
                fresh.extend_from_slice(path.as_bytes());
                fresh.extend_from_slice(&size.to_le_bytes());
                fresh.extend_from_slice(&mtime.to_le_bytes());
                fresh.extend_from_slice(&[tag.bytes().len() as u8]);
                fresh.extend_from_slice(tag.bytes());
                fresh.extend_from_slice(&key);
                let check = Sha256::digest(&fresh[start..]);
                fresh.extend_from_slice(&check[..8]);
            }
        }
        Ok(key)
    }

    /// Appends what this process hashed to its own segment. A failure leaves the memo as it
    /// was (the files are hashed again next time).
    pub fn save(&self) -> std::io::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let fresh = std::mem::take(&mut *self.fresh.lock().map_err(|_| std::io::Error::other("poisoned memo"))?);
        if fresh.is_empty() {
            return Ok(());
        }
        std::fs::create_dir_all(dir)?;
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("keys-{nanos}-{}.bin", std::process::id())))?;
        file.write_all(&fresh)
    }
}
