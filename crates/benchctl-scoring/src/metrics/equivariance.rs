//! EqBen's scores (Wang et al., "Equivariant Similarity for Vision-Language Foundation
//! Models", ICCV 2023, <https://arxiv.org/abs/2303.14465>): Winoground's text, image and
//! group score and GroupMatch on each 2×2 item, plus the EqSim deviation diagnostic
//!
//! `|(s11 − s12) − (s22 − s21)| + |(s11 − s21) − (s22 − s12)|`
//!
//! with `s_ij = s(image i, caption j)`: how far the similarity change from swapping the
//! caption differs between the two images, and swapping the image between the two captions.
//! Zero for a perfectly equivariant model; lower is better. It is reported in score units
//! (mean and quartiles), so it is comparable only between models with the same score scale.

use super::{group, Aggregate, Family, FamilyFacts, ItemView, MetricFamily, Ties, ValueRows};
use crate::{Result, ScoreMatrix, ScoreTensor};

/// Names of the EqBen metrics, in report order.
pub const NAMES: [&str; 5] = ["text_score", "image_score", "group_score", "group_match", "eqsim_deviation"];

/// The EqSim deviation of a 2×2 item (`None` for other shapes).
pub fn eqsim_deviation(s: &ScoreMatrix<'_>) -> Option<f64> {
    if (s.images(), s.texts()) != (2, 2) {
        return None;
    }
    let [s11, s12, s21, s22] = [s.get(0, 0), s.get(0, 1), s.get(1, 0), s.get(1, 1)];
    Some(((s11 - s12) - (s22 - s21)).abs() + ((s11 - s21) - (s22 - s12)).abs())
}

pub(crate) struct EquivarianceScores;

/// The family, as [`super::FAMILIES`] lists it.
pub const FAMILY: MetricFamily = MetricFamily::declare(&EquivarianceScores);

const FACTS: FamilyFacts = FamilyFacts {
    lower_is_better: &["eqsim_deviation"],
    ..FamilyFacts::new("equivariance", "text/image/group score and the EqSim deviation", "group_score")
};

impl Family for EquivarianceScores {
    fn facts(&self) -> &'static FamilyFacts {
        &FACTS
    }

    fn names(&self) -> &'static [&'static str] {
        &NAMES
    }

    fn aggregate(&self, metric: usize) -> Aggregate {
        if NAMES[metric] == "eqsim_deviation" {
            Aggregate::Distribution
        } else {
            Aggregate::Percent
        }
    }

    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>], _ties: Ties) -> Result<ValueRows> {
        // Winoground's four, then the EqSim deviation, in one pass over the items.
        Ok(group::outcomes(scores, items)
            .enumerate()
            .map(|(i, (o, _))| {
                let [text, image, group, group_match] = o.values();
                vec![text, image, group, group_match, eqsim_deviation(&scores.item(i))]
            })
            .collect())
    }
}
