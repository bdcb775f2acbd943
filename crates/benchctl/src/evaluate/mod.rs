//! `benchctl eval` after the model is resolved: [`items`] for K×L item suites,
//! [`galleries`] for retrieval galleries (RoCOCO); both end in an [`Evaluation`] that
//! [`Evaluation::store`] writes (run file and score dump, then the store's row).

pub mod galleries;
pub mod items;

use std::path::{Path, PathBuf};

use benchctl_scoring::metrics::Ties;
use benchctl_scoring::spill::Strings;
use benchctl_scoring::ScoreTensor;
use benchctl_suites::Suite;

use crate::cli::EvalArgs;
use crate::results::{self, Run};
use crate::{Error, ErrorKind, Result};

/// Runs `benchctl eval` up to, not including, storing the run.
pub fn run(args: &EvalArgs) -> Result<Evaluation> {
    let suite_info = benchctl_suites::find(&args.suite)?;
    let data_dir = args.data_dir.clone().unwrap_or_else(|| Path::new("datasets").join(suite_info.id));
    // Recorded absolute, so `report` finds the data from any directory.
    let data_dir = std::path::absolute(&data_dir).unwrap_or(data_dir);
    match suite_info.kind {
        benchctl_suites::SuiteKind::Galleries => galleries::run(args, &data_dir),
        _ => items::run(args, suite_info, &data_dir),
    }
}

/// A finished evaluation, not yet stored.
pub struct Evaluation {
    pub run: Run,
    pub outcome: Outcome,
}

/// What an evaluation scored, and so its score dump (one JSON object per line).
pub enum Outcome {
    /// An item suite and its scores: one dump line per item, made as it is written (a million
    /// items' lines are never held at once).
    Items { suite: Box<Suite>, scores: ScoreTensor },
    /// A retrieval suite's per-query dump lines (RoCOCO: ranks against whole galleries).
    Queries { dump: Strings },
}

impl Evaluation {
    /// An item suite's scores, when the evaluation has them.
    pub fn scored(&self) -> Option<(&Suite, &ScoreTensor)> {
        match &self.outcome {
            Outcome::Items { suite, scores } => Some((suite, scores)),
            Outcome::Queries { .. } => None,
        }
    }

    /// The score dump's lines, in order.
    pub fn dump_lines(&self) -> Box<dyn Iterator<Item = String> + '_> {
        match &self.outcome {
            Outcome::Items { suite, scores } => Box::new(results::item_dump(suite, scores)),
            Outcome::Queries { dump } => Box::new(dump.iter().map(str::to_string)),
        }
    }

    /// Stores the run under `results_dir`, all or nothing: the run file and score dump
    /// first, then the store's row that names them (one transaction); returns the run's id
    /// and the run file.
    pub fn store(&self, results_dir: &Path) -> Result<(i64, PathBuf)> {
        let mut store = crate::store::Store::open(results_dir)?;
        // An item suite's dump lines are made twice, for the file and for the store's rows,
        // rather than held between the two (a million lines took about 100 MB).
        let path = results::store(results_dir, &self.run, self.dump_lines())?;
        crate::fault::at("store-files", 0);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        // The files are complete: the next store that opens this directory imports them, so
        // a row that cannot be written (a full disk) loses nothing; say so.
        let id = store.insert(&self.run, self.dump_lines().map(Ok), Some(name)).map_err(|e| {
            let kept = format!(
                "{e}; the run is kept in {} and enters the store when it is next opened (any benchctl command on this --results-dir, once it can be written)",
                path.display()
            );
            Error::caused_by(ErrorKind::Results, kept, e)
        })?;
        Ok((id, path))
    }
}

/// The tie rule a run asked for, refused (a usage error) for a suite whose official scorer
/// compares strictly: there `first` would reproduce nothing and only reward candidate order.
pub fn tie_rule(suite: &benchctl_suites::SuiteInfo, asked: crate::cli::TiesArg) -> Result<Ties> {
    let asked = Ties::from(asked);
    if asked == Ties::First && suite.official_ties != Ties::First {
        return Err(Error::new(
            ErrorKind::Usage,
            format!("use --ties first on {}: its official scorer compares strictly (a tie is a miss), so only strict reproduces it; --ties first is for spec and rococo", suite.id),
        ));
    }
    Ok(asked)
}

/// The bootstrap intervals of a suite's headline metrics ([`results::BOOTSTRAP_RESAMPLES`]
/// resamples of the items, seed [`results::BOOTSTRAP_SEED`]).
pub fn bootstrap_intervals(
    suite: &Suite,
    scores: &ScoreTensor,
) -> Result<Vec<benchctl_scoring::metrics::stats::Interval>> {
    Ok(benchctl_scoring::metrics::stats::bootstrap(
        suite.summary,
        scores,
        &suite.item_views(),
        results::BOOTSTRAP_RESAMPLES,
        results::BOOTSTRAP_SEED,
    )?)
}
