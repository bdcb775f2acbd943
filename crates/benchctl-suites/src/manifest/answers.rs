//! `[item.answers]`: items whose texts are questions with answer options, as VQA benchmarks
//! (NaturalBench, VisMin's VQA form) publish them, for the metric families that choose an
//! option ([`benchctl_scoring::metrics::answers`], [`benchctl_scoring::metrics::answered_group`]).
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
//!
//! Where questions differ in their options, `options` lists each question's (as many for every
//! question); where a question is asked of some images only, `asked_of` lists, per question,
//! the images it is asked of, and `right[k]` gives image *k*'s right option to each question
//! asked of it, in question order. The cells of a question not asked of an image are not
//! scored ([`Truth::is_asked`]).
//!
//! `reply` says how the official code reads a generated reply for an option, for runs that
//! generate (`--answer-rule generate`): `first-found` (the default) or `label-in-reply`
//! ([`ReplyReading`]).

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
    /// Every question's options (a list of texts), or each question's (a list of lists).
    options: Spanned<toml::Value>,
    #[serde(default)]
    asked_of: Option<Spanned<Vec<Vec<usize>>>>,
    right: Spanned<Vec<Spanned<Vec<Spanned<String>>>>>,
    #[serde(default)]
    reply: Option<Spanned<String>>,
}

/// How a generated reply is read for one answer option, as the suite's official code reads
/// its replies (`item.answers.reply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplyReading {
    /// NaturalBench's `extract_answer`: the option and its opposite are looked for as whole
    /// words, and the one found first is the answer (at most one option is read).
    #[default]
    FirstFound,
    /// VisMin's `is_match_with_label`: the option is named in the reply once both are
    /// normalised, whatever else the reply names (a reply may name both options).
    LabelInReply,
}

impl ReplyReading {
    /// The names manifests and run records use, in the order of the variants.
    pub const NAMES: [&'static str; 2] = ["first-found", "label-in-reply"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [ReplyReading::FirstFound, ReplyReading::LabelInReply].into_iter().find(|r| r.name() == name)
    }
}

/// `[item.answers]`, checked.
#[derive(Debug)]
pub(super) struct AnswerSpec {
    questions: Vec<Keyed<Template>>,
    /// Per question, its options (all the same number).
    options: Vec<Vec<Keyed<Template>>>,
    /// Per question, the images it is asked of; `None`: every image.
    asked_of: Option<Vec<Vec<usize>>>,
    /// Per image, per question asked of it: the right option.
    right: Vec<Vec<Keyed<Template>>>,
    /// How a generated reply is read.
    pub reply: ReplyReading,
}

impl AnswerSpec {
    pub fn parse(raw: &RawAnswers, cx: &Context<'_>) -> Result<Self> {
        let questions_line = cx.line(raw.questions.span());
        if raw.questions.get_ref().is_empty() {
            return Err(cx.bad("item.answers.questions", questions_line, "lists nothing".into()));
        }
        let questions: Vec<Keyed<Template>> = (raw.questions.get_ref().iter().enumerate())
            .map(|(i, t)| cx.template(&format!("item.answers.questions[{i}]"), t))
            .collect::<Result<_>>()?;
        let options = options(&raw.options, questions.len(), cx)?;
        let asked_of = match &raw.asked_of {
            Some(lists) if lists.get_ref().len() != questions.len() => {
                let what = format!(
                    "lists images for {} question(s), and there are {}",
                    lists.get_ref().len(),
                    questions.len()
                );
                return Err(cx.bad("item.answers.asked_of", cx.line(lists.span()), what));
            }
            Some(lists) => Some(lists.get_ref().clone()),
            None => None,
        };
        if raw.right.get_ref().is_empty() {
            return Err(cx.bad("item.answers.right", cx.line(raw.right.span()), "lists no image".into()));
        }
        let mut right = Vec::new();
        for (k, row) in raw.right.get_ref().iter().enumerate() {
            let key = format!("item.answers.right[{k}]");
            let asked =
                asked_of.as_ref().map_or(questions.len(), |lists| lists.iter().filter(|l| l.contains(&k)).count());
            if row.get_ref().len() != asked {
                let what = format!(
                    "gives {} answer(s) for the {asked} question(s) asked of image {k}: one right option per question",
                    row.get_ref().len()
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
        if let Some(k) = asked_of.iter().flatten().flatten().find(|&&k| k >= right.len()) {
            let line = raw.asked_of.as_ref().map_or(questions_line, |l| cx.line(l.span()));
            let what = format!("names image {k}, and `item.answers.right` lists {} image(s)", right.len());
            return Err(cx.bad("item.answers.asked_of", line, what));
        }
        let reply = match &raw.reply {
            None => ReplyReading::default(),
            Some(name) => ReplyReading::from_name(name.get_ref()).ok_or_else(|| {
                let what = format!("is {:?}: it is one of {}", name.get_ref(), ReplyReading::NAMES.join(", "));
                cx.bad("item.answers.reply", cx.line(name.span()), what)
            })?,
        };
        Ok(AnswerSpec { questions, options, asked_of, right, reply })
    }

    /// Whether question `q` is asked of image `k`.
    fn asks(&self, k: usize, q: usize) -> bool {
        self.asked_of.as_ref().is_none_or(|lists| lists[q].contains(&k))
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
        let options: Vec<Vec<String>> =
            self.options.iter().map(|each| each.iter().map(render).collect()).collect::<Result<_>>()?;
        for (q, each) in options.iter().enumerate() {
            if let Some((o, dup)) = each.iter().enumerate().find(|(o, opt)| each[..*o].contains(opt)) {
                return Err(fail(self.options[q][o].named(), format!("gives the option {dup:?} twice")));
            }
        }
        let per_question = options[0].len();
        let mut texts = Vec::with_capacity(questions.len() * per_question);
        for (question, each) in questions.iter().zip(&options) {
            texts.extend(each.iter().map(|option| answers::asked(question, option)));
        }
        let width = texts.len();
        let mut matches = vec![false; images * width];
        let mut asked = vec![true; images * width];
        for (k, row) in self.right.iter().enumerate() {
            let mut answers = row.iter();
            for (q, each) in options.iter().enumerate() {
                let block = k * width + q * per_question..k * width + (q + 1) * per_question;
                let Some(template) = self.asks(k, q).then(|| answers.next()).flatten() else {
                    asked[block].fill(false);
                    continue;
                };
                let answer = render(template)?;
                let o = each.iter().position(|option| option.trim() == answer.trim()).ok_or_else(|| {
                    fail(template.named(), format!("the right answer {answer:?} is none of the options {each:?}"))
                })?;
                matches[block.start + o] = true;
            }
        }
        let truth = Truth::with_asked(images, width, matches, asked)
            .map_err(|e| fail("`item.answers`".into(), e.to_string()))?;
        Ok((texts, truth))
    }
}

/// `item.answers.options`: a list of texts (every question's options) or a list of lists (each
/// question's), each of two or more options, as many for every question.
fn options(raw: &Spanned<toml::Value>, questions: usize, cx: &Context<'_>) -> Result<Vec<Vec<Keyed<Template>>>> {
    let (key, line) = ("item.answers.options", cx.line(raw.span()));
    let bad = |what: String| cx.bad(key, line, what);
    let texts = |list: &toml::Value, at: &str| -> Result<Vec<Keyed<Template>>> {
        let list = list.as_array().ok_or_else(|| bad(format!("{at} must be a list of option texts")))?;
        if list.len() < 2 {
            return Err(bad(format!(
                "{at} gives {} option(s): a question needs at least two to choose from",
                list.len()
            )));
        }
        (list.iter().enumerate())
            .map(|(o, option)| {
                let text = option.as_str().ok_or_else(|| bad(format!("{at}[{o}] must be text")))?;
                let value = Template::parse(text).map_err(|e| bad(e.to_string()))?;
                Ok(Keyed { value, key: format!("{key}{at}[{o}]"), line })
            })
            .collect()
    };
    let list = raw.get_ref().as_array().ok_or_else(|| bad("must be a list".into()))?;
    if !list.iter().any(toml::Value::is_array) {
        let shared = texts(raw.get_ref(), "")?;
        return Ok(vec![shared; questions]);
    }
    if list.len() != questions {
        return Err(bad(format!("lists options for {} question(s), and there are {questions}", list.len())));
    }
    let each: Vec<Vec<Keyed<Template>>> =
        list.iter().enumerate().map(|(q, l)| texts(l, &format!("[{q}]"))).collect::<Result<_>>()?;
    if let Some(q) = each.iter().position(|o| o.len() != each[0].len()) {
        return Err(bad(format!(
            "gives question {q} {} options and question 0 {}: every question has as many",
            each[q].len(),
            each[0].len()
        )));
    }
    Ok(each)
}
