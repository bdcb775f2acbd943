//! The runner's error: a kind that decides the exit code, and a message.

/// What failed. Each kind has its own exit code, so scripts can tell bad data from a bad
/// model from a bad command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A tensor computation failed (exit code 1).
    Compute,
    /// The command line names something that does not exist: an unknown model, suite or
    /// device, or conflicting options (exit code 2, as for clap's own usage errors).
    Usage,
    /// The suite's data is missing or malformed, or an image is missing or corrupt (exit code 3).
    Data,
    /// The model's files are missing, malformed, or disagree with each other (exit code 4).
    Model,
    /// Results could not be written: a run file, the store, a report or a chart (exit code 5).
    Results,
    /// Results to read are missing or malformed: no store, no such run, a run file or score
    /// dump that cannot be read or parsed, runs that cannot be compared (exit code 8).
    BadResults,
    /// The regression gate did not pass: a significant drop beyond the tolerance, runs over
    /// different data, or a baseline run without a current run (exit code 6).
    Regression,
    /// A scoring server (`--endpoint`) failed or answered without log-probabilities; the
    /// answers it gave are cached (exit code 7).
    Endpoint,
}

impl ErrorKind {
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Compute => 1,
            ErrorKind::Usage => 2,
            ErrorKind::Data => 3,
            ErrorKind::Model => 4,
            ErrorKind::Results => 5,
            ErrorKind::Regression => 6,
            ErrorKind::Endpoint => 7,
            ErrorKind::BadResults => 8,
        }
    }
}

/// An error of the runner. The message reads after "failed to …" and is printed as
/// `error: failed to <message>`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// The failure underneath (a suite, model or scoring error, or an I/O one), kept for
    /// [`std::error::Error::source`]; the message already says what it means here.
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}
benchctl_base::kinded_error_impl!(Error, ErrorKind);

impl Error {
    pub fn results(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Results, message)
    }

    pub fn bad_results(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadResults, message)
    }
}

impl From<benchctl_suites::Error> for Error {
    fn from(e: benchctl_suites::Error) -> Self {
        use benchctl_suites::ErrorKind as K;
        let kind = match e.kind() {
            K::UnknownSuite | K::Unsupported | K::Manifest => ErrorKind::Usage,
            K::MissingData | K::Malformed | K::MissingImage | K::CorruptImage | K::PathEscapes => ErrorKind::Data,
        };
        Error::caused_by(kind, e.to_string(), e)
    }
}

impl From<benchctl_models::Error> for Error {
    fn from(e: benchctl_models::Error) -> Self {
        use benchctl_models::ErrorKind as K;
        let kind = match e.kind() {
            K::UnknownModel | K::Device => ErrorKind::Usage,
            K::MissingFile | K::AccessDenied | K::BadConfig | K::BadWeights | K::Tokenizer => ErrorKind::Model,
            K::Compute => ErrorKind::Compute,
            K::UnusableInput => ErrorKind::Data,
            K::Endpoint => ErrorKind::Endpoint,
        };
        Error::caused_by(kind, e.to_string(), e)
    }
}

impl From<benchctl_scoring::Error> for Error {
    fn from(e: benchctl_scoring::Error) -> Self {
        Error::caused_by(ErrorKind::Compute, format!("score: {e}"), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind its own exit code, none of them 0, so that a script can tell them apart.
    #[test]
    fn every_kind_has_its_own_exit_code() {
        use ErrorKind::*;
        let kinds = [Compute, Usage, Data, Model, Results, Regression, Endpoint, BadResults];
        let mut codes: Vec<i32> = kinds.iter().map(|k| k.exit_code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes, (1..=8).collect::<Vec<_>>());
    }

    /// A lower crate's error becomes the runner's with its kind mapped to an exit code, its
    /// message unchanged, and the whole chain of causes kept.
    #[test]
    fn converted_errors_keep_their_causes() {
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let models = benchctl_models::Error::caused_by(
            benchctl_models::ErrorKind::BadConfig,
            format!("parse config.json: {json}"),
            json,
        );
        let message = models.to_string();
        let ours = Error::from(models);
        assert_eq!((ours.kind(), ours.kind().exit_code()), (ErrorKind::Model, 4));
        assert_eq!(ours.to_string(), message);
        let kept = std::error::Error::source(&ours).and_then(|c| c.downcast_ref::<benchctl_models::Error>());
        let Some(kept) = kept else { panic!("the models error is kept whole as the cause") };
        assert_eq!((kept.kind(), kept.to_string()), (benchctl_models::ErrorKind::BadConfig, message));
        let root = std::error::Error::source(kept).and_then(|r| r.downcast_ref::<serde_json::Error>());
        assert!(root.is_some(), "the parser's error is the models error's cause");
        assert!(std::error::Error::source(&Error::new(ErrorKind::Usage, "plain")).is_none());
    }
}
