//! A benchmark's official submission file, in the format its suite names
//! (`Suite::submission`): [`written`] makes a run's, which `eval` and `merge` put in
//! `<run>.submission/`; `read` reads one into a suite's scores for `score --format NAME`.
//! Each format is one module here and one arm in each match below.

mod eqben_npy;
mod naturalbench_outputs;
mod vismin_csv;

use std::path::Path;

use benchctl_scoring::{ScoreKind, ScoreTensor};
use benchctl_suites::{ReplyReading, Suite};

pub use benchctl_suites::submission::Submission;

use crate::dump::Matrices;
use crate::replies::ItemReplies;
use crate::{Error, ErrorKind, Result};

/// A run's submission file, made in memory.
pub struct Written {
    /// Its name in `<run>.submission/`: the name the official scorer reads.
    pub file: &'static str,
    pub bytes: Vec<u8>,
    /// What it holds and who reads it, for the line `eval` prints.
    pub about: String,
}

/// A run's scores (and replies) in its suite's official submission format; `None` where the
/// suite has none, or the run lacks what it needs (a note on stderr says what).
pub fn written(suite: &Suite, scores: &ScoreTensor, replies: Option<&ItemReplies>) -> Result<Option<Written>> {
    match suite.submission {
        None => Ok(None),
        Some(Submission::EqbenNpy) => eqben_npy::written(suite, scores),
        Some(Submission::NaturalbenchOutputs) => replies.map_or(Ok(None), |r| naturalbench_outputs::written(suite, r)),
        Some(Submission::VisminCsv) => vismin_csv::written(suite, scores),
    }
}

/// Reads `path`, a file in `format`, into `m` (the matrices of `suite`, whose official code
/// reads generated replies as `reading`). Returns the kind of score its values are, where the
/// format decides it (answers read as log-probabilities: 0 chosen, `LOG_ZERO` not).
pub(crate) fn read(
    format: Submission,
    path: &Path,
    suite: &Suite,
    reading: ReplyReading,
    m: &mut Matrices,
) -> Result<Option<ScoreKind>> {
    if suite.submission != Some(format) {
        let has = suite.submission.map_or("none".to_string(), |s| format!("`{}`", s.name()));
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "read {} as `{}`: that is not {}'s official submission format (its format: {has})",
                path.display(),
                format.name(),
                suite.id
            ),
        ));
    }
    match format {
        Submission::EqbenNpy => eqben_npy::read(path, suite, m).map(|()| None),
        Submission::NaturalbenchOutputs => {
            naturalbench_outputs::read(path, suite, reading, m).map(|()| Some(ScoreKind::LogProbability))
        }
        Submission::VisminCsv => vismin_csv::read(path, suite, m),
    }
}

/// The format a file is in, from its name and first non-empty line, if it is one of these.
pub(crate) fn detect(path: &Path, first_line: &str) -> Option<Submission> {
    Submission::ALL.into_iter().find(|format| match format {
        Submission::EqbenNpy => path.extension().is_some_and(|e| e == "npy"),
        Submission::NaturalbenchOutputs => first_line.trim_start().starts_with('['),
        Submission::VisminCsv => vismin_csv::is_header(first_line),
    })
}

/// The largest submission file `score` reads as text (NaturalBench's 7,600 replies of 128
/// tokens are a few MB).
const MAX_TEXT_BYTES: u64 = 1 << 30;

/// A submission file's text (`what` it is, for messages): a regular file of at most
/// [`MAX_TEXT_BYTES`], UTF-8, a byte-order mark dropped.
fn read_text(path: &Path, what: &str) -> Result<String> {
    let bad = |why: String| Error::new(ErrorKind::Data, format!("read {}: {why}", path.display()));
    benchctl_suites::paths::require_regular_file(path)
        .map_err(|e| Error::caused_by(ErrorKind::Data, e.to_string(), e))?;
    let size = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?.len();
    if size > MAX_TEXT_BYTES {
        return Err(bad(format!("it is {size} bytes, more than the {MAX_TEXT_BYTES} {what} may be")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    Ok(text.strip_prefix('\u{feff}').map(str::to_string).unwrap_or(text))
}

/// Writes a run's submission file (if its suite has one) into `<run>.submission/`; returns
/// the file and what it holds.
pub fn export(
    suite: &Suite,
    scores: &ScoreTensor,
    replies: Option<&ItemReplies>,
    run_path: &Path,
) -> Result<Option<(std::path::PathBuf, String)>> {
    let Some(file) = written(suite, scores, replies)? else { return Ok(None) };
    let dir = run_path.with_extension("submission");
    let out = dir.join(file.file);
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&out, &file.bytes))
        .map_err(|e| Error::results(format!("write {}: {e}", out.display())))?;
    Ok(Some((out, file.about)))
}
