//! Multiple-choice accuracy in either direction, as SPEC reports it (Peng et al.,
//! "Synthesize, Diagnose, and Optimize: Towards Fine-Grained Vision-Language Understanding",
//! CVPR 2024, <https://arxiv.org/abs/2312.00081>).
//!
//! - `i2t_accuracy`, for items with one image and candidate texts: the labelled text scores
//!   strictly above every other candidate (an item whose only text is the label counts as
//!   found, as CREPE's one-to-many rank counts a row without hard negatives);
//! - `t2i_accuracy`, for items with one text and several candidate images: likewise over
//!   images.
//!
//! "argmax equals label". By default ties are broken against the model: a label tied with
//! another candidate for the top score is a miss. The official code's `argmax` picks the
//! first of the tied candidates, which rewards candidate order; [`Ties::First`]
//! (`--ties first`) reproduces it exactly, for reproducing published numbers.

use super::{group, Family, FamilyFacts, ItemView, MetricFamily, Ties, ValueRows};
use crate::{Result, ScoreTensor};

/// Names of the choice metrics, in report order.
pub const NAMES: [&str; 2] = ["i2t_accuracy", "t2i_accuracy"];

pub(crate) struct ChoiceAccuracy;

/// The family, as [`super::FAMILIES`] lists it.
pub const FAMILY: MetricFamily = MetricFamily::declare(&ChoiceAccuracy);

const FACTS: FamilyFacts = FamilyFacts {
    takes_first_of_ties: true,
    ..FamilyFacts::new("choice", "image-to-text and text-to-image accuracy", "i2t_accuracy")
};

impl Family for ChoiceAccuracy {
    fn facts(&self) -> &'static FamilyFacts {
        &FACTS
    }

    fn names(&self) -> &'static [&'static str] {
        &NAMES
    }

    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>], ties: Ties) -> Result<ValueRows> {
        Ok(group::outcomes(scores, items)
            .enumerate()
            .map(|(i, (outcome, item))| {
                let (k, l) = (item.truth.images(), item.truth.texts());
                let matrix = scores.item(i);
                let (i2t, t2i) = match ties {
                    // `shared` is refused for this family ([`super::ItemValues::new`]).
                    Ties::Strict | Ties::Shared => (outcome.text, outcome.image),
                    Ties::First => (
                        k == 1 && argmax_matches((0..l).map(|c| (matrix.get(0, c), item.truth.is_match(0, c)))),
                        l == 1 && argmax_matches((0..k).map(|c| (matrix.get(c, 0), item.truth.is_match(c, 0)))),
                    ),
                };
                vec![
                    (k == 1 && l >= 1).then(|| group::hit(i2t)).flatten(),
                    (l == 1 && k > 1).then(|| group::hit(t2i)).flatten(),
                ]
            })
            .collect())
    }
}

/// Whether `numpy.argmax` of the scores lands on a matching candidate: the first candidate
/// holding the highest score. NaN compares as numpy does: the first NaN is the argmax.
pub fn argmax_matches(candidates: impl Iterator<Item = (f64, bool)>) -> bool {
    let mut best: Option<(f64, bool)> = None;
    for (score, is_match) in candidates {
        let better = match best {
            None => true,
            Some((b, _)) => !b.is_nan() && (score.is_nan() || score > b),
        };
        if better {
            best = Some((score, is_match));
        }
    }
    best.is_some_and(|(_, is_match)| is_match)
}
