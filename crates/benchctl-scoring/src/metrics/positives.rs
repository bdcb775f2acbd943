//! SugarCrepe++'s accuracies (Dumpala et al., "SUGARCREPE++ Dataset: Vision-Language Model
//! Sensitivity to Semantic and Lexical Alterations", NeurIPS 2024 Datasets and Benchmarks,
//! <https://arxiv.org/abs/2406.11171>), for any item of one image with several positive texts
//! and at least one negative.
//!
//! As the official `VLMs/test_*.py` scripts of Sri-Harsha/scpp compute them:
//! - `accuracy` (the paper's ITT): every positive scores strictly above every negative
//!   (`cos_p1 > cos_neg and cos_p2 > cos_neg`);
//! - `positive_1_accuracy`, `positive_2_accuracy` ("Image-P1-Neg", "Image-P2-Neg"): the
//!   first (second) positive, in text order, strictly above every negative; an item with
//!   fewer positives has no value for it;
//! - `text_only_accuracy` (the paper's TOT, "Accuracy text-only task"): the texts compared
//!   with each other, no image: the two positives closer to each other than either is to the
//!   negative (`cos_p1p2 > cos_p1_neg and cos_p1p2 > cos_p2_neg`). Generalised: for every
//!   pair of positives (a, b) of an image and every negative n, s(a, b) > s(a, n) and
//!   s(a, b) > s(b, n). It reads the item's L×L text–text similarities
//!   ([`ScoreTensor::text_scores`]) at (earlier text, later text), the order the official
//!   script compares; a run without them (a model that does not embed texts on its own) or an
//!   item with fewer than two positives has no value for it.
//!
//! Ties are misses.

use super::{group::hit, Family, FamilyFacts, ItemView, MetricFamily, Ties, ValueRows};
use crate::{Result, ScoreMatrix, ScoreTensor, Truth};

/// Names of the positives metrics, in report order.
pub const NAMES: [&str; 4] = ["accuracy", "positive_1_accuracy", "positive_2_accuracy", "text_only_accuracy"];

pub(crate) struct PositivesAccuracy;

/// The family, as [`super::FAMILIES`] lists it.
pub const FAMILY: MetricFamily = MetricFamily::declare(&PositivesAccuracy);

const FACTS: FamilyFacts = FamilyFacts {
    compares_texts: true,
    ..FamilyFacts::new("positives", "every positive above every negative", "accuracy")
};

impl Family for PositivesAccuracy {
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
                let text_only = scores.text_scores(i).and_then(|texts| text_only(&texts, item.truth));
                vec![hit(all), positive(0), positive(1), text_only]
            })
            .collect())
    }
}

/// The text-only outcome of one item from its text–text similarities: every image's
/// positives closer to each other than to any of its negatives; `None` when no image has two
/// positives.
fn text_only(texts: &ScoreMatrix<'_>, truth: &Truth) -> Option<f64> {
    // The official script compares cos(p1, p2), cos(p1, neg), cos(p2, neg): earlier text first.
    let s = |a: usize, b: usize| texts.get(a.min(b), a.max(b));
    let mut pairs = 0;
    let mut all = true;
    for k in 0..truth.images() {
        let (positives, negatives): (Vec<usize>, Vec<usize>) = (0..truth.texts()).partition(|&l| truth.is_match(k, l));
        for (i, &a) in positives.iter().enumerate() {
            for &b in &positives[i + 1..] {
                pairs += 1;
                all &= negatives.iter().all(|&n| s(a, b) > s(a, n) && s(a, b) > s(b, n));
            }
        }
    }
    (pairs > 0).then_some(if all { 1.0 } else { 0.0 })
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
            assert_eq!(rows.get(item, 3), None, "no text scores, no text-only value");
            assert_eq!(&row[..], &expected[..], "item {item}");
        }
        // One positive: no second-positive value.
        let single = Truth::new(1, 2, vec![true, false])?;
        let mut one = ScoreTensor::of_kind(ScoreKind::Similarity);
        one.push(1, 2, &[0.2, 0.1])?;
        let rows = PositivesAccuracy.values(&one, &[ItemView { truth: &single, tags: &tags }], Ties::Strict)?;
        assert_eq!((0..4).map(|m| rows.get(0, m)).collect::<Vec<_>>(), vec![Some(1.0), Some(1.0), None, None]);
        Ok(())
    }

    #[test]
    fn text_only_needs_the_positives_closer_to_each_other_than_to_the_negative() -> Result<()> {
        // Texts: positive 1, positive 2, negative; s(p1, p2), s(p1, n), s(p2, n).
        let truth = Truth::new(1, 3, vec![true, true, false])?;
        let tags = Tags::default();
        let cases: [([f64; 3], Option<f64>); 5] = [
            ([0.9, 0.5, 0.4], Some(1.0)),
            ([0.9, 0.95, 0.4], Some(0.0)),
            ([0.9, 0.4, 0.95], Some(0.0)),
            ([0.9, 0.9, 0.4], Some(0.0)),
            ([0.5, 0.4, 0.5], Some(0.0)),
        ];
        let mut scores = ScoreTensor::of_kind(ScoreKind::Similarity);
        for ([p1p2, p1n, p2n], _) in &cases {
            scores.push(1, 3, &[0.3, 0.2, 0.1])?;
            // The lower triangle disagrees with the upper: only (earlier, later) is read.
            scores.push_text_scores(&[1.0, *p1p2, *p1n, -1.0, 1.0, *p2n, -1.0, -1.0, 1.0])?;
        }
        let items: Vec<ItemView<'_>> = cases.iter().map(|_| ItemView { truth: &truth, tags: &tags }).collect();
        let rows = PositivesAccuracy.values(&scores, &items, Ties::Strict)?;
        for (item, (_, expected)) in cases.iter().enumerate() {
            assert_eq!(rows.get(item, 3), *expected, "item {item}");
        }
        // One positive: nothing to compare it with.
        let single = Truth::new(1, 2, vec![true, false])?;
        let mut one = ScoreTensor::of_kind(ScoreKind::Similarity);
        one.push(1, 2, &[0.2, 0.1])?;
        one.push_text_scores(&[1.0, 0.5, 0.5, 1.0])?;
        let rows = PositivesAccuracy.values(&one, &[ItemView { truth: &single, tags: &tags }], Ties::Strict)?;
        assert_eq!(rows.get(0, 3), None);
        Ok(())
    }

    #[test]
    fn text_scores_are_all_or_none_and_square() -> Result<()> {
        let mut scores = ScoreTensor::of_kind(ScoreKind::Similarity);
        assert!(scores.push_text_scores(&[1.0]).is_err(), "no item yet");
        scores.push(1, 2, &[0.2, 0.1])?;
        assert!(scores.push_text_scores(&[1.0, 0.5, 0.5]).is_err(), "2×2 needs four values");
        assert!(scores.push_text_scores(&[1.0, f64::NAN, 0.5, 1.0]).is_err(), "NaN has no order");
        scores.push_text_scores(&[1.0, 0.5, 0.5, 1.0])?;
        scores.push(1, 2, &[0.2, 0.1])?;
        let truth = Truth::new(1, 2, vec![true, false])?;
        let error = scores.check_against([&truth, &truth].into_iter()).unwrap_err().to_string();
        assert!(error.contains("2 items have scores but 1 have text scores"), "{error}");
        assert!(scores.text_scores(0).is_none(), "a partial layer is never read");
        let mut late = ScoreTensor::of_kind(ScoreKind::Similarity);
        late.push(1, 2, &[0.2, 0.1])?;
        late.push(1, 2, &[0.2, 0.1])?;
        let error = late.push_text_scores(&[1.0, 0.5, 0.5, 1.0]).unwrap_err().to_string();
        assert!(error.contains("1 earlier item(s) have none"), "{error}");
        Ok(())
    }
}
