//! The error type of the model zoo.

use std::fmt;

/// What went wrong while resolving, loading or running a model. Messages are lowercase
/// and read after "failed to …".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No zoo entry has the requested id.
    UnknownModel,
    /// A model file is missing (local directory or hub cache) or could not be downloaded.
    MissingFile,
    /// The hub refused access (gated or private repo without a valid `HF_TOKEN`).
    AccessDenied,
    /// `config.json` (or another metadata file) is malformed or names an unsupported option.
    BadConfig,
    /// The weights do not fit the configuration: a tensor is missing or has another shape.
    BadWeights,
    /// The tokenizer file cannot be loaded or used.
    Tokenizer,
    /// The requested device or dtype is unavailable.
    Device,
    /// A tensor operation failed while running the model.
    Compute,
}

/// An error from the model zoo.
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

    /// The same error, naming the file it concerns.
    pub fn context(self, file: &std::path::Path) -> Self {
        Self { message: format!("{} (in {})", self.message, file.display()), ..self }
    }

    /// A tensor operation failure while running a model.
    pub fn compute(what: &str, e: candle_core::Error) -> Self {
        Self::new(ErrorKind::Compute, format!("{what}: {e}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
