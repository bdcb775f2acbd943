//! Questions answered by choosing one of a few options: NaturalBench's VQA scores (Li et al.,
//! "NaturalBench: Evaluating Vision-Language Models on Natural Adversarial Samples", NeurIPS
//! 2024 Datasets and Benchmarks, <https://arxiv.org/abs/2410.14669>; official code:
//! `get_scores` in the evaluation example of <https://github.com/Baiqi-Li/NaturalBench>).
//!
//! An item asks Q questions of its K images (NaturalBench: every question of every image;
//! a truth may leave some cells unasked, [`Truth::is_asked`]); every question has the same
//! number O of answer options. Its L = Q × O texts are the (question, option) pairs, question
//! by question; text *q·O + o* of image *k* matches when option *o* is the right answer to
//! question *q* about image *k*, and its score is the model's log-probability of that answer
//! (a generative model, asked the question). So each image's row has one match per question
//! asked of it, which gives Q and O.
//!
//! A cell (image *k*, question *q*) is right when the right option scores strictly above the
//! question's other options (a tie is a miss: the official code extracts one answer from a
//! generated reply, so it has no tie to break); under [`Ties::Shared`] when no other option
//! scores above it and its probability is not zero (VisMin's reading of a generated reply,
//! which may name both options). Per item, over the cells asked:
//! - `g_acc`: every cell right (NaturalBench's G-Acc);
//! - `q0_acc`, `q1_acc`: question 0 (1) right on every image; `i0_acc`, `i1_acc`: image 0 (1)
//!   right on every question; `q0_i0` … `q1_i1`: each cell — on the items that have them.
//!
//! Derived, as the official code pools them (every NaturalBench item has 2 images and 2
//! questions, so the mean of the per-question means is the pooled mean): `q_acc` (Q-Acc),
//! `i_acc` (I-Acc) and `acc` (Acc, every answer).

use super::{Family, FamilyFacts, ItemView, MetricFamily, Ties, ValueRows};
use crate::{Result, ScoreTensor, Truth, LOG_ZERO};

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

    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>], ties: Ties) -> Result<ValueRows> {
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                // An item of another shape (one a manifest's `[item.answers]` never makes)
                // has none of these metrics.
                let Some(right) = Layout::of(item.truth).map(|l| l.right_answers(item.truth, scores, i, ties)) else {
                    return Ok(vec![None; PER_ITEM]);
                };
                let cell = |k: usize, q: usize| right.get(k).and_then(|row| row.get(q).copied().flatten());
                let images = right.len();
                let questions = right.first().map_or(0, Vec::len);
                Ok(vec![
                    all_right(right.iter().flatten().copied()),
                    (questions > 0).then(|| all_right((0..images).map(|k| cell(k, 0)))).flatten(),
                    (questions > 1).then(|| all_right((0..images).map(|k| cell(k, 1)))).flatten(),
                    (images > 0).then(|| all_right((0..questions).map(|q| cell(0, q)))).flatten(),
                    (images > 1).then(|| all_right((0..questions).map(|q| cell(1, q)))).flatten(),
                    cell(0, 0).map(one),
                    cell(1, 0).map(one),
                    cell(0, 1).map(one),
                    cell(1, 1).map(one),
                ])
            })
            .collect()
    }
}

fn one(right: bool) -> f64 {
    f64::from(u8::from(right))
}

/// 1 when every asked cell of `cells` (`None`: not asked) was answered right, 0 when one was
/// not; `None` when none was asked.
pub(super) fn all_right(cells: impl Iterator<Item = Option<bool>>) -> Option<f64> {
    let mut asked = cells.flatten().peekable();
    asked.peek()?;
    Some(one(asked.all(|right| right)))
}

/// How an item's texts group into questions: `questions` × `options`, each question asked of
/// the images whose cells of its block the truth asks.
pub(super) struct Layout {
    questions: usize,
    options: usize,
}

impl Layout {
    /// The layout the truth implies: texts in blocks of one question's options, the same
    /// number of options for every question; each image either not asked a question (no cell
    /// of its block asked) or asked it with exactly one right option.
    pub(super) fn of(truth: &Truth) -> Option<Self> {
        let (images, texts) = (truth.images(), truth.texts());
        let count = |f: &dyn Fn(usize) -> bool| (0..texts).filter(|&l| f(l)).count();
        // The first image asked anything gives the number of options.
        let (asked, matches) = (0..images)
            .map(|k| (count(&|l| truth.is_asked(k, l)), count(&|l| truth.is_match(k, l))))
            .find(|&(asked, _)| asked > 0)?;
        if matches == 0 || asked % matches != 0 || texts % (asked / matches) != 0 {
            return None;
        }
        let options = asked / matches;
        let layout = Layout { questions: texts / options, options };
        let fits = |k: usize, q: usize| {
            let block = layout.block(q);
            let asked = block.clone().filter(|&l| truth.is_asked(k, l)).count();
            let right = block.filter(|&l| truth.is_match(k, l)).count();
            (asked == 0 && right == 0) || (asked == options && right == 1)
        };
        (0..images).all(|k| (0..layout.questions).all(|q| fits(k, q))).then_some(layout)
    }

    fn block(&self, q: usize) -> std::ops::Range<usize> {
        q * self.options..(q + 1) * self.options
    }

    /// right[k][q]: whether image `k`'s right option to question `q` scores strictly above
    /// the question's other options (under [`Ties::Shared`]: no other above it, and above
    /// [`LOG_ZERO`]); `None` where the question is not asked of the image.
    pub(super) fn right_answers(
        &self,
        truth: &Truth,
        scores: &ScoreTensor,
        item: usize,
        ties: Ties,
    ) -> Vec<Vec<Option<bool>>> {
        let matrix = scores.item(item);
        let beats = |right: f64, other: f64| match ties {
            Ties::Shared => right >= other && right > LOG_ZERO,
            Ties::Strict | Ties::First => right > other,
        };
        (0..truth.images())
            .map(|k| {
                (0..self.questions)
                    .map(|q| {
                        let right = self.block(q).find(|&l| truth.is_match(k, l))?;
                        Some(
                            self.block(q)
                                .filter(|&l| l != right)
                                .all(|l| beats(matrix.get(k, right), matrix.get(k, l))),
                        )
                    })
                    .collect()
            })
            .collect()
    }
}
