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

/// Every (image, text) pair a fusion model must score for a suite, each once, and where
/// each item's K×L pairs are (spilled with the suite: a million items have millions of pairs).
pub(crate) struct PairTable {
    /// Unique pairs as (unique image index, unique text index).
    pub pairs: SpillVec<(usize, usize)>,
    /// Every item's pairs, row-major over K×L, one item after another, as indices into `pairs`
    /// ([`UNASKED`] for a cell its truth does not ask).
    item_pairs: SpillVec<usize>,
}

/// The pair index of a cell no model is asked ([`benchctl_scoring::Truth::is_asked`]).
const UNASKED: usize = usize::MAX;

impl PairTable {
    pub(crate) fn of_items(inputs: &ItemInputs) -> Self {
        let mut index = benchctl_base::spill::Index::default();
        let mut pairs: SpillVec<(usize, usize)> = SpillVec::new();
        let mut item_pairs = SpillVec::new();
        for n in 0..inputs.suite.items.len() {
            let (images, texts) = (inputs.images_of(n), inputs.texts_of(n));
            let truth = inputs.suite.items.item(n).truth();
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
        Self { pairs, item_pairs }
    }

    /// Each pair's cache key, from its image's and text's.
    pub(crate) fn keys(&self, image_keys: &Keys, text_keys: &Keys) -> SpillVec<cache::Key> {
        self.pairs.iter().map(|&(i, t)| cache::KeyTag::Pair.key(&[&image_keys.get(i), &text_keys.get(t)])).collect()
    }

    /// Each item's K×L cells' replies from the replies of its pairs.
    pub(crate) fn item_replies(&self, suite: &Suite, replies: &Replies) -> ItemReplies {
        let mut items = ItemReplies::new(suite.items.len());
        let mut start = 0;
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
        let mut start = 0;
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
    /// Every pair's score (`None` where the cache lacks it).
    pub values: SpillVec<Option<f32>>,
    /// Every pair's reply, where replies are kept.
    pub replies: Option<Replies>,
    /// The missing pairs as `(unique image, pair)`, grouped by image in image order (sorted in
    /// bounded memory), so that an image is read once for all its missing pairs.
    pub todo: SpillVec<(usize, usize)>,
}

/// Every pair's cached score, and its reply where replies are kept. A score cached without its
/// reply (by a benchctl that did not keep replies) is served, never asked or generated again,
/// its reply left unknown (`null` in the dump) and counted in a warning.
pub(crate) fn missing_pairs(table: &PairTable, inputs: &PairInputs, cache: &EmbeddingCache) -> Cached {
    let pair_keys = inputs.pair_keys;
    let values: SpillVec<Option<f32>> =
        (0..pair_keys.len()).map(|p| cache.get(&pair_keys.get(p)).and_then(|v| v.first().copied())).collect();
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
    let mut todo: SpillVec<(usize, usize)> =
        table.pairs.iter().enumerate().filter(|&(p, _)| values[p].is_none()).map(|(p, &(i, _))| (i, p)).collect();
    benchctl_base::spill::sort_by_key(&mut todo, |&(i, _)| i);
    Cached { values, replies, todo }
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

/// A fusion model's score of every pair, through the cache (one value per pair, keyed by
/// both inputs' keys; and its reply, where kept). Missing pairs are scored grouped by image:
/// `batch` images are encoded at a time, once each, and all their missing pairs scored in
/// batches of `batch`.
pub(crate) fn score_pairs_through_cache(
    model: Option<&dyn FusionEncoder>,
    table: &PairTable,
    inputs: &PairInputs,
    batch: usize,
    counts: &mut Counts,
    cache: &mut EmbeddingCache,
) -> Result<PairScores> {
    let PairInputs { images, texts, pair_keys, .. } = *inputs;
    let Cached { mut values, mut replies, todo } = missing_pairs(table, inputs, cache);
    counts.pairs_cached += values.len() - todo.len();
    let todo_images: SpillVec<usize> =
        todo.iter().enumerate().filter(|&(at, &(i, _))| at == 0 || todo[at - 1].0 != i).map(|(_, &(i, _))| i).collect();
    let bar = progress(todo.len(), "scoring pairs");
    let compute = |what: &str, e: candle_core::Error| Error::new(ErrorKind::Compute, format!("{what}: {e}"));
    let mut next_todo = 0;
    let images_per_batch = model.map_or(batch.max(1), |m| m.preprocessor().images_per_batch(batch));
    for image_chunk in batches(&todo_images, images_per_batch, images) {
        let model = model.ok_or_else(|| {
            Error::new(ErrorKind::Compute, "score a pair missing from the cache: the model was not loaded")
        })?;
        let sources: Vec<ImageSource> = image_chunk.iter().map(|&i| images.source(i)).collect();
        let states = match sources.as_slice() {
            // Each image loaded on its own: a model may resize each to about its own size.
            [ImageSource::Together(shown)] => {
                let each = |source: &ImageSource| {
                    load_pixels(model.preprocessor(), std::slice::from_ref(source), model.device())
                };
                model.encode_shown_together(&shown.iter().map(each).collect::<Result<Vec<Tensor>>>()?)?
            }
            _ => model.encode_images(&load_pixels(model.preprocessor(), &sources, model.device())?)?,
        };
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
            let (scores, generated) = match replies {
                Some(_) => model.score_pairs_with_replies(&pair_states, &pair_texts)?,
                None => (model.score_pairs(&pair_states, &pair_texts)?, None),
            };
            let scores = scores
                .to_dtype(DType::F32)
                .and_then(|s| s.to_vec1::<f32>())
                .map_err(|e| compute("read pair scores", e))?;
            if let Some(replies) = &mut replies {
                let generated = generated
                    .ok_or_else(|| Error::new(ErrorKind::Compute, "keep the generated replies: the model gave none"))?;
                let keys: Vec<cache::Key> = chunk.iter().map(|&(_, p)| reply_key(&pair_keys.get(p))).collect();
                let entries: Vec<(cache::Key, &str)> =
                    keys.iter().copied().zip(generated.iter().map(String::as_str)).collect();
                // The reply before its score: a score is never cached without its reply.
                cache.append_texts(&entries)?;
                for (&(_, p), reply) in chunk.iter().zip(&generated) {
                    replies.set(p, reply);
                }
            }
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
    let values = values
        .iter()
        .map(|v| v.ok_or_else(|| Error::new(ErrorKind::Compute, "score pairs: a pair was neither cached nor scored")))
        .collect::<Result<_>>()?;
    Ok(PairScores { values, replies })
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
        let table = PairTable { pairs: [(0, 0), (0, 1), (1, 0)].into_iter().collect(), item_pairs: SpillVec::new() };
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
