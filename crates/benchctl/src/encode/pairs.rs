//! A fusion model's pair scores: every (image, text) pair of a suite once, through the
//! cache, images encoded once for all their missing pairs.

use benchctl_base::spill::SpillVec;
use benchctl_models::FusionEncoder;
use benchctl_scoring::ScoreTensor;
use benchctl_suites::{ImageSource, Suite};
use candle_core::{DType, Tensor};

use super::progress;
use crate::cache::{self, EmbeddingCache, Keys, SourceList};
use crate::encode::load_pixels;
use crate::inputs::ItemInputs;
use crate::replies::{ItemReplies, Replies};
use crate::results::Counts;
use crate::{Error, ErrorKind, Result};

/// Every (image, text) pair a fusion model scores for a suite, each once, and where each
/// item's K×L pairs are (spilled with the suite: a million items have millions of pairs).
/// The table is the whole suite's, whatever the run's shard, so that every run schedules the
/// same batches ([`score_pairs_through_cache`]); a shard's items ask only some of its pairs.
pub(crate) struct PairTable {
    /// Unique pairs as (unique image index, unique text index).
    pub pairs: SpillVec<(usize, usize)>,
    /// Every item's pairs, row-major over K×L, one item after another, as indices into `pairs`
    /// ([`UNASKED`] for a cell its truth does not ask).
    item_pairs: SpillVec<usize>,
    /// Where the scored items' cells start in `item_pairs`.
    first_cell: usize,
    /// The pairs the scored items ask (`None`: every pair, the whole suite is scored).
    wanted: Option<SpillVec<bool>>,
}

/// The pair index of a cell no model is asked ([`benchctl_scoring::Truth::is_asked`]).
const UNASKED: usize = usize::MAX;

impl PairTable {
    /// The pairs of `all` (the whole suite's items), of which items `scored` are scored.
    pub(crate) fn of_items(all: &ItemInputs, scored: std::ops::Range<usize>) -> Self {
        let mut index = benchctl_base::spill::Index::default();
        let mut pairs: SpillVec<(usize, usize)> = SpillVec::new();
        let mut item_pairs = SpillVec::new();
        // The scored items' cells, as found.
        let (mut first_cell, mut end_cell) = (None, None);
        for n in 0..all.suite.items.len() {
            if n == scored.start {
                first_cell = Some(item_pairs.len());
            }
            if n == scored.end {
                end_cell = Some(item_pairs.len());
            }
            let (images, texts) = (all.images_of(n), all.texts_of(n));
            let truth = all.suite.items.item(n).truth();
            for (k, &image) in images.iter().enumerate() {
                for (l, &text) in texts.iter().enumerate() {
                    if !truth.is_asked(k, l) {
                        item_pairs.push(UNASKED);
                        continue;
                    }
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
        let (first_cell, end_cell) = (first_cell.unwrap_or(item_pairs.len()), end_cell.unwrap_or(item_pairs.len()));
        let mut table = Self { pairs, item_pairs, first_cell, wanted: None };
        if scored != (0..all.suite.items.len()) {
            let mut wanted = SpillVec::from_elem(false, table.pairs.len());
            let these = &table.item_pairs[first_cell..end_cell];
            these.iter().filter(|&&p| p != UNASKED).for_each(|&p| wanted[p] = true);
            table.wanted = Some(wanted);
        }
        table
    }

    /// Every pair as `(unique image, pair)`, grouped by image in image order (sorted stably, in
    /// bounded memory).
    fn by_image(&self) -> SpillVec<(usize, usize)> {
        let mut order: SpillVec<(usize, usize)> = self.pairs.iter().enumerate().map(|(p, &(i, _))| (i, p)).collect();
        benchctl_base::spill::sort_by_key(&mut order, |&(i, _)| i);
        order
    }

    /// The values of the pairs the run asks (`missing`, an error, where one lacks its value);
    /// NaN for the others (a shard's neighbours' pairs, never read).
    pub(crate) fn asked_values(&self, values: &[Option<f32>], missing: &str) -> Result<SpillVec<f32>> {
        (values.iter().enumerate())
            .map(|(p, v)| match (v, self.is_wanted(p)) {
                (Some(v), _) => Ok(*v),
                (None, false) => Ok(f32::NAN),
                (None, true) => Err(Error::new(ErrorKind::Compute, missing.to_string())),
            })
            .collect()
    }

    /// Which pairs the scored items ask (`None`: all of them).
    pub(crate) fn wanted(&self) -> Option<&[bool]> {
        self.wanted.as_deref()
    }

    fn is_wanted(&self, pair: usize) -> bool {
        self.wanted.as_ref().is_none_or(|w| w[pair])
    }

    /// Each pair's cache key, from its image's and text's.
    pub(crate) fn keys(&self, image_keys: &Keys, text_keys: &Keys) -> SpillVec<cache::Key> {
        self.pairs.iter().map(|&(i, t)| cache::KeyTag::Pair.key(&[&image_keys.get(i), &text_keys.get(t)])).collect()
    }

    /// Each item's K×L cells' replies from the replies of its pairs.
    pub(crate) fn item_replies(&self, suite: &Suite, replies: &Replies) -> ItemReplies {
        let mut items = ItemReplies::new(suite.items.len());
        let mut start = self.first_cell;
        for (n, item) in suite.items.iter().enumerate() {
            let these = &self.item_pairs[start..start + item.image_count() * item.text_count()];
            start += these.len();
            items.set_cells(
                n,
                item.text_count(),
                these.iter().map(|&p| (p != UNASKED).then(|| replies.get(p)).flatten()),
            );
        }
        items
    }

    pub(crate) fn score_tensor(
        &self,
        suite: &Suite,
        values: &[f32],
        kind: benchctl_scoring::ScoreKind,
    ) -> Result<ScoreTensor> {
        let mut tensor = ScoreTensor::of_kind(kind);
        let mut start = self.first_cell;
        for item in &suite.items {
            let these = &self.item_pairs[start..start + item.image_count() * item.text_count()];
            start += these.len();
            let scores: Vec<f32> = these.iter().map(|&p| if p == UNASKED { f32::NAN } else { values[p] }).collect();
            tensor
                .push_asked(item.truth(), &scores)
                .map_err(|e| Error::caused_by(ErrorKind::Compute, format!("score item {}: {e}", item.id()), e))?;
        }
        Ok(tensor)
    }
}

/// The unique inputs a fusion model pairs, each pair's cache key, and whether its generated
/// replies are kept (`--answer-rule generate`).
pub(crate) struct PairInputs<'a> {
    pub images: &'a dyn SourceList,
    pub texts: &'a [&'a str],
    pub pair_keys: &'a Keys<'a>,
    pub keeps_replies: bool,
}

/// A pair's reply's cache key, from the pair's.
pub(crate) fn reply_key(pair_key: &cache::Key) -> cache::Key {
    cache::KeyTag::Reply.key(&[pair_key])
}

/// What the cache holds of a run's pairs, and what it lacks.
pub(crate) struct Cached {
    /// Every pair's score (`None` where the cache lacks it, or the run does not ask it).
    pub values: SpillVec<Option<f32>>,
    /// How many of the pairs the run asks the cache holds.
    pub cached: usize,
    /// Every pair's reply, where replies are kept.
    pub replies: Option<Replies>,
    /// The missing pairs the run asks, as `(unique image, pair)`, in pair order (a server's
    /// asks group them by image; a local model scores the whole table's schedule instead).
    pub todo: SpillVec<(usize, usize)>,
}

/// Every pair's cached score, and its reply where replies are kept. A score cached without its
/// reply (by a benchctl that did not keep replies) is served, never asked or generated again,
/// its reply left unknown (`null` in the dump) and counted in a warning.
pub(crate) fn missing_pairs(table: &PairTable, inputs: &PairInputs, cache: &EmbeddingCache) -> Cached {
    let pair_keys = inputs.pair_keys;
    let values: SpillVec<Option<f32>> = (0..pair_keys.len())
        .map(|p| table.is_wanted(p).then(|| cache.get(&pair_keys.get(p))?.first().copied()).flatten())
        .collect();
    let cached = values.iter().filter(|v| v.is_some()).count();
    let replies = inputs.keeps_replies.then(|| {
        let mut replies = Replies::new(pair_keys.len());
        let mut unknown = 0;
        for p in (0..pair_keys.len()).filter(|&p| values[p].is_some()) {
            match cache.get_text(&reply_key(&pair_keys.get(p))) {
                Some(reply) => replies.set(p, &reply),
                None => unknown += 1,
            }
        }
        if unknown > 0 {
            benchctl_base::stderr_line!(
                "warning: {unknown} cached answer(s) have no reply kept (cached before benchctl kept replies): they are scored as cached and their replies are null in the dump; --no-cache, or another BENCHCTL_CACHE, scores them again"
            );
        }
        replies
    });
    let lacking = |&(p, _): &(usize, &(usize, usize))| values[p].is_none() && table.is_wanted(p);
    let todo: SpillVec<(usize, usize)> =
        table.pairs.iter().enumerate().filter(lacking).map(|(p, &(i, _))| (i, p)).collect();
    Cached { values, cached, replies, todo }
}

/// `todo` (unique images, in order) in batches of at most `size`; images shown together, whose
/// one state is longer than a single image's, each in a batch of its own.
fn batches<'a>(todo: &'a [usize], size: usize, images: &'a dyn SourceList) -> impl Iterator<Item = &'a [usize]> + 'a {
    let together = move |i: usize| matches!(images.source(i), ImageSource::Together(_));
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = todo.get(at..).filter(|rest| !rest.is_empty())?;
        let len = match together(rest[0]) {
            true => 1,
            false => 1 + rest[1..].iter().take(size.max(1) - 1).take_while(|&&i| !together(i)).count(),
        };
        at += len;
        Some(&rest[..len])
    })
}

/// Every pair's score, and its reply where replies are kept.
pub(crate) struct PairScores {
    pub values: SpillVec<f32>,
    pub replies: Option<Replies>,
}

/// A fusion model's score of every pair the run asks, through the cache (one value per pair,
/// keyed by both inputs' keys; and its reply, where kept).
///
/// Every run scores in one order, whatever its cache holds or its shard: the table's pairs
/// grouped by image in image order, images encoded `batch` at a time (one at a time where
/// they keep their own sizes), and each such image batch's pairs scored `batch` at a time. A
/// run scores each of those pair batches that holds a pair it lacks, whole, because a score
/// depends in its last bits on the batch it was computed in: so a resumed run, every shard
/// and the cold run give the same bits.
pub(crate) fn score_pairs_through_cache(
    model: Option<&dyn FusionEncoder>,
    table: &PairTable,
    inputs: &PairInputs,
    batch: usize,
    counts: &mut Counts,
    cache: &mut EmbeddingCache,
) -> Result<PairScores> {
    let Cached { mut values, cached, mut replies, todo } = missing_pairs(table, inputs, cache);
    counts.pairs_cached += cached;
    let bar = progress(todo.len(), "scoring pairs");
    let schedule = if todo.is_empty() { SpillVec::new() } else { table.by_image() };
    let schedule_images: SpillVec<usize> = (schedule.iter().enumerate())
        .filter(|&(at, &(i, _))| at == 0 || schedule[at - 1].0 != i)
        .map(|(_, &(i, _))| i)
        .collect();
    let images_per_batch = model.map_or(batch.max(1), |m| m.preprocessor().images_per_batch(batch));
    let mut at = 0;
    for image_batch in batches(&schedule_images, images_per_batch, inputs.images) {
        let last = image_batch[image_batch.len() - 1];
        let end = at + schedule[at..].iter().take_while(|&&(i, _)| i <= last).count();
        let these = &schedule[at..end];
        at = end;
        let lacks = |pairs: &&[(usize, usize)]| pairs.iter().any(|&(_, p)| values[p].is_none() && table.is_wanted(p));
        let lacking: Vec<&[(usize, usize)]> = these.chunks(batch.max(1)).filter(lacks).collect();
        if lacking.is_empty() {
            continue;
        }
        let model = model.ok_or_else(|| {
            Error::new(ErrorKind::Compute, "score a pair missing from the cache: the model was not loaded")
        })?;
        let states = encode_image_batch(model, image_batch, inputs.images)?;
        counts.images_encoded += image_batch.len();
        counts.image_batches += 1;
        for pairs in lacking {
            let scored = score_batch(model, &states, image_batch, pairs, table, inputs.texts, replies.is_some())?;
            let kept = keep(table, inputs.pair_keys, pairs, &scored, (&mut values, &mut replies), cache)?;
            counts.pairs_scored += pairs.len();
            bar.inc(kept as u64);
        }
    }
    bar.finish_and_clear();
    Ok(PairScores {
        values: table.asked_values(&values, "score pairs: a pair was neither cached nor scored")?,
        replies,
    })
}

/// The image states of one batch of unique images.
fn encode_image_batch(model: &dyn FusionEncoder, image_batch: &[usize], images: &dyn SourceList) -> Result<Tensor> {
    let sources: Vec<ImageSource> = image_batch.iter().map(|&i| images.source(i)).collect();
    Ok(match sources.as_slice() {
        // Each image loaded on its own: a model may resize each to about its own size.
        [ImageSource::Together(shown)] => {
            let each =
                |source: &ImageSource| load_pixels(model.preprocessor(), std::slice::from_ref(source), model.device());
            model.encode_shown_together(&shown.iter().map(each).collect::<Result<Vec<Tensor>>>()?)?
        }
        _ => model.encode_images(&load_pixels(model.preprocessor(), &sources, model.device())?)?,
    })
}

/// One batch's scores, and its generated replies where asked for.
struct ScoredBatch {
    scores: Vec<f32>,
    replies: Option<Vec<String>>,
}

/// Scores `pairs` (as `(unique image, pair)`, their images among `image_batch`, whose states
/// are `states`) in one batch.
fn score_batch(
    model: &dyn FusionEncoder,
    states: &Tensor,
    image_batch: &[usize],
    pairs: &[(usize, usize)],
    table: &PairTable,
    texts: &[&str],
    with_replies: bool,
) -> Result<ScoredBatch> {
    let compute = |what: &str, e: candle_core::Error| Error::new(ErrorKind::Compute, format!("{what}: {e}"));
    // `image_batch` is in image order: a pair's row of the states is where its image sorts.
    let rows: Vec<u32> = pairs.iter().map(|&(i, _)| image_batch.partition_point(|&b| b < i) as u32).collect();
    let rows = Tensor::from_vec(rows, pairs.len(), model.device()).map_err(|e| compute("index pairs", e))?;
    let pair_states = states.index_select(&rows, 0).map_err(|e| compute("gather image states", e))?;
    let pair_texts: Vec<&str> = pairs.iter().map(|&(_, p)| texts[table.pairs[p].1]).collect();
    let (scores, replies) = match with_replies {
        true => model.score_pairs_with_replies(&pair_states, &pair_texts)?,
        false => (model.score_pairs(&pair_states, &pair_texts)?, None),
    };
    let scores =
        scores.to_dtype(DType::F32).and_then(|s| s.to_vec1::<f32>()).map_err(|e| compute("read pair scores", e))?;
    if with_replies && replies.is_none() {
        return Err(Error::new(ErrorKind::Compute, "keep the generated replies: the model gave none"));
    }
    Ok(ScoredBatch { scores, replies })
}

/// Keeps a scored batch: each pair the run lacks in its values (and replies), each pair the
/// cache lacks in the cache, its reply before its score (a score is never cached without its
/// reply). A pair the run took from the cache keeps that value. Returns how many pairs the
/// run lacked.
fn keep(
    table: &PairTable,
    pair_keys: &Keys,
    pairs: &[(usize, usize)],
    scored: &ScoredBatch,
    (values, replies): (&mut SpillVec<Option<f32>>, &mut Option<Replies>),
    cache: &mut EmbeddingCache,
) -> Result<usize> {
    let new: Vec<usize> = (0..pairs.len())
        .filter(|&at| {
            let p = pairs[at].1;
            match table.is_wanted(p) {
                true => values[p].is_none(),
                // A neighbour shard's pair, scored for its batch: cached unless already.
                false => cache.get(&pair_keys.get(p)).is_none(),
            }
        })
        .collect();
    if let Some(generated) = &scored.replies {
        let keys: Vec<cache::Key> = new.iter().map(|&at| reply_key(&pair_keys.get(pairs[at].1))).collect();
        let entries: Vec<(cache::Key, &str)> =
            keys.iter().zip(&new).map(|(&key, &at)| (key, generated[at].as_str())).collect();
        cache.append_texts(&entries)?;
    }
    let entries: Vec<(cache::Key, &[f32])> =
        new.iter().map(|&at| (pair_keys.get(pairs[at].1), std::slice::from_ref(&scored.scores[at]))).collect();
    cache.append(&entries)?;
    let mut lacked = 0;
    for &at in new.iter().filter(|&&at| table.is_wanted(pairs[at].1)) {
        let p = pairs[at].1;
        values[p] = Some(scored.scores[at]);
        if let (Some(replies), Some(generated)) = (replies.as_mut(), &scored.replies) {
            replies.set(p, &generated[at]);
        }
        lacked += 1;
    }
    Ok(lacked)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two image files, never read.
    struct TwoImages;

    impl SourceList for TwoImages {
        fn len(&self) -> usize {
            2
        }

        fn source(&self, i: usize) -> ImageSource {
            ImageSource::File(format!("{i}.png").into())
        }
    }

    /// A score cached with its reply is served with it; one cached without (by an earlier
    /// benchctl) is served all the same, its reply unknown; an uncached pair is to do.
    #[test]
    fn a_score_cached_without_its_reply_is_served_and_its_reply_left_unknown() {
        let root = tempfile::tempdir().unwrap();
        let keys: Vec<cache::Key> = (0u8..3).map(|i| cache::key(&[&[i]])).collect();
        let mut cache = EmbeddingCache::open(root.path(), "ns").unwrap();
        cache.append(&[(keys[0], &[-0.5][..]), (keys[1], &[0.0][..])]).unwrap();
        cache.append_texts(&[(reply_key(&keys[1]), "Yes, it is.")]).unwrap();
        let cache = EmbeddingCache::open(root.path(), "ns").unwrap();
        let table = PairTable {
            pairs: [(0, 0), (0, 1), (1, 0)].into_iter().collect(),
            item_pairs: SpillVec::new(),
            first_cell: 0,
            wanted: None,
        };
        let pair_keys = Keys::from(keys);
        let inputs = PairInputs { images: &TwoImages, texts: &["a", "b"], pair_keys: &pair_keys, keeps_replies: true };
        let cached = missing_pairs(&table, &inputs, &cache);
        assert_eq!(cached.values.as_slice(), &[Some(-0.5), Some(0.0), None]);
        let replies = cached.replies.unwrap();
        assert_eq!((replies.get(0), replies.get(1), replies.get(2)), (None, Some("Yes, it is."), None));
        assert_eq!(cached.todo.as_slice(), &[(1, 2)]);
        let without = PairInputs { keeps_replies: false, ..inputs };
        assert!(missing_pairs(&table, &without, &cache).replies.is_none());
    }
}
