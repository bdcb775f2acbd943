//! `[item.answers]`: items whose texts are questions with answer options, as VQA benchmarks
//! (NaturalBench) publish them, for the `answers` metric family
//! ([`benchctl_scoring::metrics::answers`]).
//!
//! ```toml
//! [item.answers]
//! questions = ["{Question_0}", "{Question_1}"]      # asked of every image, as written
//! options = ["Yes", "No"]                            # every question's answer options
//! right = [["{Image_0_Question_0}", "{Image_0_Question_1}"],   # image 0's right option per question
//!          ["{Image_1_Question_0}", "{Image_1_Question_1}"]]
//! ```
//!
//! An item's texts are then each question with each option, question by question (Q × O
//! texts, made by [`answers::asked`]); text *q·O + o* matches image *k* when option *o* is
//! `right[k][q]`. A generative model scores each by its log-probability of the option.

use benchctl_scoring::metrics::answers;
use benchctl_scoring::Truth;
use toml::Spanned;

use super::template::{Record, Template};
use super::{Context, Keyed};
use crate::{Error, Result};

/// `[item.answers]` as TOML gives it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAnswers {
    questions: Spanned<Vec<Spanned<String>>>,
    options: Spanned<Vec<Spanned<String>>>,
    right: Spanned<Vec<Spanned<Vec<Spanned<String>>>>>,
}

/// `[item.answers]`, checked.
#[derive(Debug)]
pub(super) struct AnswerSpec {
    questions: Vec<Keyed<Template>>,
    options: Vec<Keyed<Template>>,
    /// Per image, per question: the right option.
    right: Vec<Vec<Keyed<Template>>>,
}

impl AnswerSpec {
    pub fn parse(raw: &RawAnswers, cx: &Context<'_>) -> Result<Self> {
        let list = |key: &str, items: &Spanned<Vec<Spanned<String>>>| -> Result<Vec<Keyed<Template>>> {
            if items.get_ref().is_empty() {
                return Err(cx.bad(key, cx.line(items.span()), "lists nothing".into()));
            }
            items.get_ref().iter().enumerate().map(|(i, t)| cx.template(&format!("{key}[{i}]"), t)).collect()
        };
        let questions = list("item.answers.questions", &raw.questions)?;
        let options = list("item.answers.options", &raw.options)?;
        if options.len() < 2 {
            let line = cx.line(raw.options.span());
            return Err(cx.bad(
                "item.answers.options",
                line,
                "a question needs at least two options to choose from".into(),
            ));
        }
        if raw.right.get_ref().is_empty() {
            return Err(cx.bad("item.answers.right", cx.line(raw.right.span()), "lists no image".into()));
        }
        let mut right = Vec::new();
        for (k, row) in raw.right.get_ref().iter().enumerate() {
            let key = format!("item.answers.right[{k}]");
            if row.get_ref().len() != questions.len() {
                let what = format!(
                    "gives {} answer(s) for {} question(s): one right option per question",
                    row.get_ref().len(),
                    questions.len()
                );
                return Err(cx.bad(&key, cx.line(row.span()), what));
            }
            right.push(
                row.get_ref()
                    .iter()
                    .enumerate()
                    .map(|(q, t)| cx.template(&format!("{key}[{q}]"), t))
                    .collect::<Result<_>>()?,
            );
        }
        Ok(AnswerSpec { questions, options, right })
    }

    /// A record's texts (each question with each option) and truth, for an item of `images`
    /// images; `fail` names the key of a problem.
    pub fn texts_and_truth(
        &self,
        record: &Record<'_>,
        images: usize,
        fail: &dyn Fn(String, String) -> Error,
    ) -> Result<(Vec<String>, Truth)> {
        let render = |t: &Keyed<Template>| -> Result<String> {
            let text = t.value.render(record).map_err(|e| fail(t.named(), e.to_string()))?;
            if text.contains(answers::OPTION_SEPARATOR) {
                return Err(fail(
                    t.named(),
                    "holds the control character U+001F, which no question or answer may".into(),
                ));
            }
            Ok(text)
        };
        if images != self.right.len() {
            return Err(fail(
                "`item.answers.right`".into(),
                format!("gives right answers for {} image(s), and the item has {images}", self.right.len()),
            ));
        }
        let questions: Vec<String> = self.questions.iter().map(render).collect::<Result<_>>()?;
        let options: Vec<String> = self.options.iter().map(render).collect::<Result<_>>()?;
        if let Some((o, dup)) = options.iter().enumerate().find(|(o, opt)| options[..*o].contains(opt)) {
            return Err(fail(self.options[o].named(), format!("gives the option {dup:?} twice")));
        }
        let mut texts = Vec::with_capacity(questions.len() * options.len());
        for question in &questions {
            texts.extend(options.iter().map(|option| answers::asked(question, option)));
        }
        let width = texts.len();
        let mut matches = vec![false; images * width];
        for (k, row) in self.right.iter().enumerate() {
            for (q, template) in row.iter().enumerate() {
                let answer = render(template)?;
                let o = options.iter().position(|option| option.trim() == answer.trim()).ok_or_else(|| {
                    fail(template.named(), format!("the right answer {answer:?} is none of the options {options:?}"))
                })?;
                matches[k * width + q * options.len() + o] = true;
            }
        }
        let truth = Truth::new(images, width, matches).map_err(|e| fail("`item.answers`".into(), e.to_string()))?;
        Ok((texts, truth))
    }
}
