//! Scoring for benchctl: the shared item shape and the published metrics.
//!
//! Every suite is reduced to the same shape: an item offers K candidate images and
//! L candidate texts together with a [`Truth`] matrix saying which (image, text) pairs
//! match. A model turns N items into a ragged N×K×L [`ScoreTensor`]. Metrics read the
//! scores and the truth only, never the model or the pixels, so any metric can be
//! recomputed from a score dump.
//!
//! This crate is pure Rust on purpose: it has no tensor library dependency, so scoring
//! scores produced elsewhere never needs the model zoo. The one exception to "scores only"
//! is [`gallery`]: it ranks retrieval galleries too big to score in fp32 straight from their
//! embeddings, with the outcomes the scores would give.

pub mod gallery;
pub mod metrics;
pub mod report;
pub mod scores;
pub mod truth;

pub use metrics::MetricFamily;
pub use report::{Breakdown, Group, Report};
pub use scores::{ScoreKind, ScoreMatrix, ScoreTensor};
pub use truth::{TagSets, Tags, Truth};

/// `log P` of a probability of zero, the floor of every log-probability score. `t2v_metrics`
/// scores an answer whose top log-probabilities hold neither "Yes" nor "No" as probability
/// 0.0; benchctl stores that as this finite log (`exp(−1000)` is 0 in f64 too), so such pairs
/// tie exactly as they do there and score differences stay finite.
pub const LOG_ZERO: f64 = -1000.0;

/// An error from scoring: scores that do not fit the items they claim to score.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    message: String,
}

impl Error {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
