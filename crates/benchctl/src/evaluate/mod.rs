//! `benchctl eval` from its plan to a finished [`Evaluation`]: [`items`] for K×L item suites,
//! [`galleries`] for retrieval galleries (RoCOCO). Both open one [`crate::session::Session`]
//! and end in its [`crate::record::RunBuilder`].

pub mod galleries;
pub mod items;

use benchctl_scoring::metrics::Ties;

use benchctl_models::vqascore::endpoint::AnswerRule;
use benchctl_suites::ReplyReading;

use crate::plan::{EvalPlan, ModelSource};
use crate::record::Evaluation;
use crate::{Error, ErrorKind, Result};

/// Runs `benchctl eval` up to, not including, storing the run.
pub fn run(plan: &EvalPlan) -> Result<Evaluation> {
    let ties = tie_rule(&plan.suite, plan.options.ties.unwrap_or_else(|| official_ties(plan)))?;
    match plan.suite.kind {
        benchctl_suites::SuiteKind::Galleries if plan.options.shard.is_some() => Err(Error::new(
            ErrorKind::Usage,
            format!(
                "use --shard on {}: a retrieval gallery ranks every query against the whole gallery, so its items cannot be scored apart; run it unsharded",
                plan.suite.id
            ),
        )),
        benchctl_suites::SuiteKind::Galleries => galleries::run(plan, ties),
        _ => items::run(plan, ties),
    }
}

/// The tie rule of a run that names none: `shared` where generated replies are read
/// by a suite whose official reader credits a reply naming several options (VisMin's
/// `is_match_with_label`), else `strict`.
fn official_ties(plan: &EvalPlan) -> Ties {
    let generates = match &plan.model.source {
        ModelSource::Endpoint(e) => e.settings.answer_rule == AnswerRule::Generate,
        _ => plan.model.answer_rule == AnswerRule::Generate,
    };
    if generates && plan.suite.reply_reading() == ReplyReading::LabelInReply {
        Ties::Shared
    } else {
        Ties::Strict
    }
}

/// The tie rule a run asked for, refused (a usage error) for a suite whose official scorer
/// compares strictly: there `first` would reproduce nothing and only reward candidate order;
/// and `shared` for a suite without answer options.
pub fn tie_rule(suite: &benchctl_suites::SuiteInfo, asked: Ties) -> Result<Ties> {
    if asked == Ties::Shared && !suite.summary().is_some_and(|s| s.family.facts().asks_questions) {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "use --ties shared on {}: it is for questions with answer options (an option tied at the top counts), and {} has none",
                suite.id, suite.id
            ),
        ));
    }
    if asked == Ties::First && suite.official_ties != Ties::First {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "use --ties first on {}: its official scorer compares strictly (a tie is a miss), so only strict reproduces it; --ties first is for suites whose official scorer takes an argmax or a ranking: {}",
                suite.id,
                first_of_ties_suites().join(", ")
            ),
        ));
    }
    Ok(asked)
}

/// Every suite whose official scorer counts the first of tied candidates (built in or a
/// bundled manifest with `ties = "first"`).
fn first_of_ties_suites() -> Vec<String> {
    benchctl_suites::all().into_iter().filter(|s| s.official_ties == Ties::First).map(|s| s.id.into_owned()).collect()
}
