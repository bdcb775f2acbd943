//! VALSE's pairwise accuracy (Parcalabescu et al., "VALSE: A Task-Independent Benchmark
//! for Vision and Language Models Centered on Linguistic Phenomena", ACL 2022,
//! <https://arxiv.org/abs/2112.07566>).
//!
//! `acc_r`: the share of items whose image scores its caption strictly above its foil,
//! `s(image, caption) > s(image, foil)`; a tie is a miss. An item is one image with two
//! texts, the caption matching. For several foils, every foil must be beaten.
//!
//! For match probabilities ([`crate::ScoreKind::Probability`], or [`crate::ScoreKind::Logit`] through
//! `σ`, e.g. an image-text-matching head) the paper's threshold metrics apply too:
//! - `p_c`: the caption is judged matching, `P(match | image, caption) > 0.5`;
//! - `p_f`: the foil is judged non-matching, `P(match | image, foil) < 0.5`;
//! - `acc = (p_c + p_f) / 2` and `min = min(p_c, p_f)`.
//!
//! A probability of exactly 0.5 is neither: it misses both (ties against the model).

use super::{group, Family, FamilyFacts, ItemView, MetricFamily, Ties, ValueRows};
use crate::{Result, ScoreTensor};

/// Names of the pairwise metrics, in report order.
pub const NAMES: [&str; 3] = ["acc_r", "p_c", "p_f"];

pub(crate) struct PairwiseAccuracy;

/// The family, as [`super::FAMILIES`] lists it.
pub const FAMILY: MetricFamily = MetricFamily::declare(&PairwiseAccuracy);

const FACTS: FamilyFacts =
    FamilyFacts { derived: &["acc", "min"], ..FamilyFacts::new("pairwise", "caption above its foil", "acc_r") };

impl Family for PairwiseAccuracy {
    fn facts(&self) -> &'static FamilyFacts {
        &FACTS
    }

    fn names(&self) -> &'static [&'static str] {
        &NAMES
    }

    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>], _ties: Ties) -> Result<ValueRows> {
        let hit = group::hit;
        let kind = scores.kind();
        let probabilities = kind.has_probability();
        Ok(items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let matrix = scores.item(i);
                // The caption beating every foil for the item's image is Winoground's text criterion.
                let acc_r = hit(group::outcome(&matrix, item.truth).text);
                if !probabilities {
                    return vec![acc_r, None, None];
                }
                // Every matching pair above 0.5, every non-matching pair below it.
                let pairs = (0..matrix.images()).flat_map(|k| (0..matrix.texts()).map(move |l| (k, l)));
                let (mut captions, mut foils) = (true, true);
                for (k, l) in pairs {
                    let p = kind.probability(matrix.get(k, l)).unwrap_or(f64::NAN);
                    if item.truth.is_match(k, l) {
                        captions &= p > 0.5;
                    } else {
                        foils &= p < 0.5;
                    }
                }
                vec![acc_r, hit(captions), hit(foils)]
            })
            .collect())
    }

    /// `acc` and `min` from `p_c` and `p_f` (reported as they are: no distribution metric
    /// shifts their places).
    fn derive(&self, values: &mut [Option<f64>]) {
        if let [_, Some(p_c), Some(p_f), acc, min] = values {
            *acc = Some((*p_c + *p_f) / 2.0);
            *min = Some(p_c.min(*p_f));
        }
    }
}
