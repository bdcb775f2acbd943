//! Winoground's text, image and group score asked as questions: VisMin's VQA form (Awal et
//! al., "VisMin: Visual Minimal-Change Understanding", NeurIPS 2024,
//! <https://arxiv.org/abs/2407.16772>; official code: `get_item_mllm` of
//! `evals/dataset_zoo/dataset.py`, scored by `compute_mllm_score_itg` of `evals/metrics/itm.py`
//! and `compute_vqa_accuracy` of `vismin-bench/metric.py`, <https://github.com/rabiulcste/vismin>).
//!
//! An item's texts are questions with answer options, as in [`super::answers`] (the same
//! layout: blocks of one question's options, each image asked some questions, one right option
//! each). Its K candidates are the images one by one, then last all of them shown together in
//! one prompt:
//! - the **text task**: each single image asked which caption it shows (VisMin: "Does this
//!   image best match: (A) …, or (B) …?", right A for the first image, B for the second);
//! - the **image task**: the images together asked, per caption, which image shows it
//!   ("Which image better aligns with the description: …? Choices: First, Second.").
//!
//! Per item: `text_score` every question asked of the single images answered right,
//! `image_score` every question asked of the images together, `group_score` both. An answer is
//! right when its option scores strictly above the question's other options: a tie is a miss.
//! The official code matches a generated reply against the right label alone, so a reply
//! naming both options is right there: [`Ties::Shared`] reproduces it on replies read by
//! that rule (a tie at the top counts unless nothing was found).

use super::answers::{all_right, Layout};
use super::{Family, FamilyFacts, ItemView, MetricFamily, Ties, ValueRows};
use crate::{Result, ScoreTensor};

/// Names of the per-item metrics.
pub const NAMES: [&str; 3] = ["text_score", "image_score", "group_score"];

pub(crate) struct AnsweredGroup;

/// The family, as [`super::FAMILIES`] lists it.
pub const FAMILY: MetricFamily = MetricFamily::declare(&AnsweredGroup);

const FACTS: FamilyFacts = FamilyFacts {
    asks_questions: true,
    ..FamilyFacts::new(
        "answered_group",
        "VisMin's VQA text, image and group score: each image asked for its caption, the images together for each caption's image",
        "group_score",
    )
};

impl Family for AnsweredGroup {
    fn facts(&self) -> &'static FamilyFacts {
        &FACTS
    }

    fn names(&self) -> &'static [&'static str] {
        &NAMES
    }

    fn values(&self, scores: &ScoreTensor, items: &[ItemView<'_>], ties: Ties) -> Result<ValueRows> {
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let images = item.truth.images();
                let Some(right) = Layout::of(item.truth)
                    .filter(|_| images >= 2)
                    .map(|l| l.right_answers(item.truth, scores, i, ties))
                else {
                    return Ok(vec![None; NAMES.len()]);
                };
                let (singles, together) = right.split_at(images - 1);
                let text = all_right(singles.iter().flatten().copied());
                let image = all_right(together.iter().flatten().copied());
                let group = text.zip(image).map(|(t, i)| t.min(i));
                Ok(vec![text, image, group])
            })
            .collect()
    }
}
