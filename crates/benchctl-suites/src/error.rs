//! The error type of suite loading.

use std::fmt;

/// What went wrong while loading a suite. Messages are lowercase and read after
/// "failed to …".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No suite has the requested id.
    UnknownSuite,
    /// The data directory or an annotation file does not exist or cannot be read.
    MissingData,
    /// An annotation file is not in the official format (names the file and line or key).
    Malformed,
    /// An image named by the annotations does not exist.
    MissingImage,
    /// An image exists but cannot be decoded.
    CorruptImage,
    /// An annotation names a path outside the data directory.
    PathEscapes,
    /// The operation does not apply to this suite (e.g. K×L items of a retrieval suite).
    Unsupported,
}

/// An error from loading a suite or one of its images.
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
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
