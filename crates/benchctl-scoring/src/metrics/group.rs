//! Winoground's text, image and group scores (Thrush et al., CVPR 2022,
//! <https://arxiv.org/abs/2204.03162>), generalised to any K×L item.
//!
//! The official definitions for a 2×2 item with s(c, i):
//! - text score: s(c0, i0) > s(c1, i0) and s(c1, i1) > s(c0, i1)
//! - image score: s(c0, i0) > s(c0, i1) and s(c1, i1) > s(c1, i0)
//! - group score: both.
//!
//! Generalised: the text score holds when, for every image, each matching text scores
//! strictly above each non-matching text; the image score likewise per text over images.
//! Comparisons are strict, so a tie is a miss, as in the official evaluation code.
//!
//! Beside them, GroupMatch ([`super::group_match`]) on every k × k item whose truth is a
//! one-to-one matching: the truth's total strictly above every other matching's.

use super::{Family, FamilyFacts, ItemView, MetricFamily, Ties, ValueRows};
use crate::{Result, ScoreMatrix, ScoreTensor, Truth};

/// Names of the group-score metrics, in report order.
pub const NAMES: [&str; 4] = ["text_score", "image_score", "group_score", "group_match"];

/// One item's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub text: bool,
    pub image: bool,
    /// GroupMatch, where the item is a k × k group with a one-to-one truth.
    pub group_match: Option<bool>,
}

impl Outcome {
    pub fn group(&self) -> bool {
        self.text && self.image
    }
}

/// Text and image correctness of one item.
pub fn outcome(scores: &ScoreMatrix<'_>, truth: &Truth) -> Outcome {
    let text = (0..truth.images()).all(|k| image_picks(scores, truth, k));
    let image = (0..truth.texts()).all(|l| text_picks(scores, truth, l));
    Outcome { text, image, group_match: super::group_match::group_match(scores, truth) }
}

/// Whether image `k` scores each of its matching texts strictly above each other text (its
/// row of the item separates).
pub(crate) fn image_picks(scores: &ScoreMatrix<'_>, truth: &Truth, k: usize) -> bool {
    separates((0..truth.texts()).map(|l| (truth.is_match(k, l), scores.get(k, l))))
}

/// Whether text `l` scores each of its matching images strictly above each other image (its
/// column of the item separates).
pub(crate) fn text_picks(scores: &ScoreMatrix<'_>, truth: &Truth, l: usize) -> bool {
    separates((0..truth.images()).map(|k| (truth.is_match(k, l), scores.get(k, l))))
}

/// True when every matching candidate scores strictly above every non-matching one.
/// A row or column with no matching candidate imposes nothing.
fn separates(candidates: impl Iterator<Item = (bool, f64)> + Clone) -> bool {
    let lowest_match = candidates
        .clone()
        .filter(|(is_match, _)| *is_match)
        .map(|(_, s)| s)
        .fold(None, |lo: Option<f64>, s| Some(lo.map_or(s, |lo| lo.min(s))));
    let Some(lowest_match) = lowest_match else { return true };
    candidates.filter(|(is_match, _)| !is_match).all(|(_, s)| lowest_match > s)
}

/// Each item's outcome with the item, in order: what every Winoground-style family reads.
pub(crate) fn outcomes<'a>(
    scores: &'a ScoreTensor,
    items: &'a [ItemView<'a>],
) -> impl Iterator<Item = (Outcome, &'a ItemView<'a>)> + 'a {
    items.iter().enumerate().map(move |(i, item)| (outcome(&scores.item(i), item.truth), item))
}

/// A 0/1 hit as a metric value.
impl Outcome {
    /// The text, image and group scores' and GroupMatch's per-item values, in [`NAMES`] order.
    pub(crate) fn values(&self) -> [Option<f64>; 4] {
        [hit(self.text), hit(self.image), hit(self.group()), self.group_match.and_then(hit)]
    }
}

pub(crate) fn hit(b: bool) -> Option<f64> {
    Some(f64::from(u8::from(b)))
}

pub(crate) struct GroupScore;

/// The family, as [`super::FAMILIES`] lists it.
pub const FAMILY: MetricFamily = MetricFamily::declare(&GroupScore);

const FACTS: FamilyFacts = FamilyFacts::new("group", "text/image/group score", "group_score");

impl Family for GroupScore {
    fn facts(&self) -> &'static FamilyFacts {
        &FACTS
    }

    fn names(&self) -> &'static [&'static str] {
        &NAMES
    }

    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>], _ties: Ties) -> Result<ValueRows> {
        Ok(outcomes(scores, items).map(|(o, _)| o.values().to_vec()).collect())
    }
}
