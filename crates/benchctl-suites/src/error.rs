//! The error type of suite loading.

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
    /// A suite manifest is malformed (names the key and line).
    Manifest,
}

/// An error from loading a suite or one of its images.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// The failure underneath (an I/O, JSON or image decoding error), kept for
    /// [`std::error::Error::source`]; the message already says what it means here.
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}
benchctl_scoring::kinded_error_impl!(Error, ErrorKind);
