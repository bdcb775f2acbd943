//! `benchctl eval` after the model is resolved: [`items`] for K×L item suites,
//! [`galleries`] for retrieval galleries (RoCOCO); both end in an [`Evaluation`] that
//! [`Evaluation::store`] writes (run file and score dump, then the store's row).

pub mod galleries;
pub mod items;

use std::path::{Path, PathBuf};

use benchctl_scoring::metrics::Ties;
use benchctl_scoring::ScoreTensor;
use benchctl_suites::Suite;

use crate::cli::EvalArgs;
use crate::results::{self, Run};
use crate::{Error, ErrorKind, Result};

/// Runs `benchctl eval` up to, not including, storing the run.
pub fn run(args: &EvalArgs) -> Result<Evaluation> {
    let suite_info = benchctl_suites::find(&args.suite)?;
    let data_dir = args.data_dir.clone().unwrap_or_else(|| Path::new("datasets").join(suite_info.id));
    match suite_info.kind {
        benchctl_suites::SuiteKind::Galleries => galleries::run(args, &data_dir),
        _ => items::run(args, suite_info, &data_dir),
    }
}

/// A finished evaluation, not yet stored.
pub struct Evaluation {
    pub run: Run,
    pub dump: Dump,
    /// An item suite and its scores (retrieval suites have none).
    pub scored: Option<(Suite, ScoreTensor)>,
}

/// Where a run's score dump (one JSON object per line) comes from.
pub enum Dump {
    /// An item suite's: one line per item of [`Evaluation::scored`], made as it is written
    /// (a million items' lines are never held at once).
    OfScoredItems,
    /// These lines (a retrieval suite's, or external scores as read).
    Lines(Vec<String>),
}

impl Evaluation {
    /// The score dump's lines, in order.
    pub fn dump_lines(&self) -> Box<dyn Iterator<Item = String> + '_> {
        match (&self.dump, &self.scored) {
            (Dump::Lines(lines), _) => Box::new(lines.iter().cloned()),
            (Dump::OfScoredItems, Some((suite, scores))) => Box::new(results::item_dump(suite, scores)),
            (Dump::OfScoredItems, None) => Box::new(std::iter::empty()),
        }
    }

    /// Stores the run under `results_dir`, all or nothing: the run file and score dump
    /// first, then the store's row that names them (one transaction); returns the run's id
    /// and the run file.
    pub fn store(&self, results_dir: &Path) -> Result<(i64, PathBuf)> {
        let mut store = crate::store::Store::open(results_dir)?;
        let path = results::store(results_dir, &self.run, self.dump_lines())?;
        crate::fault::at("store-files", 0);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        // The files are complete: the next store that opens this directory imports them, so
        // a row that cannot be written (a full disk) loses nothing; say so.
        let id = store.insert(&self.run, self.dump_lines(), Some(name)).map_err(|e| {
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
