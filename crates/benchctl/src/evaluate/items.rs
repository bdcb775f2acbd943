//! Item suites (Winoground, EqBen, VALSE, SPEC), one stage after another: the suite →
//! a [`Session`] (model resolved, caches open) → its unique inputs and their keys
//! ([`SuiteInputs`]) → the `N × K × L` score tensor ([`crate::encode::scores`]) → metrics and
//! the run record ([`crate::record::RunBuilder::finish_items`]); `--shard i/n` evaluates a
//! slice.

use benchctl_scoring::metrics::Ties;
use benchctl_suites::Suite;

use crate::encode::scores::item_scores;
use crate::inputs::SuiteInputs;
use crate::plan::EvalPlan;
use crate::record::{Evaluation, Outcome};
use crate::session::Session;
use crate::{Error, ErrorKind, Result};

/// Evaluates an item suite under tie rule `ties`, up to, not including, storing the run.
pub fn run(plan: &EvalPlan, ties: Ties) -> Result<Evaluation> {
    let whole = load_suite(plan, ties)?;
    let mut session = Session::open(plan)?;
    let inputs = SuiteInputs::of(&whole, &mut session)?;
    let (scores, replies) = item_scores(&mut session, &inputs)?;
    let fingerprints = [inputs.data_fingerprint.as_str(), inputs.image_fingerprint.as_str()];
    let run = session.run.finish_items(inputs.suite(), &whole, &scores, fingerprints, &|e| inputs.embedded_key(e))?;
    let suite = inputs.into_shard().unwrap_or(whole);
    Ok(Evaluation { run, outcome: Outcome::Items { suite: Box::new(suite), scores, replies: replies.map(Box::new) } })
}

/// The suite as the plan names it, its tie rule set, refused before any model work when it
/// has no items or lacks images.
fn load_suite(plan: &EvalPlan, ties: Ties) -> Result<Suite> {
    let mut suite = plan.suite.load(&plan.data_dir)?;
    suite.summary.ties = ties;
    plan.options.bootstrap.apply(&mut suite.summary);
    if suite.items.is_empty() {
        return Err(Error::new(
            ErrorKind::Data,
            format!(
                "evaluate {} in {}: it has no items to score ({} record(s) excluded by the suite's validity rule)",
                suite.id,
                suite.data_dir.display(),
                suite.excluded
            ),
        ));
    }
    check_images(&suite)?;
    Ok(suite)
}

/// Fails before any model work when images are missing, naming them by folder (a folder that
/// does not exist is one line, however many images it was to hold).
pub(crate) fn check_images(suite: &Suite) -> Result<()> {
    let groups = suite.missing_images_by_folder();
    if groups.is_empty() {
        return Ok(());
    }
    let total: usize = groups.iter().map(|g| g.count).sum();
    let shown: Vec<String> = groups.iter().take(5).map(|g| g.describe()).collect();
    let more = if groups.len() > 5 { format!("; and {} more folder(s)", groups.len() - 5) } else { String::new() };
    Err(Error::new(ErrorKind::Data, format!("find {total} image(s) of {}: {}{more}", suite.id, shown.join("; "))))
}
