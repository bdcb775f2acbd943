//! BiVLC's bidirectional scores (Miranda et al., "BiVLC: Extending Vision-Language
//! Compositionality Evaluation with Text-to-Image Retrieval", NeurIPS 2024 Datasets and
//! Benchmarks, <https://arxiv.org/abs/2406.09952>; official code: IMirandaM/BiVLC,
//! `evaluate_BiVLC` in `src/CLIP_fine_tuning/CLIP_utils.py`).
//!
//! An item is two images (the positive, then the generated negative) and two captions (the
//! positive, then the negative), image *i* matching caption *i*. With s(c, i):
//! - `ipos_2t`: s(c0, i0) > s(c1, i0) — the positive image picks its caption;
//! - `ineg_2t`: s(c1, i1) > s(c0, i1) — the negative image picks its caption;
//! - `tpos_2i`: s(c0, i0) > s(c0, i1) — the positive caption picks its image;
//! - `tneg_2i`: s(c1, i1) > s(c1, i0) — the negative caption picks its image;
//! - `i2t`: both images right (Winoground's text score), `t2i`: both captions right (its
//!   image score), `group_score`: all four.
//!
//! Comparisons are strict, as the official code's `>`: a tie is a miss.

use super::{group, Family, FamilyFacts, ItemView, MetricFamily, Ties, ValueRows};
use crate::{Error, Result, ScoreTensor};

/// Names of the bidirectional metrics, in the official code's order.
pub const NAMES: [&str; 7] = ["i2t", "t2i", "group_score", "ipos_2t", "ineg_2t", "tpos_2i", "tneg_2i"];

pub(crate) struct Bidirectional;

/// The family, as [`super::FAMILIES`] lists it.
pub const FAMILY: MetricFamily = MetricFamily::declare(&Bidirectional);

const FACTS: FamilyFacts = FamilyFacts::new(
    "bidirectional",
    "BiVLC's I2T, T2I, group score and each image's and caption's choice",
    "group_score",
);

impl Family for Bidirectional {
    fn facts(&self) -> &'static FamilyFacts {
        &FACTS
    }

    fn names(&self) -> &'static [&'static str] {
        &NAMES
    }

    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>], _ties: Ties) -> Result<ValueRows> {
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let (matrix, truth) = (scores.item(i), item.truth);
                if (truth.images(), truth.texts()) != (2, 2) {
                    return Err(Error::new(format!(
                        "score item {i} with the bidirectional family: it scores items of 2 images and 2 texts, this one has {} × {}",
                        truth.images(),
                        truth.texts()
                    )));
                }
                // Each image's row, each caption's column: its match strictly above the other.
                let image_picks = |k: usize| group::separates((0..2).map(|l| (truth.is_match(k, l), matrix.get(k, l))));
                let text_picks = |l: usize| group::separates((0..2).map(|k| (truth.is_match(k, l), matrix.get(k, l))));
                let [ipos, ineg, tpos, tneg] = [image_picks(0), image_picks(1), text_picks(0), text_picks(1)];
                let (i2t, t2i) = (ipos && ineg, tpos && tneg);
                Ok([i2t, t2i, i2t && t2i, ipos, ineg, tpos, tneg].into_iter().map(group::hit).collect())
            })
            .collect()
    }
}
