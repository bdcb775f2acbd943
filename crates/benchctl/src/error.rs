//! The runner's error: a kind that decides the exit code, and a message.

use std::fmt;

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
    /// Results could not be read or written (exit code 5).
    Results,
    /// A regression check found a metric below its baseline (exit code 6).
    Regression,
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
        }
    }
}

/// An error of the runner. The message reads after "failed to …" and is printed as
/// `error: failed to <message>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn results(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Results, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<benchctl_suites::Error> for Error {
    fn from(e: benchctl_suites::Error) -> Self {
        use benchctl_suites::ErrorKind as K;
        let kind = match e.kind() {
            K::UnknownSuite | K::Unsupported => ErrorKind::Usage,
            K::MissingData | K::Malformed | K::MissingImage | K::CorruptImage | K::PathEscapes => ErrorKind::Data,
        };
        Error::new(kind, e.to_string())
    }
}

impl From<benchctl_models::Error> for Error {
    fn from(e: benchctl_models::Error) -> Self {
        use benchctl_models::ErrorKind as K;
        let kind = match e.kind() {
            K::UnknownModel | K::Device => ErrorKind::Usage,
            K::MissingFile | K::AccessDenied | K::BadConfig | K::BadWeights | K::Tokenizer => ErrorKind::Model,
            K::Compute => ErrorKind::Compute,
        };
        Error::new(kind, e.to_string())
    }
}

impl From<benchctl_scoring::Error> for Error {
    fn from(e: benchctl_scoring::Error) -> Self {
        Error::new(ErrorKind::Compute, format!("score: {e}"))
    }
}

pub type Result<T> = std::result::Result<T, Error>;
