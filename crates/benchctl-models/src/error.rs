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
}

/// An error from the model zoo.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// The failure underneath (candle's, an I/O or a tokenizer error), kept for [`std::error::Error::source`]; the message
    /// already says what it means here.
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// Errors are equal when they say the same thing (their causes are not compared).
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for Error {}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), source: None }
    }

    /// An error caused by `source`.
    pub fn caused_by(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self { kind, message: message.into(), source: Some(Box::new(source)) }
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
        let message = format!("{what}: {e}");
        Self::caused_by(ErrorKind::Compute, message, e)
    }
}

pub type Result<T> = std::result::Result<T, Error>;
