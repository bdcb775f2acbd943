//! The error type of suite loading.

use benchctl_base::spill::{SpillVec, Strings};

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
benchctl_base::kinded_error_impl!(Error, ErrorKind);

/// Every problem a load found, in order: each one's kind and message (in spilled lines: a
/// malformed file of a million records has a million of them), and the first kept whole, with
/// its cause, for [`crate::SuiteInfo::load`] to fail with.
#[derive(Default)]
pub struct Problems {
    first: Option<Error>,
    kinds: SpillVec<u8>,
    messages: Strings,
}

/// Every [`ErrorKind`], in declaration order: a problem's kind is stored as its position.
const KINDS: [ErrorKind; 8] = [
    ErrorKind::UnknownSuite,
    ErrorKind::MissingData,
    ErrorKind::Malformed,
    ErrorKind::MissingImage,
    ErrorKind::CorruptImage,
    ErrorKind::PathEscapes,
    ErrorKind::Unsupported,
    ErrorKind::Manifest,
];

impl Problems {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, problem: Error) {
        self.kinds.push(KINDS.iter().position(|&k| k == problem.kind()).unwrap_or_default() as u8);
        self.messages.push(&problem.to_string());
        self.first.get_or_insert(problem);
    }

    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// Problem `i`'s kind.
    ///
    /// # Panics
    /// When `i` is not below [`Problems::len`].
    pub fn kind(&self, i: usize) -> ErrorKind {
        KINDS[self.kinds[i] as usize]
    }

    /// Problem `i`'s message.
    ///
    /// # Panics
    /// When `i` is not below [`Problems::len`].
    pub fn message(&self, i: usize) -> &str {
        self.messages.get(i)
    }

    /// Each problem's kind and message, in the order found.
    pub fn iter(&self) -> impl Iterator<Item = (ErrorKind, &str)> + '_ {
        self.kinds.iter().map(|&k| KINDS[k as usize]).zip(self.messages.iter())
    }

    /// Each problem's message, in the order found.
    pub fn messages(&self) -> impl Iterator<Item = &str> + Clone + '_ {
        self.messages.iter()
    }

    /// Moves `later`'s problems after these.
    pub fn append(&mut self, later: Problems) {
        self.kinds.extend_from_slice(&later.kinds);
        self.messages.extend(later.messages.iter());
        if self.first.is_none() {
            self.first = later.first;
        }
    }

    /// Every problem's message, in the order found.
    pub fn into_messages(self) -> Strings {
        self.messages
    }

    /// The first problem, as it was found.
    pub fn into_first(self) -> Option<Error> {
        self.first
    }
}

impl std::fmt::Debug for Problems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.messages()).finish()
    }
}

impl Extend<Error> for Problems {
    fn extend<I: IntoIterator<Item = Error>>(&mut self, problems: I) {
        problems.into_iter().for_each(|p| self.push(p));
    }
}
