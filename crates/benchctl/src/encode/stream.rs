//! The embedding stream: what one kind of input (images or texts) takes from the cache and
//! what it encodes, rows made available as items ask for them and released after the last,
//! with the next batches decoded ahead on all cores while the encoder runs.

use std::collections::HashMap;

use benchctl_base::spill::SpillVec;
use candle_core::{DType, Device, Tensor};
use indicatif::ProgressBar;
use rayon::prelude::*;

use super::progress;

use crate::cache::{EmbeddingCache, Keys};
use crate::results::Counts;
use crate::{Error, ErrorKind, Result};

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
    for &len in lengths.iter().flatten() {
        *counts.entry(len).or_default() += 1;
    }
    // The most common length (the larger on a tie, so the choice does not depend on order).
    let Some(usual) = counts.iter().max_by_key(|&(&len, &n)| (n, len)).map(|(&len, _)| len) else { return };
    let mut dropped = 0;
    for len in lengths.iter_mut() {
        if len.is_some_and(|len| len != usual) {
            *len = None;
            dropped += 1;
        }
    }
    if dropped > 0 {
        benchctl_base::stderr_line!(
            "warning: {dropped} cached {what} embedding(s) had the wrong size; they are encoded again"
        );
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
        let cached_dim = lengths.iter().flatten().next().copied();
        let mut sources: SpillVec<RowSource> = (0..n)
            .map(|i| match (is_wanted(i), lengths[i]) {
                (false, _) => RowSource::Unwanted,
                (true, Some(_)) => RowSource::Cache,
                (true, None) => RowSource::Batch(u32::MAX),
            })
            .collect();
        drop(lengths);
        let (mut batch_rows, mut batch_starts) = (SpillVec::new(), SpillVec::from_elem(0, 1));
        let missing = |i: usize| matches!(sources[i], RowSource::Batch(_));
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
        self.sources.iter().filter(|&&s| s == RowSource::Cache).count()
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
    pub(crate) fn table(&mut self, device: &Device, cache: &mut EmbeddingCache) -> Result<Tensor> {
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
        self.blocks.get(block)?.get(values)
    }

    fn remove(&mut self, i: usize) {
        if let Some(slot) = self.slot_of[i].checked_sub(1) {
            self.free.push(slot);
            self.slot_of[i] = 0;
        }
    }
}

impl Tally {
    /// Adds an image stream's tally to a run's counts.
    pub(crate) fn add_images_to(self, counts: &mut Counts) {
        counts.images_cached += self.cached;
        counts.images_encoded += self.encoded;
        counts.image_batches += self.batches;
    }

    /// Adds a text stream's tally to a run's counts.
    pub(crate) fn add_texts_to(self, counts: &mut Counts) {
        counts.texts_cached += self.cached;
        counts.texts_encoded += self.encoded;
        counts.text_batches += self.batches;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache;

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
    fn cached_rows_of_the_wrong_size_become_misses() {
        let mut rows = vec![Some(4), None, Some(3), Some(4), Some(0)];
        drop_odd_sized(&mut rows, "image");
        assert_eq!(rows, vec![Some(4), None, None, Some(4), None]);
        let mut none: Vec<Option<usize>> = vec![None, None];
        drop_odd_sized(&mut none, "text");
        assert_eq!(none, vec![None, None]);
    }
}
