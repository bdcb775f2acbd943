//! Encoding a suite's unique inputs: image keys (content hashes, memoised), the embedding
//! cache consulted first, the missing images decoded a batch ahead on all cores while the
//! model encodes the previous batch, texts checked against the model's context; for fusion
//! models each unique (image, text) pair scored once (`PairTable`). The stage that talks to
//! the embedding cache.

use std::collections::HashMap;
use std::path::Path;

use benchctl_models::preprocess::Preprocessor;
use benchctl_models::{DualEncoder, FusionEncoder};
use benchctl_scoring::spill::{touched, SpillVec};
use benchctl_scoring::ScoreTensor;
use benchctl_suites::{ImageSource, Suite};
use candle_core::{DType, Device, Tensor};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

use crate::cache::{self, EmbeddingCache};
use crate::cli::LongCaptionArg;
use crate::model::ResolvedModel;
use crate::results::Counts;
use crate::{Error, ErrorKind, Result};

/// How many of `texts` the model's tokenizer truncates, and its context: with
/// `--on-long-caption error`, the first such caption is an error (bad data, naming it and how
/// many tokens it loses) before any model work.
pub(crate) fn long_captions(
    resolved: &ResolvedModel,
    texts: &[&str],
    policy: LongCaptionArg,
) -> Result<(usize, usize)> {
    let limit = resolved.caption_limit()?;
    let tokenize = |e| Error::caused_by(ErrorKind::Model, format!("tokenize the captions: {e}"), e);
    // Counted, not collected: a million-item suite has two million captions.
    let truncated = texts
        .par_iter()
        .map(|t| {
            // The captions are read from the spilled items: counted, so trimmed as they pass.
            touched(t.len() + size_of::<&str>());
            limit.tokens_cut(t).map(|cut| usize::from(cut > 0))
        })
        .try_reduce(|| 0, |a, b| Ok(a + b))
        .map_err(tokenize)?;
    if policy == LongCaptionArg::Error && truncated > 0 {
        let first =
            texts.par_iter().map(|t| limit.tokens_cut(t).map(|cut| (*t, cut))).find_first(|r| !matches!(r, Ok((_, 0))));
        if let Some((text, cut)) = first.transpose().map_err(tokenize)? {
            return Err(Error::new(
                ErrorKind::Data,
                format!(
                    "accept caption {text:?}: it is {cut} token(s) longer than the model's {}-token context ({truncated} caption(s) are; --on-long-caption truncate cuts them as the reference pipeline does)",
                    limit.context
                ),
            ));
        }
    }
    Ok((truncated, limit.context))
}

/// Saves what the memo learnt; a failure only costs rehashing next time, so it warns.
pub(crate) fn remember(memo: &cache::FileKeys) {
    if let Err(e) = memo.save() {
        cache::warn_unwritable(&format!(
            "failed to remember image keys in the cache ({e}); the run goes on, and they are hashed again next run"
        ));
    }
}

/// A suite's items and, for each of their image and text slots in order, the unique input it
/// shows ([`unique_by`]'s slots), with where each item's slots start.
pub(crate) struct ItemInputs<'a> {
    pub suite: &'a Suite,
    pub image_slots: &'a [usize],
    pub text_slots: &'a [usize],
    /// `items + 1` offsets into the slots: item n's are `start[n]..start[n + 1]`.
    image_start: SpillVec<usize>,
    text_start: SpillVec<usize>,
}

impl<'a> ItemInputs<'a> {
    pub(crate) fn new(suite: &'a Suite, image_slots: &'a [usize], text_slots: &'a [usize]) -> Self {
        let starts = |count: fn(benchctl_suites::ItemRef) -> usize| {
            let mut start = SpillVec::with_capacity(suite.items.len() + 1);
            start.push(0);
            for item in &suite.items {
                start.push(start[start.len() - 1] + count(item));
                touched(benchctl_scoring::spill::ITEM_BYTES);
            }
            start
        };
        let (image_start, text_start) = (starts(|i| i.image_count()), starts(|i| i.text_count()));
        Self { suite, image_slots, text_slots, image_start, text_start }
    }

    /// Item n's image slots.
    pub(crate) fn images_of(&self, n: usize) -> &'a [usize] {
        &self.image_slots[self.image_start[n]..self.image_start[n + 1]]
    }

    /// Item n's text slots.
    pub(crate) fn texts_of(&self, n: usize) -> &'a [usize] {
        &self.text_slots[self.text_start[n]..self.text_start[n + 1]]
    }

    /// The image slots of items `range`.
    pub(crate) fn images_of_range(&self, range: std::ops::Range<usize>) -> &'a [usize] {
        &self.image_slots[self.image_start[range.start]..self.image_start[range.end]]
    }

    /// The text slots of items `range`.
    pub(crate) fn texts_of_range(&self, range: std::ops::Range<usize>) -> &'a [usize] {
        &self.text_slots[self.text_start[range.start]..self.text_start[range.end]]
    }
}

/// Each distinct value once, in first-seen order, and the slot of every occurrence. The
/// distinct values are found through a table of their positions (8 bytes a slot; a suite of a
/// million items has two million captions); all three grow with the suite, so they spill.
pub(crate) fn unique_by<'a, T: Eq + std::hash::Hash + ?Sized + 'a>(
    values: impl Iterator<Item = &'a T>,
) -> (SpillVec<usize>, SpillVec<&'a T>) {
    let mut index = benchctl_scoring::spill::Index::default();
    let mut unique: SpillVec<&T> = SpillVec::new();
    let slots = values
        .map(|v| {
            let found = index.find_or_add(v, unique.len(), |at| unique[at] == v);
            found.map_or_else(
                || {
                    unique.push(v);
                    unique.len() - 1
                },
                |at| at as usize,
            )
        })
        .collect();
    (slots, unique)
}

pub(crate) fn progress(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg:>16} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// The cache key of an image: the SHA-256 of its bytes (for an altered image, of both
/// sources' keys and the recipe), files' keys through the path/size/mtime memo.
pub(crate) fn image_key(source: &ImageSource, memo: &cache::FileKeys) -> Result<cache::Key> {
    let key_of = |path: &Path, tag: &[u8]| {
        memo.key_of(path, tag)
            .map_err(|e| Error::caused_by(ErrorKind::Data, format!("read image {}: {e}", path.display()), e))
    };
    Ok(match source {
        ImageSource::File(path) => key_of(path, b"file")?,
        ImageSource::NpyBgr(path) => key_of(path, b"npy-bgr")?,
        // The same bytes as a file: a parquet release shares the cache with the jsonl one.
        ImageSource::Embedded(e) => cache::key(&[b"file", &e.bytes]),
        ImageSource::Cropped(c) => {
            let r = c.region;
            let recipe = format!("{},{},{},{}", r.left, r.top, r.right, r.bottom);
            cache::key(&[b"cropped", &key_of(&c.file, b"file")?, recipe.as_bytes()])
        }
        ImageSource::Altered(a) => {
            let recipe = format!("{:?}|{}|{}", a.spec.method, a.spec.lambda_milli, a.spec.draw);
            cache::key(&[b"altered", &key_of(&a.base, b"file")?, &key_of(&a.other, b"file")?, recipe.as_bytes()])
        }
    })
}

/// Image sources by index: a suite's distinct sources (spilled, each made as it is asked
/// for) or a list in memory (a retrieval gallery's).
pub(crate) trait SourceList: Sync {
    fn len(&self) -> usize;
    fn source(&self, i: usize) -> ImageSource;
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
pub(crate) fn image_keys(images: &(impl SourceList + ?Sized), memo: &cache::FileKeys) -> Result<SpillVec<cache::Key>> {
    let mut keys = SpillVec::with_capacity(images.len());
    for start in (0..images.len()).step_by(1 << 14) {
        let chunk = start..(start + (1 << 14)).min(images.len());
        let chunk_keys: Vec<cache::Key> =
            chunk.into_par_iter().map(|i| image_key(&images.source(i), memo)).collect::<Result<_>>()?;
        keys.extend_from_slice(&chunk_keys);
    }
    Ok(keys)
}

/// The cache keys of `texts`, made as they are asked for.
pub(crate) fn text_keys<'a>(texts: &'a [&'a str]) -> Keys<'a> {
    Keys::OfTexts(texts)
}

/// The cache keys of one kind of input, by index. Image keys are held (each took reading its
/// file); a text's key is made again whenever it is asked for: hashing a caption is cheaper
/// than holding 32 bytes for each of millions of them.
pub(crate) enum Keys<'a> {
    Held(SpillVec<cache::Key>),
    OfTexts(&'a [&'a str]),
}

impl Keys<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Keys::Held(keys) => keys.len(),
            Keys::OfTexts(texts) => texts.len(),
        }
    }

    /// The key of input `i`.
    pub(crate) fn get(&self, i: usize) -> cache::Key {
        // Passes over every key read spilled values: counted, so that they are trimmed.
        match self {
            Keys::Held(keys) => {
                touched(size_of::<cache::Key>());
                keys[i]
            }
            Keys::OfTexts(texts) => {
                touched(size_of::<&str>() + texts[i].len());
                cache::key(&[b"text", texts[i].as_bytes()])
            }
        }
    }

    /// The keys of the inputs `wanted` marks (every input's without it), in order.
    pub(crate) fn wanted<'s>(&'s self, wanted: Option<&'s [bool]>) -> impl Iterator<Item = cache::Key> + 's {
        (0..self.len()).filter(move |&i| wanted.is_none_or(|w| w[i])).map(move |i| self.get(i))
    }
}

impl From<SpillVec<cache::Key>> for Keys<'_> {
    fn from(keys: SpillVec<cache::Key>) -> Self {
        Keys::Held(keys)
    }
}

impl From<Vec<cache::Key>> for Keys<'_> {
    fn from(keys: Vec<cache::Key>) -> Self {
        Keys::Held(keys.into())
    }
}

pub(crate) fn to_flat(embeddings: &Tensor, what: &str) -> Result<(Vec<f32>, usize)> {
    let read = || -> candle_core::Result<(Vec<f32>, usize)> {
        let (_, width) = embeddings.dims2()?;
        Ok((embeddings.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?, width))
    };
    read().map_err(|e| Error::caused_by(ErrorKind::Compute, format!("read {what} embeddings: {e}"), e))
}

/// Cached rows whose length differs from most cached rows' (an entry that passed its check
/// but cannot belong to this model, e.g. written by hand) become misses, encoded again.
/// `lengths` holds each row's length, `None` for a miss.
pub(crate) fn drop_odd_sized(lengths: &mut [Option<usize>], what: &str) {
    let mut counts: HashMap<usize, usize> = HashMap::new();
    for &len in lengths.iter().inspect(|_| touched(size_of::<Option<usize>>())).flatten() {
        *counts.entry(len).or_default() += 1;
    }
    // The most common length (the larger on a tie, so the choice does not depend on order).
    let Some(usual) = counts.iter().max_by_key(|&(&len, &n)| (n, len)).map(|(&len, _)| len) else { return };
    let mut dropped = 0;
    for len in lengths.iter_mut() {
        touched(size_of::<Option<usize>>());
        if len.is_some_and(|len| len != usual) {
            *len = None;
            dropped += 1;
        }
    }
    if dropped > 0 {
        eprintln!("warning: {dropped} cached {what} embedding(s) had the wrong size; they are encoded again");
    }
}

/// How many inputs a cache-aware encode took from the cache and how many it encoded.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tally {
    cached: usize,
    encoded: usize,
    batches: usize,
}

/// What one kind of input (images or texts) takes from the cache and what it encodes.
///
/// Rows the cache holds (of the usual size, see [`drop_odd_sized`]) are read when asked for;
/// the rest are encoded in batches of the missing indices, in index order. With `wanted` (a
/// shard's inputs), only those rows are needed, and each is encoded inside its whole *global*
/// batch (inputs `b·batch .. (b+1)·batch` of `keys`), the batch an unsharded cold run encodes
/// it in: encoder outputs depend in their last bits on a batch's composition, and this keeps
/// a shard's embeddings bit-identical to the unsharded run's.
pub(crate) struct EmbeddingPlan<'a> {
    what: &'static str,
    keys: &'a Keys<'a>,
    /// Where each row comes from.
    sources: SpillVec<RowSource>,
    /// The rows to encode, batch after batch, and where each batch starts (then the end).
    batch_rows: SpillVec<usize>,
    batch_starts: SpillVec<usize>,
    /// The cache's row size, when it holds any of these rows.
    cached_dim: Option<usize>,
}

/// Where one row of an [`EmbeddingPlan`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowSource {
    /// Not needed (a shard's input of another shard).
    Unwanted,
    Cache,
    /// Encoded in this batch of the plan.
    Batch(u32),
}

impl<'a> EmbeddingPlan<'a> {
    pub(crate) fn new(
        keys: &'a Keys<'a>,
        wanted: Option<&[bool]>,
        batch: usize,
        cache: &EmbeddingCache,
        what: &'static str,
    ) -> Self {
        let is_wanted = |i: usize| wanted.is_none_or(|w| w[i]);
        let n = keys.len();
        let mut lengths: SpillVec<Option<usize>> =
            (0..n).map(|i| if is_wanted(i) { cache.dim(&keys.get(i)) } else { None }).collect();
        drop_odd_sized(&mut lengths, what);
        // The first cached row's width (found within the first few rows, as a rule).
        let cached_dim = lengths.iter().inspect(|_| touched(size_of::<Option<usize>>())).flatten().next().copied();
        let mut sources: SpillVec<RowSource> = (0..n)
            .map(|i| match (is_wanted(i), lengths[i]) {
                (false, _) => RowSource::Unwanted,
                (true, Some(_)) => RowSource::Cache,
                (true, None) => RowSource::Batch(u32::MAX),
            })
            .collect();
        drop(lengths);
        let (mut batch_rows, mut batch_starts) = (SpillVec::new(), SpillVec::from_elem(0, 1));
        let missing = |i: usize| {
            touched(size_of::<RowSource>());
            matches!(sources[i], RowSource::Batch(_))
        };
        match wanted {
            None => {
                batch_rows.extend((0..n).filter(|&i| missing(i)));
                batch_starts.extend((1..=batch_rows.len().div_ceil(batch)).map(|b| (b * batch).min(batch_rows.len())));
            }
            // A shard encodes each global batch that holds a row it misses, whole.
            Some(_) => {
                for start in (0..n).step_by(batch.max(1)) {
                    let global = start..(start + batch).min(n);
                    if global.clone().any(missing) {
                        batch_rows.extend(global);
                        batch_starts.push(batch_rows.len());
                    }
                }
            }
        }
        for b in 0..batch_starts.len() - 1 {
            for &i in &batch_rows[batch_starts[b]..batch_starts[b + 1]] {
                touched(size_of::<usize>() + size_of::<RowSource>());
                if let RowSource::Batch(of) = &mut sources[i] {
                    *of = b as u32;
                }
            }
        }
        Self { what, keys, sources, batch_rows, batch_starts, cached_dim }
    }

    /// Every batch's rows, in order (for tests).
    #[cfg(test)]
    fn batches(&self) -> Vec<Vec<usize>> {
        (0..self.batch_count()).map(|b| self.batch(b).to_vec()).collect()
    }

    /// The rows of the plan's first batch (a full batch, unless the plan has only one).
    fn batch_len(&self) -> usize {
        if self.batch_count() == 0 {
            return 1;
        }
        self.batch(0).len()
    }

    /// How many batches the plan encodes.
    fn batch_count(&self) -> usize {
        self.batch_starts.len() - 1
    }

    /// The rows of batch `b`.
    fn batch(&self, b: usize) -> &[usize] {
        &self.batch_rows[self.batch_starts[b]..self.batch_starts[b + 1]]
    }

    /// How many rows the plan reads from the cache.
    fn cached_rows(&self) -> usize {
        self.sources.iter().inspect(|_| touched(size_of::<RowSource>())).filter(|&&s| s == RowSource::Cache).count()
    }
}

/// A plan's rows, made available as they are asked for, in (roughly) index order: a cached
/// row is read from the cache, a missing one is encoded with its whole batch, each batch
/// cached as soon as it is done (a killed run loses at most the batch in flight). The caller
/// [`EmbeddingStream::release`]s a row once no later item needs it, so only the rows between
/// the items being scored are held, not the suite's (2,000,000 captions of a 512-wide model
/// are 4 GB).
///
/// Batches are prepared (images decoded and preprocessed, on the rayon pool) ahead, on a
/// helper thread, while the current batch is encoded: decoding fills the gaps the encoder
/// leaves instead of adding to its time, and work-stealing keeps both from starving. How
/// far ahead follows the cores, not the batches ([`batches_ahead`]).
pub(crate) struct EmbeddingStream<'s, P> {
    plan: &'s EmbeddingPlan<'s>,
    prepared: std::sync::mpsc::Receiver<Result<P>>,
    prepare: &'s (dyn Fn(&[usize]) -> Result<P> + Sync),
    encode: &'s mut dyn FnMut(P) -> Result<Tensor>,
    next_batch: usize,
    rows: HeldRows,
    dim: Option<usize>,
    tally: Tally,
    /// Time spent reading and encoding rows.
    pub(crate) seconds: f64,
    bar: ProgressBar,
}

/// How many batches are prepared ahead of the encoder, and together: enough for two images
/// per core (at least one batch), so every core has an image to decode while the encoder
/// runs, and none waits at a batch's end. The queue then holds at most `2 × ahead` prepared
/// batches (those waiting and those being prepared): with 16 cores and batches of 8 at 224 px,
/// 8 batches of 8 × 588 KiB, 38 MiB.
pub(crate) fn batches_ahead(cores: usize, batch: usize) -> usize {
    (2 * cores).div_ceil(batch.max(1)).max(1)
}

/// Runs `body` with a stream of `plan`'s rows; the stream's tally and time come back with
/// its result.
pub(crate) fn with_stream<P: Send, R>(
    plan: &EmbeddingPlan<'_>,
    bars: &indicatif::MultiProgress,
    prepare: impl Fn(&[usize]) -> Result<P> + Sync,
    mut encode: impl FnMut(P) -> Result<Tensor>,
    body: impl FnOnce(&mut EmbeddingStream<'_, P>) -> Result<R>,
) -> Result<(R, Tally, f64)> {
    let what = plan.what;
    std::thread::scope(|scope| {
        let ahead = batches_ahead(rayon::current_num_threads(), plan.batch_len());
        let (sender, prepared) = std::sync::mpsc::sync_channel::<Result<P>>(ahead);
        let prepare = &prepare;
        scope.spawn(move || {
            let batches: Vec<usize> = (0..plan.batch_count()).collect();
            // `ahead` batches prepared together, so no core idles at a batch's last image.
            for group in batches.chunks(ahead) {
                let done: Vec<Result<P>> = group.par_iter().map(|&b| prepare(plan.batch(b))).collect();
                for batch in done {
                    // A closed channel means the encoder stopped (an error, or done): stop preparing.
                    if sender.send(batch).is_err() {
                        return;
                    }
                }
            }
        });
        let bar = bars.add(progress(plan.batch_rows.len(), &format!("encoding {what}s")));
        let mut stream = EmbeddingStream {
            plan,
            prepared,
            prepare,
            encode: &mut encode,
            next_batch: 0,
            rows: HeldRows::new(plan.keys.len()),
            dim: plan.cached_dim,
            tally: Tally { cached: plan.cached_rows(), ..Tally::default() },
            seconds: 0.0,
            bar,
        };
        let result = body(&mut stream)?;
        stream.bar.finish_and_clear();
        Ok((result, stream.tally, stream.seconds))
    })
}

impl<P> EmbeddingStream<'_, P> {
    /// Makes row `i` available to [`EmbeddingStream::row`].
    pub(crate) fn ensure(&mut self, i: usize, cache: &mut EmbeddingCache) -> Result<()> {
        if self.rows.contains(i) {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let fetched = self.fetch(i, cache);
        self.seconds += started.elapsed().as_secs_f64();
        fetched
    }

    fn fetch(&mut self, i: usize, cache: &mut EmbeddingCache) -> Result<()> {
        let what = self.plan.what;
        match self.plan.sources[i] {
            RowSource::Cache => match cache.get(&self.plan.keys.get(i)) {
                Some(row) => self.keep(i, &row),
                // Planned as cached, it no longer reads back (its segment changed during the
                // run): encoded alone, it costs a batch, not the run.
                None => {
                    let prepared = (self.prepare)(&[i])?;
                    let (values, _) = to_flat(&(self.encode)(prepared)?, what)?;
                    cache.append(&[(self.plan.keys.get(i), &values)])?;
                    self.tally.cached -= 1;
                    self.tally.encoded += 1;
                    self.tally.batches += 1;
                    self.keep(i, &values)
                }
            },
            RowSource::Batch(batch) => {
                while self.next_batch <= batch as usize && self.next_batch < self.plan.batch_count() {
                    self.encode_next(cache)?;
                }
                if self.rows.contains(i) {
                    return Ok(());
                }
                Err(Error::new(
                    ErrorKind::Compute,
                    format!("gather {what} embeddings: a row was neither cached nor encoded"),
                ))
            }
            RowSource::Unwanted => Err(Error::new(
                ErrorKind::Compute,
                format!("gather {what} embeddings: row {i} is neither cached nor planned"),
            )),
        }
    }

    /// Holds row `i`, checking its width against the rows before it.
    fn keep(&mut self, i: usize, row: &[f32]) -> Result<()> {
        match self.dim {
            Some(dim) if dim != row.len() => {
                return Err(Error::new(
                    ErrorKind::Compute,
                    format!(
                        "gather {} embeddings: the model gave {} values per input, the cache {dim}",
                        self.plan.what,
                        row.len()
                    ),
                ))
            }
            _ => self.dim = Some(row.len()),
        }
        self.rows.insert(i, row);
        Ok(())
    }

    fn encode_next(&mut self, cache: &mut EmbeddingCache) -> Result<()> {
        let what = self.plan.what;
        let b = self.next_batch;
        let chunk = self.plan.batch(b);
        let prepared = self.prepared.recv().map_err(|_| {
            Error::new(ErrorKind::Compute, format!("prepare {what} batches: the helper thread stopped"))
        })??;
        let (values, width) = to_flat(&(self.encode)(prepared)?, what)?;
        let rows: Vec<(usize, &[f32])> = chunk.iter().copied().zip(values.chunks_exact(width.max(1))).collect();
        cache.append(&rows.iter().map(|&(i, row)| (self.plan.keys.get(i), row)).collect::<Vec<_>>())?;
        for (i, row) in rows {
            // A shard's global batch also holds rows it does not need.
            if self.plan.sources[i] == RowSource::Batch(b as u32) {
                self.keep(i, row)?;
            }
        }
        self.next_batch += 1;
        self.tally.encoded += chunk.len();
        self.tally.batches += 1;
        self.bar.inc(chunk.len() as u64);
        crate::fault::at("encode-batch", self.tally.batches - 1);
        Ok(())
    }

    /// Row `i`, made available by [`EmbeddingStream::ensure`].
    pub(crate) fn row(&self, i: usize) -> Result<&[f32]> {
        self.rows.get(i).ok_or_else(|| {
            Error::new(ErrorKind::Compute, format!("gather {} embeddings: row {i} was not fetched", self.plan.what))
        })
    }

    /// Forgets row `i` (no later item needs it).
    pub(crate) fn release(&mut self, i: usize) {
        self.rows.remove(i);
    }

    /// The embeddings' width (known once any row was fetched).
    pub(crate) fn dim(&self) -> usize {
        self.dim.unwrap_or(0)
    }

    /// Every row of the plan as one `n × dim` tensor (rows not wanted are zeros), for a
    /// retrieval gallery, which needs them all at once.
    fn table(&mut self, device: &Device, cache: &mut EmbeddingCache) -> Result<Tensor> {
        let n = self.plan.keys.len();
        let mut flat = Vec::new();
        for i in 0..n {
            if self.plan.sources[i] == RowSource::Unwanted {
                continue;
            }
            self.ensure(i, cache)?;
            if flat.is_empty() {
                flat = vec![0f32; n * self.dim()];
            }
            let dim = self.dim();
            flat[i * dim..(i + 1) * dim].copy_from_slice(self.row(i)?);
            self.release(i);
        }
        Tensor::from_vec(flat, (n, self.dim()), device)
            .map_err(|e| Error::caused_by(ErrorKind::Compute, format!("gather {} embeddings: {e}", self.plan.what), e))
    }
}

/// The rows a stream holds, each in a slot of a block of spilled rows, a released slot reused
/// by the next row: the rows of inputs that items far apart share are bounded like the rest
/// of the per-item state, not a vector each. Blocks are made whole and never grow (a growing
/// array would copy itself and briefly hold twice the rows).
struct HeldRows {
    /// Each input's slot plus one; 0 while its row is not held.
    slot_of: SpillVec<u32>,
    /// The slots' values, [`HeldRows::BLOCK`] slots of `width` values per block.
    blocks: Vec<SpillVec<f32>>,
    /// How many slots the blocks have handed out.
    slots: u32,
    /// Every row's width (the stream checks each against the first).
    width: usize,
    /// Slots released and not yet reused.
    free: SpillVec<u32>,
}

impl HeldRows {
    /// Slots per block: 2 MiB of 512-wide rows.
    const BLOCK: usize = 1024;

    /// Room to hold the rows of `inputs` inputs.
    fn new(inputs: usize) -> Self {
        Self { slot_of: SpillVec::from_elem(0, inputs), blocks: Vec::new(), slots: 0, width: 0, free: SpillVec::new() }
    }

    fn contains(&self, i: usize) -> bool {
        self.slot_of[i] != 0
    }

    /// Holds `row` as input `i`'s.
    fn insert(&mut self, i: usize, row: &[f32]) {
        touched(std::mem::size_of_val(row));
        if self.slots == 0 {
            self.width = row.len();
        }
        let slot = match (self.slot_of[i].checked_sub(1), self.free.last().copied()) {
            (Some(held), _) => held,
            (None, Some(free)) => {
                self.free.truncate(self.free.len() - 1);
                free
            }
            (None, None) => {
                if (self.slots as usize).is_multiple_of(Self::BLOCK) {
                    self.blocks.push(SpillVec::with_capacity(Self::BLOCK * self.width));
                }
                // Within the block's capacity: the block is not moved, only its used pages touched.
                let block = self.blocks.len() - 1;
                self.blocks[block].resize((self.slots as usize % Self::BLOCK + 1) * self.width, 0.0);
                self.slots += 1;
                self.slots - 1
            }
        };
        self.slot_mut(slot).copy_from_slice(row);
        self.slot_of[i] = slot + 1;
    }

    /// Slot `slot`'s block and the range of its values there.
    fn place(&self, slot: u32) -> (usize, std::ops::Range<usize>) {
        let at = slot as usize % Self::BLOCK * self.width;
        (slot as usize / Self::BLOCK, at..at + self.width)
    }

    fn slot_mut(&mut self, slot: u32) -> &mut [f32] {
        let (block, values) = self.place(slot);
        &mut self.blocks[block][values]
    }

    fn get(&self, i: usize) -> Option<&[f32]> {
        let (block, values) = self.place(self.slot_of[i].checked_sub(1)?);
        touched(self.width * size_of::<f32>());
        self.blocks.get(block)?.get(values)
    }

    fn remove(&mut self, i: usize) {
        if let Some(slot) = self.slot_of[i].checked_sub(1) {
            self.free.push(slot);
            self.slot_of[i] = 0;
        }
    }
}

/// One decoded image through the model's preprocessing ([`Preprocessor::apply_pil`]).
pub(crate) fn preprocess(prep: &Preprocessor, image: &benchctl_suites::PilImage) -> Vec<f32> {
    let mut out = vec![0.0; prep.len()];
    prep.apply_pil(image, &mut out);
    out
}

/// Decoded and preprocessed `images` as one `(n, 3, size, size)` batch on `device`
/// (decoding on all cores).
pub(crate) fn load_pixels(
    prep: &Preprocessor,
    images: &[impl std::borrow::Borrow<ImageSource> + Sync],
    device: &Device,
) -> Result<Tensor> {
    let pixels: Vec<Vec<f32>> = images
        .par_iter()
        .map(|s| {
            let s: &ImageSource = s.borrow();
            let img = s.load_pil().map_err(Error::from)?;
            let (w, h) = img.dimensions();
            prep.check_input(w as usize, h as usize)
                .map_err(|e| Error::new(ErrorKind::Data, format!("preprocess image {}: {e}", s.display_name())))?;
            Ok(preprocess(prep, &img))
        })
        .collect::<Result<_>>()?;
    Tensor::from_vec(pixels.concat(), (images.len(), 3, prep.size, prep.size), &Device::Cpu)
        .and_then(|t| t.to_device(device))
        .map_err(|e| Error::caused_by(ErrorKind::Compute, format!("stack an image batch: {e}"), e))
}

/// Every (image, text) pair a fusion model must score for a suite, each once, and where
/// each item's K×L pairs are (spilled with the suite: a million items have millions of pairs).
pub(crate) struct PairTable {
    /// Unique pairs as (unique image index, unique text index).
    pub pairs: SpillVec<(usize, usize)>,
    /// Every item's pairs, row-major over K×L, one item after another, as indices into `pairs`.
    item_pairs: SpillVec<usize>,
}

impl PairTable {
    pub(crate) fn of_items(inputs: &ItemInputs) -> Self {
        let mut index = benchctl_scoring::spill::Index::default();
        let mut pairs: SpillVec<(usize, usize)> = SpillVec::new();
        let mut item_pairs = SpillVec::new();
        for n in 0..inputs.suite.items.len() {
            touched(benchctl_scoring::spill::ITEM_BYTES);
            let (images, texts) = (inputs.images_of(n), inputs.texts_of(n));
            for &image in images {
                for &text in texts {
                    let known = &pairs;
                    let at = index.find_or_add(&(image, text), pairs.len(), |at| known[at] == (image, text));
                    item_pairs.push(at.map_or_else(
                        || {
                            pairs.push((image, text));
                            pairs.len() - 1
                        },
                        |at| at as usize,
                    ));
                }
            }
        }
        Self { pairs, item_pairs }
    }

    /// Each pair's cache key, from its image's and text's.
    pub(crate) fn keys(&self, image_keys: &Keys, text_keys: &Keys) -> SpillVec<cache::Key> {
        self.pairs.iter().map(|&(i, t)| cache::key(&[b"pair", &image_keys.get(i), &text_keys.get(t)])).collect()
    }

    pub(crate) fn score_tensor(
        &self,
        suite: &Suite,
        values: &[f32],
        kind: benchctl_scoring::ScoreKind,
    ) -> Result<ScoreTensor> {
        let mut tensor = ScoreTensor::of_kind(kind);
        let mut start = 0;
        for item in &suite.items {
            let these = &self.item_pairs[start..start + item.image_count() * item.text_count()];
            start += these.len();
            let scores: Vec<f32> = these.iter().map(|&p| values[p]).collect();
            tensor
                .push(item.image_count(), item.text_count(), &scores)
                .map_err(|e| Error::caused_by(ErrorKind::Compute, format!("score item {}: {e}", item.id()), e))?;
        }
        Ok(tensor)
    }
}

/// The unique inputs a fusion model pairs, and each pair's cache key.
pub(crate) struct PairInputs<'a> {
    pub images: &'a dyn SourceList,
    pub texts: &'a [&'a str],
    pub pair_keys: &'a Keys<'a>,
}

/// A fusion model's score of every pair, through the cache (one value per pair, keyed by
/// both inputs' keys). Missing pairs are scored grouped by image: `batch` images are
/// encoded at a time, once each, and all their missing pairs scored in batches of `batch`.
pub(crate) fn score_pairs_through_cache(
    model: Option<&dyn FusionEncoder>,
    table: &PairTable,
    inputs: &PairInputs,
    batch: usize,
    counts: &mut Counts,
    cache: &mut EmbeddingCache,
) -> Result<SpillVec<f32>> {
    let PairInputs { images, texts, pair_keys } = *inputs;
    let mut values: SpillVec<Option<f32>> =
        (0..pair_keys.len()).map(|p| cache.get(&pair_keys.get(p)).and_then(|v| v.first().copied())).collect();
    // The missing pairs grouped by image (sorted by it, in bounded memory), images in order.
    let mut todo: SpillVec<(usize, usize)> =
        table.pairs.iter().enumerate().filter(|&(p, _)| values[p].is_none()).map(|(p, &(i, _))| (i, p)).collect();
    benchctl_scoring::spill::sort_by_key(&mut todo, |&(i, _)| i);
    counts.pairs_cached += values.len() - todo.len();
    let todo_images: SpillVec<usize> =
        todo.iter().enumerate().filter(|&(at, &(i, _))| at == 0 || todo[at - 1].0 != i).map(|(_, &(i, _))| i).collect();
    let bar = progress(todo.len(), "scoring pairs");
    let compute = |what: &str, e: candle_core::Error| Error::new(ErrorKind::Compute, format!("{what}: {e}"));
    let mut next_todo = 0;
    for image_chunk in todo_images.chunks(batch.max(1)) {
        let model = model.ok_or_else(|| {
            Error::new(ErrorKind::Compute, "score a pair missing from the cache: the model was not loaded")
        })?;
        let sources: Vec<ImageSource> = image_chunk.iter().map(|&i| images.source(i)).collect();
        let states = model.encode_images(&load_pixels(model.preprocessor(), &sources, model.device())?)?;
        counts.images_encoded += image_chunk.len();
        counts.image_batches += 1;
        // This chunk's images' missing pairs, as (row of the chunk, pair): the next run of `todo`.
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        for (row, &i) in image_chunk.iter().enumerate() {
            while next_todo < todo.len() && todo[next_todo].0 == i {
                pairs.push((row, todo[next_todo].1));
                next_todo += 1;
            }
        }
        for chunk in pairs.chunks(batch.max(1)) {
            let rows: Vec<u32> = chunk.iter().map(|&(row, _)| row as u32).collect();
            let rows = Tensor::from_vec(rows, chunk.len(), model.device()).map_err(|e| compute("index pairs", e))?;
            let pair_states = states.index_select(&rows, 0).map_err(|e| compute("gather image states", e))?;
            let pair_texts: Vec<&str> = chunk.iter().map(|&(_, p)| texts[table.pairs[p].1]).collect();
            let scores = model
                .score_pairs(&pair_states, &pair_texts)?
                .to_dtype(DType::F32)
                .and_then(|s| s.to_vec1::<f32>())
                .map_err(|e| compute("read pair scores", e))?;
            let entries: Vec<(cache::Key, &[f32])> =
                chunk.iter().zip(&scores).map(|(&(_, p), v)| (pair_keys.get(p), std::slice::from_ref(v))).collect();
            cache.append(&entries)?;
            for (&(_, p), v) in chunk.iter().zip(scores) {
                values[p] = Some(v);
            }
            counts.pairs_scored += chunk.len();
            bar.inc(chunk.len() as u64);
        }
    }
    bar.finish_and_clear();
    values
        .iter()
        .map(|v| v.ok_or_else(|| Error::new(ErrorKind::Compute, "score pairs: a pair was neither cached nor scored")))
        .collect()
}

/// What encodes the inputs the cache lacks: the dual encoder, or none when the run found
/// every input in the cache and did not load the weights.
#[derive(Clone, Copy)]
pub(crate) struct Encoder<'a> {
    pub model: Option<&'a dyn DualEncoder>,
    /// Where the embeddings go.
    pub device: &'a Device,
}

impl<'a> Encoder<'a> {
    pub(crate) fn model(&self) -> Result<&'a dyn DualEncoder> {
        self.model.ok_or_else(Self::not_loaded)
    }

    pub(crate) fn not_loaded() -> Error {
        Error::new(ErrorKind::Compute, "encode an input missing from the cache: the model was not loaded")
    }
}

/// Decoding and preprocessing a batch of `images` (on all cores).
pub(crate) fn prepare_images<'a>(
    encoder: Encoder<'a>,
    images: &'a (impl SourceList + ?Sized),
) -> impl Fn(&[usize]) -> Result<Tensor> + Sync + 'a {
    let (prep, device) = (encoder.model.map(|m| m.preprocessor().clone()), encoder.device);
    move |chunk: &[usize]| {
        let prep = prep.as_ref().ok_or_else(Encoder::not_loaded)?;
        let sources: Vec<ImageSource> = chunk.iter().map(|&i| images.source(i)).collect();
        load_pixels(prep, &sources, device)
    }
}

/// The image tower on a prepared batch.
pub(crate) fn encode_pixels(encoder: Encoder<'_>) -> impl FnMut(Tensor) -> Result<Tensor> + '_ {
    move |pixels: Tensor| Ok(encoder.model()?.encode_images(&pixels)?)
}

/// A batch of `texts`.
pub(crate) fn prepare_texts<'a>(texts: &'a [&'a str]) -> impl Fn(&[usize]) -> Result<Vec<&'a str>> + Sync + 'a {
    move |chunk: &[usize]| Ok(chunk.iter().map(|&i| texts[i]).collect::<Vec<&str>>())
}

/// The text tower on a batch.
pub(crate) fn encode_captions<'a>(encoder: Encoder<'a>) -> impl FnMut(Vec<&str>) -> Result<Tensor> + 'a {
    move |refs: Vec<&str>| Ok(encoder.model()?.encode_texts(&refs)?)
}

impl Counts {
    pub(crate) fn add_images(&mut self, tally: Tally) {
        self.images_cached += tally.cached;
        self.images_encoded += tally.encoded;
        self.image_batches += tally.batches;
    }

    pub(crate) fn add_texts(&mut self, tally: Tally) {
        self.texts_cached += tally.cached;
        self.texts_encoded += tally.encoded;
        self.text_batches += tally.batches;
    }
}

/// L2-normalised embeddings of `images` (with their cache `keys`), in order, through the
/// cache, as one table (a retrieval gallery's).
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_images(
    encoder: Encoder,
    images: &(impl SourceList + ?Sized),
    keys: &Keys,
    wanted: Option<&[bool]>,
    batch: usize,
    counts: &mut Counts,
    cache: &mut EmbeddingCache,
) -> Result<Tensor> {
    let plan = EmbeddingPlan::new(keys, wanted, batch, cache, "image");
    let bars = indicatif::MultiProgress::new();
    let (prepare, encode) = (prepare_images(encoder, images), encode_pixels(encoder));
    let (table, tally, _) = with_stream(&plan, &bars, prepare, encode, |s| s.table(encoder.device, cache))?;
    counts.add_images(tally);
    Ok(table)
}

/// L2-normalised embeddings of `texts` (with their cache `keys`), in order, through the
/// cache, as one table (a retrieval gallery's).
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_texts(
    encoder: Encoder,
    texts: &[&str],
    keys: &Keys,
    wanted: Option<&[bool]>,
    batch: usize,
    counts: &mut Counts,
    cache: &mut EmbeddingCache,
) -> Result<Tensor> {
    let plan = EmbeddingPlan::new(keys, wanted, batch, cache, "text");
    let bars = indicatif::MultiProgress::new();
    let (prepare, encode) = (prepare_texts(texts), encode_captions(encoder));
    let (table, tally, _) = with_stream(&plan, &bars, prepare, encode, |s| s.table(encoder.device, cache))?;
    counts.add_texts(tally);
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decode_queue_follows_the_cores() {
        // Two images per core ahead, at least one batch.
        assert_eq!(batches_ahead(16, 8), 4);
        assert_eq!(batches_ahead(16, 32), 1);
        assert_eq!(batches_ahead(2, 1), 4);
        assert_eq!(batches_ahead(2, 3), 2);
        assert_eq!(batches_ahead(1, 0), 2);
    }

    /// A stand-in encoder: input `i`'s embedding is `[i, i + 0.5, -i]`; it counts its calls.
    fn fake_rows(chunk: &[usize]) -> Result<Tensor> {
        let values: Vec<f32> = chunk.iter().flat_map(|&i| [i as f32, i as f32 + 0.5, -(i as f32)]).collect();
        Tensor::from_vec(values, (chunk.len(), 3), &Device::Cpu)
            .map_err(|e| Error::new(ErrorKind::Compute, e.to_string()))
    }

    fn expected(i: usize) -> Vec<f32> {
        vec![i as f32, i as f32 + 0.5, -(i as f32)]
    }

    /// Rows come from the cache or from their planned batch, in any order asked; a released
    /// row is gone; a cached row that no longer reads back (its segment changed after the plan
    /// was made) is encoded alone; a shard's global batch keeps only the rows it wants.
    #[test]
    fn streams_serve_cached_and_encoded_rows_and_recover_a_changed_cache_entry() -> Result<()> {
        let root = tempfile::tempdir().map_err(|e| Error::new(ErrorKind::Results, e.to_string()))?;
        let keys: Vec<cache::Key> = (0..10u8).map(|i| cache::key(&[&[i]])).collect();
        let keys = Keys::from(keys);
        // Rows 2 and 7 are cached by an earlier run.
        let mut cache = EmbeddingCache::open(root.path(), "ns")?;
        cache.append(&[(keys.get(2), &expected(2)[..]), (keys.get(7), &expected(7)[..])])?;
        let mut cache = EmbeddingCache::open(root.path(), "ns")?;
        let bars = indicatif::MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::hidden());
        let plan = EmbeddingPlan::new(&keys, None, 4, &cache, "text");
        assert_eq!(plan.batches(), vec![vec![0, 1, 3, 4], vec![5, 6, 8, 9]]);
        // Row 7's cached value changes on disk after the plan: a flipped bit in its values.
        let segment = std::fs::read_dir(root.path())
            .and_then(|mut dirs| dirs.next().transpose())
            .and_then(|dir| std::fs::read_dir(dir.map(|d| d.path()).unwrap_or_default()))
            .and_then(|mut files| files.next().transpose())
            .map_err(|e| Error::new(ErrorKind::Results, e.to_string()))?
            .map(|f| f.path())
            .ok_or_else(|| Error::new(ErrorKind::Results, "no segment".to_string()))?;
        let mut bytes = std::fs::read(&segment).map_err(|e| Error::new(ErrorKind::Results, e.to_string()))?;
        let row_7 = bytes.len() - 8 - 12;
        bytes[row_7 + 1] ^= 1;
        std::fs::write(&segment, &bytes).map_err(|e| Error::new(ErrorKind::Results, e.to_string()))?;
        let encoded_alone = std::sync::atomic::AtomicUsize::new(0);
        let prepare = |chunk: &[usize]| {
            if chunk.len() == 1 {
                encoded_alone.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(chunk.to_vec())
        };
        let encode = |chunk: Vec<usize>| fake_rows(&chunk);
        let ((), tally, _) = with_stream(&plan, &bars, prepare, encode, |stream| {
            for i in [6, 2, 0, 7, 9] {
                stream.ensure(i, &mut cache)?;
                assert_eq!(stream.row(i)?, &expected(i)[..], "row {i}");
            }
            stream.release(6);
            assert!(stream.row(6).is_err(), "a released row is gone");
            Ok(())
        })?;
        assert_eq!(encoded_alone.load(std::sync::atomic::Ordering::Relaxed), 1, "row 7, alone");
        assert_eq!((tally.cached, tally.encoded, tally.batches), (1, 9, 3));

        // A shard that wants rows 1 and 5 (rows 2 and 7 are not its): the global batches that
        // hold them, and only its rows kept.
        let wanted: Vec<bool> = (0..10).map(|i| i == 1 || i == 5).collect();
        let plan = EmbeddingPlan::new(&keys, Some(&wanted), 4, &cache, "text");
        assert_eq!(plan.batches(), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        let ((), tally, _) = with_stream(
            &plan,
            &bars,
            |c: &[usize]| Ok(c.to_vec()),
            |c: Vec<usize>| fake_rows(&c),
            |stream| {
                stream.ensure(5, &mut cache)?;
                stream.ensure(1, &mut cache)?;
                assert_eq!(stream.row(1)?, &expected(1)[..]);
                assert!(stream.row(4).is_err(), "a row the shard does not want is not kept");
                assert!(stream.ensure(4, &mut cache).is_err(), "nor planned");
                Ok(())
            },
        )?;
        assert_eq!((tally.cached, tally.encoded, tally.batches), (0, 8, 2));
        Ok(())
    }

    /// Distinct values in first-seen order, every occurrence's slot pointing at its value,
    /// through the table's growth (thousands of values, most repeated).
    /// Held rows come back as inserted, a released slot is reused before the array grows, and
    /// a row inserted again replaces its values in place.
    #[test]
    fn held_rows_reuse_released_slots() {
        let mut held = HeldRows::new(10);
        for i in [3, 1, 7] {
            held.insert(i, &expected(i));
        }
        held.remove(1);
        assert!(!held.contains(1) && held.get(1).is_none());
        held.insert(9, &expected(9));
        assert_eq!(held.slots, 3, "the released slot was reused");
        held.insert(3, &expected(5));
        assert_eq!(held.slots, 3);
        // Rows past the first block go to a second.
        let mut many = HeldRows::new(3 * HeldRows::BLOCK);
        (0..3 * HeldRows::BLOCK).for_each(|i| many.insert(i, &expected(i)));
        assert_eq!(many.blocks.len(), 3);
        assert!((0..3 * HeldRows::BLOCK).all(|i| many.get(i) == Some(&expected(i)[..])));
        assert_eq!(
            (held.get(3), held.get(7), held.get(9)),
            (Some(&expected(5)[..]), Some(&expected(7)[..]), Some(&expected(9)[..]))
        );
        // Zero-width rows are held too.
        let mut empty = HeldRows::new(2);
        empty.insert(1, &[]);
        assert!(empty.contains(1) && empty.get(1) == Some(&[][..]) && !empty.contains(0));
    }

    #[test]
    fn unique_values_keep_first_seen_order_and_every_slot() {
        let values: Vec<String> = (0..20_000u64).map(|i| format!("caption {}", (i * 7919) % 5_003)).collect();
        let (slots, unique) = unique_by(values.iter().map(String::as_str));
        assert_eq!(unique.len(), 5_003);
        assert_eq!(slots.len(), values.len());
        for (value, &slot) in values.iter().zip(&slots) {
            assert_eq!(unique[slot], value);
        }
        // First-seen order: each distinct value's first occurrence comes after the previous one's.
        let first: Vec<usize> =
            unique.iter().map(|u| values.iter().position(|v| v == u).unwrap_or(usize::MAX)).collect();
        assert!(first.windows(2).all(|w| w[0] < w[1]));
        let (_, none) = unique_by(std::iter::empty::<&str>());
        assert!(none.is_empty());
    }

    #[test]
    pub(crate) fn cached_rows_of_the_wrong_size_become_misses() {
        let mut rows = vec![Some(4), None, Some(3), Some(4), Some(0)];
        drop_odd_sized(&mut rows, "image");
        assert_eq!(rows, vec![Some(4), None, None, Some(4), None]);
        let mut none: Vec<Option<usize>> = vec![None, None];
        drop_odd_sized(&mut none, "text");
        assert_eq!(none, vec![None, None]);
    }
}
