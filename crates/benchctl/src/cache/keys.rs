//! The embedding cache's keys of a run's inputs: an image's from its bytes (files through
//! the path/size/mtime memo), a text's from its characters, a pair's from both.

use std::path::Path;

use benchctl_base::spill::SpillVec;
use benchctl_suites::ImageSource;
use rayon::prelude::*;

use super::{key, warn_unwritable, FileKeys, Key};
use crate::{Error, ErrorKind, Result};

/// What a key is of: the first part of every key hashed, so that keys of different things
/// never collide. Every tag of the cache is here; the bytes are the cache's format (changing
/// one orphans every entry keyed by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyTag {
    /// An image file's (or an embedded image's) bytes.
    File,
    /// A `.npy` frame in BGR order (EqBen's Kubric and SD frames).
    NpyBgr,
    /// A region of an image file.
    Cropped,
    /// RoCOCO's altered image: two sources and the recipe.
    Altered,
    /// Images shown together in one prompt: each one's key, in order.
    Together,
    /// A text.
    Text,
    /// An (image, text) pair's fusion score.
    Pair,
    /// The reply generated for a pair (its [`KeyTag::Pair`] key): a text entry.
    Reply,
    /// A file's identity in the file-key memo: path, size, mtime and its key's tag.
    FileId,
    /// A dual encoder's score head.
    SimilarityHead,
    /// The kind of a fusion model's pair scores.
    FusionScoreKind,
    /// A model file's bytes, for a cache identity's digests.
    Content,
}

impl KeyTag {
    pub fn bytes(self) -> &'static [u8] {
        match self {
            KeyTag::File => b"file",
            KeyTag::NpyBgr => b"npy-bgr",
            KeyTag::Cropped => b"cropped",
            KeyTag::Altered => b"altered",
            KeyTag::Together => b"together",
            KeyTag::Text => b"text",
            KeyTag::Pair => b"pair",
            KeyTag::Reply => b"reply",
            KeyTag::FileId => b"file-id",
            KeyTag::SimilarityHead => b"similarity-head",
            KeyTag::FusionScoreKind => b"fusion-score-kind",
            KeyTag::Content => b"content",
        }
    }

    /// The key of `parts` under this tag.
    pub fn key(self, parts: &[&[u8]]) -> Key {
        let mut all = Vec::with_capacity(parts.len() + 1);
        all.push(self.bytes());
        all.extend_from_slice(parts);
        key(&all)
    }
}

/// Saves what the memo learnt; a failure only costs rehashing next time, so it warns.
pub fn remember(memo: &FileKeys) {
    if let Err(e) = memo.save() {
        warn_unwritable(&format!(
            "failed to remember image keys in the cache ({e}); the run goes on, and they are hashed again next run"
        ));
    }
}

/// The cache key of an image: the SHA-256 of its bytes (for an altered image, of both
/// sources' keys and the recipe), files' keys through the path/size/mtime memo.
pub fn image_key(source: &ImageSource, memo: &FileKeys) -> Result<Key> {
    let key_of = |path: &Path, tag: KeyTag| {
        memo.key_of(path, tag)
            .map_err(|e| Error::caused_by(ErrorKind::Data, format!("read image {}: {e}", path.display()), e))
    };
    Ok(match source {
        ImageSource::File(path) => key_of(path, KeyTag::File)?,
        ImageSource::NpyBgr(path) => key_of(path, KeyTag::NpyBgr)?,
        // The same bytes as a file: a parquet release shares the cache with the jsonl one.
        ImageSource::Embedded(e) => {
            memo.key_of_cell(&e.file, &e.name, || e.cell.read(), KeyTag::File).map_err(|err| {
                Error::caused_by(ErrorKind::Data, format!("read image {}: {err}", source.display_name()), err)
            })?
        }
        ImageSource::Cropped(c) => {
            let r = c.region;
            let recipe = format!("{},{},{},{}", r.left, r.top, r.right, r.bottom);
            KeyTag::Cropped.key(&[&key_of(&c.file, KeyTag::File)?, recipe.as_bytes()])
        }
        ImageSource::Altered(a) => {
            let recipe = format!("{:?}|{}|{}", a.spec.method, a.spec.lambda_milli, a.spec.draw);
            KeyTag::Altered.key(&[&key_of(&a.base, KeyTag::File)?, &key_of(&a.other, KeyTag::File)?, recipe.as_bytes()])
        }
        ImageSource::Together(images) => {
            let keys = images.iter().map(|image| image_key(image, memo)).collect::<Result<Vec<Key>>>()?;
            KeyTag::Together.key(&keys.iter().map(|k| k.as_slice()).collect::<Vec<&[u8]>>())
        }
    })
}

/// Image sources by index: a suite's distinct sources (spilled, each made as it is asked
/// for) or a list in memory (a retrieval gallery's).
pub trait SourceList: Sync {
    fn len(&self) -> usize;
    fn source(&self, i: usize) -> ImageSource;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SourceList for benchctl_suites::items::Sources {
    fn len(&self) -> usize {
        benchctl_suites::items::Sources::len(self)
    }

    fn source(&self, i: usize) -> ImageSource {
        self.get(i)
    }
}

impl SourceList for [ImageSource] {
    fn len(&self) -> usize {
        <[ImageSource]>::len(self)
    }

    fn source(&self, i: usize) -> ImageSource {
        self[i].clone()
    }
}

/// The cache keys of `images` (their files read on all cores, unless the memo knows them;
/// spilled with the suite).
pub fn image_keys(images: &(impl SourceList + ?Sized), memo: &FileKeys) -> Result<SpillVec<Key>> {
    let mut keys = SpillVec::with_capacity(images.len());
    for start in (0..images.len()).step_by(1 << 14) {
        let chunk = start..(start + (1 << 14)).min(images.len());
        let chunk_keys: Vec<Key> =
            chunk.into_par_iter().map(|i| image_key(&images.source(i), memo)).collect::<Result<_>>()?;
        keys.extend_from_slice(&chunk_keys);
    }
    Ok(keys)
}

/// The cache keys of `texts`, made as they are asked for.
pub fn text_keys<'a>(texts: &'a [&'a str]) -> Keys<'a> {
    Keys::OfTexts(texts)
}

/// The cache keys of one kind of input, by index. Image keys are held (each took reading its
/// file); a text's key is made again whenever it is asked for: hashing a caption is cheaper
/// than holding 32 bytes for each of millions of them.
pub enum Keys<'a> {
    Held(SpillVec<Key>),
    OfTexts(&'a [&'a str]),
}

impl Keys<'_> {
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        match self {
            Keys::Held(keys) => keys.len(),
            Keys::OfTexts(texts) => texts.len(),
        }
    }

    /// The key of input `i`.
    pub fn get(&self, i: usize) -> Key {
        match self {
            Keys::Held(keys) => keys[i],
            Keys::OfTexts(texts) => KeyTag::Text.key(&[texts[i].as_bytes()]),
        }
    }

    /// The keys of the inputs `wanted` marks (every input's without it), in order.
    pub fn wanted<'s>(&'s self, wanted: Option<&'s [bool]>) -> impl Iterator<Item = Key> + 's {
        (0..self.len()).filter(move |&i| wanted.is_none_or(|w| w[i])).map(move |i| self.get(i))
    }
}

impl From<SpillVec<Key>> for Keys<'_> {
    fn from(keys: SpillVec<Key>) -> Self {
        Keys::Held(keys)
    }
}

impl From<Vec<Key>> for Keys<'_> {
    fn from(keys: Vec<Key>) -> Self {
        Keys::Held(keys.into())
    }
}
