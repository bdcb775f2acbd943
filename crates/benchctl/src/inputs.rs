//! The inputs stage: a suite's unique inputs ([`SuiteInputs`]: each distinct image and
//! caption once, the slots every item's candidates take in them, a shard's slice), the
//! captions checked against the model's context, every input's cache key, the fingerprints
//! of what was read.

use benchctl_base::spill::SpillVec;
use benchctl_suites::items::Sources;
use benchctl_suites::Suite;
use rayon::prelude::*;

use crate::cache::{self, text_keys, Key, Keys, SourceList};
use crate::model::ResolvedModel;
use crate::plan::LongCaptions;
use crate::results::{fingerprint, image_fingerprint};
use crate::session::Session;
use crate::{Error, ErrorKind, Result};

/// An item suite's unique inputs on both sides with their cache keys, and the slice of the
/// suite a run scores (all of it, or a shard's items).
pub struct SuiteInputs<'s> {
    full: &'s Suite,
    /// Each distinct image source once, in first-seen order.
    pub images: &'s Sources,
    /// Each distinct caption once, in first-seen order.
    pub texts: SpillVec<&'s str>,
    pub image_keys: Keys<'static>,
    /// The embedded images' keys (a hash of their bytes), for what else identifies images by
    /// content ([`Suite::clusters_knowing`]) without reading them again.
    embedded_keys: EmbeddedKeys,
    /// The whole suite's slots into `images` and `texts`.
    image_slots: SpillVec<usize>,
    text_slots: SpillVec<usize>,
    shard: Option<Shard>,
    /// [`fingerprint`] of the annotations and [`image_fingerprint`] of the images read.
    pub data_fingerprint: String,
    pub image_fingerprint: String,
}

/// Keys of embedded images by the file holding them, then by their name in it.
type EmbeddedKeys = std::collections::HashMap<std::path::PathBuf, std::collections::HashMap<String, Key>>;

impl<'s> SuiteInputs<'s> {
    /// The inputs of `suite` (sliced by the plan's shard), the captions checked, every key
    /// made (image files hashed on all cores unless the session's memo knows them).
    pub(crate) fn of(suite: &'s Suite, session: &mut Session) -> Result<Self> {
        let data_fingerprint = fingerprint(suite)?;
        // The items hold each distinct image source once, in first-seen order: those are the
        // unique images, and each item's indices into them its slots.
        let images = suite.items.distinct_sources();
        let image_slots: SpillVec<usize> =
            suite.items.iter().flat_map(|i| i.source_indices().iter().map(|&s| s as usize)).collect();
        let (text_slots, texts) = unique_by(suite.items.iter().flat_map(|i| i.texts()));
        // A shard keeps its slice of the items (and their slots); the unique inputs stay global.
        let shard = session.plan.options.shard.map(|s| {
            let all = ItemInputs::new(suite, &image_slots, &text_slots);
            Shard::of(&all, s.index, s.count, images.len(), texts.len())
        });
        session.run.counts.unique_images = images.len();
        session.run.counts.unique_texts = texts.len();
        check_question_form(session, suite, &texts)?;
        check_captions(session, &texts)?;
        let image_keys = Keys::from(image_keys(session, images)?);
        remember_file_keys(session);
        let image_fingerprint = image_fingerprint(image_slots.iter().map(|&s| image_keys.get(s)));
        let mut embedded_keys = EmbeddedKeys::new();
        for (i, e) in images.embedded() {
            embedded_keys.entry(e.file.clone()).or_default().insert(e.name.clone(), image_keys.get(i));
        }
        Ok(SuiteInputs {
            full: suite,
            images,
            texts,
            image_keys,
            embedded_keys,
            image_slots,
            text_slots,
            shard,
            data_fingerprint,
            image_fingerprint,
        })
    }

    /// The content key of an embedded image of the suite, as the run keyed it.
    pub(crate) fn embedded_key(&self, image: &benchctl_suites::EmbeddedImage) -> Option<Key> {
        self.embedded_keys.get(&image.file)?.get(&image.name).copied()
    }

    /// The suite the run scores: the shard's slice, or the whole suite.
    pub(crate) fn suite(&self) -> &Suite {
        self.shard.as_ref().map_or(self.full, |s| &s.suite)
    }

    /// The whole suite's items with their slots (a fusion model's pairs are scheduled over
    /// them, whatever the shard: [`crate::encode::pairs`]).
    pub(crate) fn all_items(&self) -> ItemInputs<'_> {
        ItemInputs::new(self.full, &self.image_slots, &self.text_slots)
    }

    /// Which of the whole suite's items the run scores.
    pub(crate) fn scored_range(&self) -> std::ops::Range<usize> {
        self.shard.as_ref().map_or(0..self.full.items.len(), |s| s.items.clone())
    }

    /// The scored items with their slots.
    pub(crate) fn items(&self) -> ItemInputs<'_> {
        match &self.shard {
            None => ItemInputs::new(self.full, &self.image_slots, &self.text_slots),
            Some(s) => ItemInputs::new(&s.suite, &s.image_slots, &s.text_slots),
        }
    }

    /// The captions' cache keys.
    pub(crate) fn text_keys(&self) -> Keys<'_> {
        text_keys(&self.texts)
    }

    /// Which unique images and texts the run needs (a shard's; `None`: all of them).
    pub(crate) fn wanted(&self) -> (Option<&[bool]>, Option<&[bool]>) {
        match &self.shard {
            None => (None, None),
            Some(s) => (Some(&s.wanted_images), Some(&s.wanted_texts)),
        }
    }

    /// The shard's suite, when the run scored one (the inputs, which borrow from the whole
    /// suite, are dropped with their spill files here).
    pub(crate) fn into_shard(self) -> Option<Suite> {
        self.shard.map(|s| s.suite)
    }
}

/// One shard's slice of a suite: items `⌊N·i/n⌋ .. ⌊N·(i+1)/n⌋`, their slots into the
/// global unique inputs, and which of those inputs the slice needs.
struct Shard {
    suite: Suite,
    /// The slice, in the whole suite's items.
    items: std::ops::Range<usize>,
    image_slots: SpillVec<usize>,
    text_slots: SpillVec<usize>,
    wanted_images: SpillVec<bool>,
    wanted_texts: SpillVec<bool>,
}

impl Shard {
    /// Shard `i` of `n` of `all` (the whole suite's items and slots), among `images` and
    /// `texts` unique inputs.
    fn of(all: &ItemInputs, i: usize, n: usize, images: usize, texts: usize) -> Self {
        let total = all.suite.items.len();
        let (start, end) = (total * i / n, total * (i + 1) / n);
        let (image_slots, text_slots) = (all.images_of_range(start..end), all.texts_of_range(start..end));
        let mut wanted_images = SpillVec::from_elem(false, images);
        let mut wanted_texts = SpillVec::from_elem(false, texts);
        image_slots.iter().for_each(|&s| wanted_images[s] = true);
        text_slots.iter().for_each(|&s| wanted_texts[s] = true);
        Shard {
            suite: all.suite.with_items(all.suite.items.range(start..end)),
            items: start..end,
            image_slots: image_slots.into(),
            text_slots: text_slots.into(),
            wanted_images,
            wanted_texts,
        }
    }
}

/// Counts the unique captions the model's tokenizer cuts (and its context) in the run's
/// record; refuses them when the plan says so.
pub(crate) fn check_captions(session: &mut Session, texts: &[&str]) -> Result<()> {
    let counts = &mut session.run.counts;
    (counts.captions_truncated, counts.text_context) =
        long_captions(&session.model, texts, session.plan.options.long_captions)?;
    Ok(())
}

/// A suite of questions with answer options needs a model that answers questions (it is
/// the log-probabilities of the options that are scored); any other suite's texts must not
/// look like such questions, which a generative model would read as one.
fn check_question_form(session: &Session, suite: &Suite, texts: &[&str]) -> Result<()> {
    let asks = suite.summary.family.facts().asks_questions;
    if asks && !session.model.answers_questions() {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "evaluate {} on {}: its items are questions with answer options, scored by a generative model's log-probability of each option; {} does not answer questions (use a VQAScore model: `benchctl models`, or --endpoint)",
                session.model.record.id, suite.id, session.model.record.id
            ),
        ));
    }
    let takes_several = session.model.architecture().is_none_or(|a| a.spec().images_together);
    if suite.items.distinct_sources().shown_together() > 0 && !takes_several {
        let several: Vec<&str> = (benchctl_models::registry::ARCHITECTURES.iter())
            .filter(|a| a.spec().images_together)
            .map(|a| a.name())
            .collect();
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "evaluate {} on {}: some of its questions show several images together in one prompt, and this model's prompt takes one image (use a model of {}, or --endpoint with a server whose model takes several images)",
                session.model.record.id,
                suite.id,
                several.join(", ")
            ),
        ));
    }
    if !asks {
        if let Some(text) = texts.iter().find(|t| t.contains(benchctl_scoring::metrics::answers::OPTION_SEPARATOR)) {
            return Err(Error::new(
                ErrorKind::Data,
                format!("read the captions of {}: {text:?} holds the control character U+001F", suite.id),
            ));
        }
    }
    Ok(())
}

/// The cache keys of `images` (files read on all cores unless the session's memo knows them).
pub(crate) fn image_keys(session: &Session, images: &(impl SourceList + ?Sized)) -> Result<SpillVec<Key>> {
    cache::image_keys(images, &session.file_keys)
}

/// Saves what the memo learnt about image files and counts the files it hashed; after the
/// run's last [`image_keys`].
pub(crate) fn remember_file_keys(session: &mut Session) {
    session.run.counts.images_hashed = session.file_keys.hashed.load(std::sync::atomic::Ordering::Relaxed);
    cache::remember(&session.file_keys);
}

/// How many of `texts` the model's tokenizer truncates, and its context: with
/// `--on-long-caption error`, the first such caption is an error (bad data, naming it and how
/// many tokens it loses) before any model work.
pub(crate) fn long_captions(resolved: &ResolvedModel, texts: &[&str], policy: LongCaptions) -> Result<(usize, usize)> {
    let limit = resolved.caption_limit()?;
    let tokenize = |e| Error::caused_by(ErrorKind::Model, format!("tokenize the captions: {e}"), e);
    // Counted, not collected: a million-item suite has two million captions.
    let truncated = texts
        .par_iter()
        .map(|t| limit.tokens_cut(t).map(|cut| usize::from(cut > 0)))
        .try_reduce(|| 0, |a, b| Ok(a + b))
        .map_err(tokenize)?;
    if policy == LongCaptions::Refuse && truncated > 0 {
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
    let mut index = benchctl_base::spill::Index::default();
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
