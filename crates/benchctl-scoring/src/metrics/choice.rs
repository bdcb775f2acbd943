//! Multiple-choice accuracy in either direction, as SPEC reports it (Peng et al.,
//! "Synthesize, Diagnose, and Optimize: Towards Fine-Grained Vision-Language Understanding",
//! CVPR 2024, <https://arxiv.org/abs/2312.00081>).
//!
//! - `i2t_accuracy`, for items with one image and several candidate texts: the labelled
//!   text scores strictly above every other candidate;
//! - `t2i_accuracy`, for items with one text and several candidate images: likewise over
//!   images.
//!
//! "argmax equals label" with ties broken against the model: a label tied with another
//! candidate for the top score is a miss (the official code's `argmax` would pick the first
//! of the tied candidates, which rewards candidate order; benchctl refuses to).

use super::{group, ItemView, PerItem};
use crate::{Result, ScoreTensor};

/// Names of the choice metrics, in report order.
pub const NAMES: [&str; 2] = ["i2t_accuracy", "t2i_accuracy"];

pub(crate) struct ChoiceAccuracy;

impl PerItem for ChoiceAccuracy {
    fn names(&self) -> &'static [&'static str] {
        &NAMES
    }

    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>]) -> Result<Vec<Vec<Option<f64>>>> {
        Ok(group::outcomes(scores, items)
            .map(|(outcome, item)| {
                let (k, l) = (item.truth.images(), item.truth.texts());
                vec![
                    (k == 1 && l > 1).then(|| group::hit(outcome.text)).flatten(),
                    (l == 1 && k > 1).then(|| group::hit(outcome.image)).flatten(),
                ]
            })
            .collect())
    }
}
