//! A suite's unique inputs: each distinct image and caption once, the slots every item's
//! candidates take in them, the captions checked against the model's context, and images
//! decoded and preprocessed for the model.

use benchctl_base::spill::SpillVec;
use benchctl_models::preprocess::Preprocessor;
use benchctl_suites::{ImageSource, Suite};
use candle_core::{Device, Tensor};
use rayon::prelude::*;

use crate::model::ResolvedModel;
use crate::plan::LongCaptions;
use crate::{Error, ErrorKind, Result};

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
            prep.check_input(w as usize, h as usize).map_err(|e| {
                Error::caused_by(ErrorKind::Data, format!("preprocess image {}: {e}", s.display_name()), e)
            })?;
            Ok(preprocess(prep, &img))
        })
        .collect::<Result<_>>()?;
    Tensor::from_vec(pixels.concat(), (images.len(), 3, prep.size, prep.size), &Device::Cpu)
        .and_then(|t| t.to_device(device))
        .map_err(|e| Error::caused_by(ErrorKind::Compute, format!("stack an image batch: {e}"), e))
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
