//! VQAScore: a generative vision-language model's probability of answering "Yes" when asked
//! whether an image shows a caption.
//!
//! - Paper: Lin et al., 2024, *Evaluating Text-to-Visual Generation with Image-to-Text
//!   Generation*, <https://arxiv.org/abs/2404.01291>.
//! - Reference code: `t2v_metrics` (<https://github.com/linzhiqiu/t2v_metrics>), whose question
//!   and answer templates are the defaults here ([`Template::T2V_METRICS`]).
//!
//! The score of a pair is `log P(answer)`, stored as [`crate::ScoreKind::LogProbability`]:
//! probabilities that round to 1.0 in f32 would tie, their logs do not.
//!
//! - [`local`]: the score computed here, on a generative model's own weights (one scoring
//!   loop for every family of [`crate::models`] that implements [`local::LocalVqa`]);
//! - [`endpoint`]: the score through any OpenAI-compatible chat-completions server that
//!   returns log-probabilities (vLLM, SGLang, llama.cpp's server), read from the first
//!   generated token's top log-probabilities as `t2v_metrics`' API models read them;
//! - [`generate`]: replies generated here and read by a suite's official rule
//!   ([`AnswerRule::Generate`]), for the benchmarks whose official numbers come from them.

pub mod endpoint;
pub mod generate;
pub mod local;
pub mod reply;

use benchctl_scoring::metrics::answers;

use crate::{Error, ErrorKind, Result};

pub use benchctl_scoring::LOG_ZERO;

/// The question asked about each (image, caption) pair and the answer whose probability is
/// the score, both as Python's `str.format` reads them with the caption as the one argument
/// (`{}` is the caption, `{{` and `}}` are braces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    question: String,
    answer: String,
}

impl Template {
    /// `t2v_metrics`' defaults for every VQAScore model.
    pub const T2V_METRICS: (&'static str, &'static str) =
        ("Does this figure show \"{}\"? Please answer Yes or No.", "Yes");

    /// A template; the question must hold the caption's `{}` exactly once.
    pub fn new(question: &str, answer: &str) -> Result<Self> {
        let fields = |template: &str, what: &str| {
            fill(template, "")
                .map(|(_, fields)| fields)
                .map_err(|e| Error::new(ErrorKind::BadConfig, format!("use the {what} template {template:?}: {e}")))
        };
        if fields(question, "question")? != 1 {
            return Err(Error::new(
                ErrorKind::BadConfig,
                format!("use the question template {question:?}: it must hold the caption's `{{}}` exactly once"),
            ));
        }
        fields(answer, "answer")?;
        if answer.trim().is_empty() {
            return Err(Error::new(ErrorKind::BadConfig, "use an empty answer template: the score is its probability"));
        }
        Ok(Self { question: question.to_string(), answer: answer.to_string() })
    }

    pub fn t2v_metrics() -> Self {
        let (question, answer) = Self::T2V_METRICS;
        Self { question: question.into(), answer: answer.into() }
    }

    /// The question about `caption`. A text that is a question with an answer option (a
    /// suite of [`benchctl_scoring::metrics::answers`]) is asked as written.
    pub fn question_for(&self, caption: &str) -> String {
        if let Some((question, _)) = answers::split_asked(caption) {
            return question.to_string();
        }
        fill(&self.question, caption).map(|(text, _)| text).unwrap_or_default()
    }

    /// The answer whose probability is scored, for `caption`: a question's answer option
    /// where the text holds one.
    pub fn answer_for(&self, caption: &str) -> String {
        if let Some((_, option)) = answers::split_asked(caption) {
            return option.to_string();
        }
        fill(&self.answer, caption).map(|(text, _)| text).unwrap_or_default()
    }

    pub fn question(&self) -> &str {
        &self.question
    }

    pub fn answer(&self) -> &str {
        &self.answer
    }
}

/// `template.format(caption)` as Python computes it for a template of `{}` fields only, and
/// the number of fields; any other field is an error (Python's would need arguments
/// `t2v_metrics` never passes).
fn fill(template: &str, caption: &str) -> std::result::Result<(String, usize), String> {
    let mut out = String::with_capacity(template.len() + caption.len());
    let mut fields = 0;
    let mut chars = template.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match (c, chars.peek().map(|&(_, next)| next)) {
            ('{', Some('{')) | ('}', Some('}')) => {
                out.push(c);
                chars.next();
            }
            ('{', Some('}')) => {
                out.push_str(caption);
                fields += 1;
                chars.next();
            }
            ('{', _) => return Err(format!("the field at byte {at} is not `{{}}` (write `{{{{` for a brace)")),
            ('}', _) => return Err(format!("the `}}` at byte {at} closes nothing (write `}}}}` for a brace)")),
            _ => out.push(c),
        }
    }
    Ok((out, fields))
}

/// How a model's answer gives the score, here or behind a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnswerRule {
    /// `log P(answer)`: here teacher-forced after the prompt; from a server, read from the
    /// first generated token's top log-probabilities (VQAScore's, and the choice between answer
    /// options by their log-probabilities).
    #[default]
    Logprobs,
    /// A reply generated greedily (temperature 0, at most [`GENERATED_TOKENS`] tokens), read for
    /// each answer option as the suite's official code reads replies ([`reply::ReplyReading`]).
    /// The score is 0 (`log 1`) when the reply gives the option, else [`LOG_ZERO`]. Here:
    /// [`generate`].
    Generate,
}

/// The longest reply generated under [`AnswerRule::Generate`] (NaturalBench's example
/// generates up to 128 new tokens).
pub const GENERATED_TOKENS: u32 = 128;

impl AnswerRule {
    /// The names the command line and run specs use, in the order of the variants.
    pub const NAMES: [&'static str; 2] = ["logprobs", "generate"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

impl std::str::FromStr for AnswerRule {
    type Err = Error;

    fn from_str(name: &str) -> Result<Self> {
        by_name(name, [AnswerRule::Logprobs, AnswerRule::Generate], Self::NAMES, "answer rule")
    }
}

/// The variant of `all` that `names` (in the same order) calls `name`, or an error naming the
/// setting (`what`) and its choices.
pub(crate) fn by_name<T: Copy, const N: usize>(name: &str, all: [T; N], names: [&str; N], what: &str) -> Result<T> {
    match names.iter().position(|n| *n == name) {
        Some(at) => Ok(all[at]),
        None => {
            Err(Error::new(ErrorKind::BadConfig, format!("use the {what} {name:?}: it is one of {}", names.join(", "))))
        }
    }
}

/// What the first generated token's top log-probabilities said about the answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reading {
    /// The answer was among them: `log P(answer)` as the model gave it.
    Answer(f64),
    /// Only its opposite ("No" for "Yes") was: `log(1 − P(opposite))`.
    Opposite(f64),
    /// Neither was: probability 0 as `t2v_metrics` scores it ([`LOG_ZERO`]).
    Neither,
}

impl Reading {
    /// The pair's score: `log P(answer)`, [`LOG_ZERO`] for a probability of zero.
    pub fn log_p(&self) -> f64 {
        let log_p = match *self {
            Reading::Answer(log_p) => log_p.min(0.0),
            // log(1 − e^x) without cancellation: ln(−expm1(x)).
            Reading::Opposite(log_p) => (-log_p.min(0.0).exp_m1()).ln(),
            Reading::Neither => LOG_ZERO,
        };
        if log_p.is_nan() {
            LOG_ZERO
        } else {
            log_p.max(LOG_ZERO)
        }
    }
}

/// The other of two answers: "no" for "yes", "b" for "a" and "a" for "b", "second" for
/// "first" and "first" for "second" (VisMin's image task), else "yes".
pub(crate) fn opposite(answer: &str) -> &'static str {
    match answer {
        "yes" => "no",
        "a" => "b",
        "b" => "a",
        "first" => "second",
        "second" => "first",
        _ => "yes",
    }
}

/// Reads `log P(answer)` from one token's top log-probabilities, `(token, logprob)` pairs, as
/// `t2v_metrics`' API models do: a token equal to the answer once stripped of white space and
/// lowercased gives it (the last such entry wins); failing that, one equal to the opposite
/// ("no" for "yes", else "yes"; between two answer options, "b" for "a" and "a" for "b", "second"
/// for "first" and "first" for "second") gives
/// `1 − P(opposite)`; failing both, probability 0.
pub fn read_top_logprobs<'t>(top: impl IntoIterator<Item = (&'t str, f64)>, answer: &str) -> Reading {
    let target = answer.trim().to_lowercase();
    let opposite = opposite(&target);
    let (mut answer_lp, mut opposite_lp) = (None, None);
    for (token, logprob) in top {
        let token = token.trim().to_lowercase();
        if token == target {
            answer_lp = Some(logprob);
        } else if token == opposite {
            opposite_lp = Some(logprob);
        }
    }
    match (answer_lp, opposite_lp) {
        (Some(lp), _) => Reading::Answer(lp),
        (None, Some(lp)) => Reading::Opposite(lp),
        (None, None) => Reading::Neither,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_as_python_format_does() -> Result<()> {
        let t = Template::t2v_metrics();
        assert_eq!(t.question_for("a dog"), "Does this figure show \"a dog\"? Please answer Yes or No.");
        let braces = Template::new("{{json}}: {}?", "Yes")?;
        assert_eq!(braces.question_for("x {} y"), "{json}: x {} y?");
        for bad in ["no field", "{} and {}", "{0}", "{caption}", "a } b {}"] {
            assert!(Template::new(bad, "Yes").is_err(), "{bad:?} is refused");
        }
        assert!(Template::new("{}", " ").is_err());
        Ok(())
    }

    #[test]
    fn the_answer_is_read_as_t2v_metrics_reads_it() {
        let yes = read_top_logprobs([(" No", -2.0), ("Yes", -0.2), ("yes ", -0.3)], "Yes");
        assert_eq!(yes, Reading::Answer(-0.3), "the last matching entry wins");
        let no = read_top_logprobs([("No", -0.1), ("Maybe", -3.0)], "Yes");
        assert_eq!(no, Reading::Opposite(-0.1));
        assert!((no.log_p() - (1.0 - (-0.1f64).exp()).ln()).abs() < 1e-12);
        assert_eq!(read_top_logprobs([("Maybe", -0.1)], "Yes").log_p(), LOG_ZERO);
        // "No" certain: P(yes) is 0, stored as the finite LOG_ZERO.
        assert_eq!(read_top_logprobs([("No", 0.0)], "Yes").log_p(), LOG_ZERO);
        // A tiny P(no) keeps its precision: log(1 − 1e-12) ≈ −1e-12, not 0.
        let near_one = read_top_logprobs([("No", (1e-12f64).ln())], "Yes").log_p();
        assert!((near_one + 1e-12).abs() < 1e-16, "{near_one}");
        let answer_no = read_top_logprobs([("yes", -0.5)], "No");
        assert_eq!(answer_no, Reading::Opposite(-0.5));
        // Between two options, each is the other's opposite.
        assert_eq!(read_top_logprobs([(" A", -0.2)], "B"), Reading::Opposite(-0.2));
        assert_eq!(read_top_logprobs([("b", -0.7)], "A"), Reading::Opposite(-0.7));
        assert_eq!(read_top_logprobs([("Second", -0.4), ("Yes", -0.1)], "First"), Reading::Opposite(-0.4));
        assert_eq!(read_top_logprobs([(" first", -0.3)], "Second"), Reading::Opposite(-0.3));
    }

    #[test]
    fn answer_rules_are_named_as_the_command_line_names_them() {
        for rule in [AnswerRule::Logprobs, AnswerRule::Generate] {
            assert_eq!(rule.name().parse::<AnswerRule>().ok(), Some(rule));
        }
        let refused = "sample".parse::<AnswerRule>().unwrap_err().to_string();
        assert!(refused.contains("answer rule \"sample\"") && refused.contains("logprobs, generate"), "{refused}");
    }

    #[test]
    fn a_question_with_an_answer_option_is_asked_as_written() {
        let asked = answers::asked("Is the cup red? Please answer Yes or No.", "No");
        let t = Template::t2v_metrics();
        assert_eq!(t.question_for(&asked), "Is the cup red? Please answer Yes or No.");
        assert_eq!(t.answer_for(&asked), "No");
        assert_eq!(t.answer_for("a dog"), "Yes");
    }
}
