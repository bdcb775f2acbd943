//! Questions answered by choosing one of a few options: NaturalBench's VQA scores (Li et al.,
//! "NaturalBench: Evaluating Vision-Language Models on Natural Adversarial Samples", NeurIPS
//! 2024 Datasets and Benchmarks, <https://arxiv.org/abs/2410.14669>; official code:
//! `get_scores` in the evaluation example of <https://github.com/Baiqi-Li/NaturalBench>).
//!
//! An item asks Q questions of each of K images; every question has the same O answer
//! options. Its L = Q × O texts are the (question, option) pairs, question by question, the
//! options in the same order for every question; text *q·O + o* of image *k* matches when
//! option *o* is the right answer to question *q* about image *k*, and its score is the
//! model's log-probability of that answer (a generative model, asked the question). So each
//! image's row has one match per question, which gives Q and O.
//!
//! A cell (image *k*, question *q*) is right when the right option scores strictly above the
//! question's other options (a tie is a miss: the official code extracts one answer from a
//! generated reply, so it has no tie to break). Per item:
//! - `g_acc`: every cell right (NaturalBench's G-Acc);
//! - `q0_acc`, `q1_acc`: question 0 (1) right on every image; `i0_acc`, `i1_acc`: image 0 (1)
//!   right on every question; `q0_i0` … `q1_i1`: each cell — on the items that have them.
//!
//! Derived, as the official code pools them (every NaturalBench item has 2 images and 2
//! questions, so the mean of the per-question means is the pooled mean): `q_acc` (Q-Acc),
//! `i_acc` (I-Acc) and `acc` (Acc, every answer).

use super::{Family, FamilyFacts, ItemView, MetricFamily, Ties, ValueRows};
use crate::{Result, ScoreTensor, Truth};

/// What separates a question from its answer option in the text a loader makes of the pair
/// ([`asked`]): the ASCII unit separator, which no caption or question holds (loaders refuse it
/// in their texts).
pub const OPTION_SEPARATOR: char = '\u{1f}';

/// The text of `question` asked with `option` as its answer, as items of this family hold it
/// and generative models read it back ([`split_asked`]).
pub fn asked(question: &str, option: &str) -> String {
    format!("{question}{OPTION_SEPARATOR}{option}")
}

/// The question and the answer option of a text made by [`asked`]; `None` for any other text.
pub fn split_asked(text: &str) -> Option<(&str, &str)> {
    text.split_once(OPTION_SEPARATOR)
}

/// Names of the per-item metrics, then the derived ones.
pub const NAMES: [&str; 12] =
    ["g_acc", "q0_acc", "q1_acc", "i0_acc", "i1_acc", "q0_i0", "q0_i1", "q1_i0", "q1_i1", "q_acc", "i_acc", "acc"];

const PER_ITEM: usize = 9;

pub(crate) struct Answers;

/// The family, as [`super::FAMILIES`] lists it.
pub const FAMILY: MetricFamily = MetricFamily::declare(&Answers);

const FACTS: FamilyFacts = FamilyFacts {
    derived: &["q_acc", "i_acc", "acc"],
    asks_questions: true,
    ..FamilyFacts::new("answers", "NaturalBench's Q-Acc, I-Acc, G-Acc and Acc: answer options chosen", "g_acc")
};

impl Family for Answers {
    fn facts(&self) -> &'static FamilyFacts {
        &FACTS
    }

    fn names(&self) -> &'static [&'static str] {
        &NAMES[..PER_ITEM]
    }

    fn derive(&self, values: &mut [Option<f64>]) {
        let mean = |slice: &[Option<f64>]| -> Option<f64> {
            let present: Vec<f64> = slice.iter().copied().collect::<Option<Vec<f64>>>()?;
            (!present.is_empty()).then(|| present.iter().sum::<f64>() / present.len() as f64)
        };
        if values.len() == NAMES.len() {
            let (q, i, cells) = (mean(&values[1..3]), mean(&values[3..5]), mean(&values[5..9]));
            values[9] = q;
            values[10] = i;
            values[11] = cells;
        }
    }

    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>], _ties: Ties) -> Result<ValueRows> {
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let matrix = scores.item(i);
                // An item of another shape (one a manifest's `[item.answers]` never makes)
                // has none of these metrics.
                let Some(layout) = Layout::of(item.truth) else { return Ok(vec![None; PER_ITEM]) };
                // right[k][q]: image k's answer to question q.
                let right: Vec<Vec<bool>> = (0..item.truth.images())
                    .map(|k| {
                        (0..layout.questions)
                            .map(|q| layout.chosen_right(item.truth, k, q, |l| matrix.get(k, l)))
                            .collect()
                    })
                    .collect();
                let cell =
                    |k: usize, q: usize| right.get(k).and_then(|row| row.get(q)).map(|&r| f64::from(u8::from(r)));
                let all = |cells: &mut dyn Iterator<Item = Option<f64>>| -> Option<f64> {
                    let cells: Vec<f64> = cells.collect::<Option<Vec<f64>>>()?;
                    (!cells.is_empty()).then(|| f64::from(u8::from(cells.iter().all(|&c| c == 1.0))))
                };
                let images = right.len();
                Ok(vec![
                    all(&mut right.iter().flatten().map(|&r| Some(f64::from(u8::from(r))))),
                    (layout.questions > 0).then(|| all(&mut (0..images).map(|k| cell(k, 0)))).flatten(),
                    (layout.questions > 1).then(|| all(&mut (0..images).map(|k| cell(k, 1)))).flatten(),
                    (images > 0).then(|| all(&mut (0..layout.questions).map(|q| cell(0, q)))).flatten(),
                    (images > 1).then(|| all(&mut (0..layout.questions).map(|q| cell(1, q)))).flatten(),
                    cell(0, 0),
                    cell(1, 0),
                    cell(0, 1),
                    cell(1, 1),
                ])
            })
            .collect()
    }
}

/// How an item's texts group into questions: `questions` × `options`.
struct Layout {
    questions: usize,
    options: usize,
}

impl Layout {
    /// The layout the truth implies: every image's row matches once per question, the same
    /// number of times in every row, and once in each question's block of options.
    fn of(truth: &Truth) -> Option<Self> {
        let (images, texts) = (truth.images(), truth.texts());
        let questions = (0..texts).filter(|&l| truth.is_match(0, l)).count();
        if images == 0 || questions == 0 || texts % questions != 0 {
            return None;
        }
        let options = texts / questions;
        let one_right =
            |k: usize, q: usize| (q * options..(q + 1) * options).filter(|&l| truth.is_match(k, l)).count() == 1;
        (0..images).all(|k| (0..questions).all(|q| one_right(k, q))).then_some(Layout { questions, options })
    }

    /// Whether image `k`'s right option to question `q` scores strictly above the others.
    fn chosen_right(&self, truth: &Truth, k: usize, q: usize, score: impl Fn(usize) -> f64) -> bool {
        let block = q * self.options..(q + 1) * self.options;
        let Some(right) = block.clone().find(|&l| truth.is_match(k, l)) else { return false };
        block.filter(|&l| l != right).all(|l| score(right) > score(l))
    }
}
