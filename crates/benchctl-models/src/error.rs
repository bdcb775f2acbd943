//! The error type of the model zoo.

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
    /// An input the model's preprocessing cannot take (an image without pixels, or of an
    /// aspect ratio whose resize would not fit in memory).
    UnusableInput,
    /// A scoring server failed: unreachable, timed out, an error status after the retries, or
    /// an answer without the log-probabilities a score is read from.
    Endpoint,
}

/// An error of the model zoo. Messages are lowercase and read after "failed to …".
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// The failure underneath (an I/O, parsing, hub or tensor error), kept for
    /// [`std::error::Error::source`]; the message already says what it means here.
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}
benchctl_base::kinded_error_impl!(Error, ErrorKind);

impl Error {
    /// The same error, naming the file it concerns.
    pub fn context(self, file: &std::path::Path) -> Self {
        Self { message: format!("{} (in {})", self.message, file.display()), ..self }
    }

    /// A tensor operation failure while running a model.
    pub fn compute(what: &str, e: candle_core::Error) -> Self {
        let message = format!("{what}: {e}");
        Self::caused_by(ErrorKind::Compute, message, e)
    }
}
