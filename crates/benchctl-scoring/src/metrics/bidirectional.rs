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
//! Comparisons are strict, as the official code's `>`: a tie is a miss. On other shapes than
//! 2 × 2, `i2t` and `t2i` are Winoground's text and image scores ([`super::group`]) and each
//! direction reads the first or second image's row or caption's column, where the item has it.

use super::{group, Family, FamilyFacts, ItemView, MetricFamily, Ties, ValueRows};
use crate::{Result, ScoreTensor};

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
        Ok(items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let (matrix, truth) = (scores.item(i), item.truth);
                // I2T and T2I are Winoground's text and image scores (every image's row, every
                // caption's column); each direction is one row or column, where the item has it.
                let rows: Vec<bool> = (0..truth.images()).map(|k| group::image_picks(&matrix, truth, k)).collect();
                let columns: Vec<bool> = (0..truth.texts()).map(|l| group::text_picks(&matrix, truth, l)).collect();
                let (i2t, t2i) = (rows.iter().all(|&r| r), columns.iter().all(|&c| c));
                let hit = |b: Option<&bool>| b.and_then(|&b| group::hit(b));
                vec![
                    group::hit(i2t),
                    group::hit(t2i),
                    group::hit(i2t && t2i),
                    hit(rows.first()),
                    hit(rows.get(1)),
                    hit(columns.first()),
                    hit(columns.get(1)),
                ]
            })
            .collect())
    }
}
