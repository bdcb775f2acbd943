//! SugarCrepe++'s image-to-text accuracies (Dumpala et al., "SUGARCREPE++ Dataset:
//! Vision-Language Model Sensitivity to Semantic and Lexical Alterations", NeurIPS 2024
//! Datasets and Benchmarks, <https://arxiv.org/abs/2406.11171>), for any item of one image
//! with several positive texts and at least one negative.
//!
//! As the official `VLMs/test_*.py` scripts of Sri-Harsha/scpp compute them:
//! - `accuracy` (the paper's ITT): every positive scores strictly above every negative
//!   (`cos_p1 > cos_neg and cos_p2 > cos_neg`);
//! - `positive_1_accuracy`, `positive_2_accuracy` ("Image-P1-Neg", "Image-P2-Neg"): the
//!   first (second) positive, in text order, strictly above every negative; an item with
//!   fewer positives has no value for it.
//!
//! Ties are misses. The paper's text-only task (TOT) compares texts with texts, outside the
//! K×L image-text scores every suite shares, so it is not reported.

use super::{group::hit, ItemView, PerItem, Ties, ValueRows};
use crate::{Result, ScoreTensor};

/// Names of the positives metrics, in report order.
pub const NAMES: [&str; 3] = ["accuracy", "positive_1_accuracy", "positive_2_accuracy"];

pub(crate) struct PositivesAccuracy;

impl PerItem for PositivesAccuracy {
    fn names(&self) -> &'static [&'static str] {
        &NAMES
    }

    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>], _ties: Ties) -> Result<ValueRows> {
        Ok(items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let matrix = scores.item(i);
                // Every image of the item counts (SugarCrepe++ has one): a positive must beat
                // every negative of its image's row.
                let mut positives_above: Vec<bool> = Vec::new();
                let mut all = true;
                for k in 0..matrix.images() {
                    let texts = 0..matrix.texts();
                    let highest_negative = texts
                        .clone()
                        .filter(|&l| !item.truth.is_match(k, l))
                        .map(|l| matrix.get(k, l))
                        .fold(f64::NEG_INFINITY, f64::max);
                    for (j, l) in texts.filter(|&l| item.truth.is_match(k, l)).enumerate() {
                        let above = matrix.get(k, l) > highest_negative;
                        all &= above;
                        match positives_above.get_mut(j) {
                            Some(seen) => *seen &= above,
                            None => positives_above.push(above),
                        }
                    }
                }
                let positive = |j: usize| positives_above.get(j).and_then(|&above| hit(above));
                vec![hit(all), positive(0), positive(1)]
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{metrics::ItemView, ScoreKind, Tags, Truth};

    #[test]
    fn every_positive_must_beat_every_negative_and_ties_miss() -> Result<()> {
        // Texts: positive 1, positive 2, negative.
        let truth = Truth::new(1, 3, vec![true, true, false])?;
        let tags = Tags::default();
        let cases: [([f32; 3], [Option<f64>; 3]); 5] = [
            ([0.3, 0.2, 0.1], [Some(1.0), Some(1.0), Some(1.0)]),
            ([0.3, 0.05, 0.1], [Some(0.0), Some(1.0), Some(0.0)]),
            ([0.05, 0.3, 0.1], [Some(0.0), Some(0.0), Some(1.0)]),
            ([0.1, 0.3, 0.1], [Some(0.0), Some(0.0), Some(1.0)]),
            ([0.0, 0.0, 0.1], [Some(0.0), Some(0.0), Some(0.0)]),
        ];
        let mut scores = ScoreTensor::of_kind(ScoreKind::Similarity);
        for (values, _) in &cases {
            scores.push(1, 3, values)?;
        }
        let items: Vec<ItemView<'_>> = cases.iter().map(|_| ItemView { truth: &truth, tags: &tags }).collect();
        let rows = PositivesAccuracy.values(&scores, &items, Ties::Strict)?;
        for (item, (_, expected)) in cases.iter().enumerate() {
            let row: Vec<Option<f64>> = (0..3).map(|m| rows.get(item, m)).collect();
            assert_eq!(&row[..], &expected[..], "item {item}");
        }
        // One positive: no second-positive value.
        let single = Truth::new(1, 2, vec![true, false])?;
        let mut one = ScoreTensor::of_kind(ScoreKind::Similarity);
        one.push(1, 2, &[0.2, 0.1])?;
        let rows = PositivesAccuracy.values(&one, &[ItemView { truth: &single, tags: &tags }], Ties::Strict)?;
        assert_eq!((0..3).map(|m| rows.get(0, m)).collect::<Vec<_>>(), vec![Some(1.0), Some(1.0), None]);
        Ok(())
    }
}
