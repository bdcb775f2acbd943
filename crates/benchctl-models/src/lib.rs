//! The benchctl model zoo: image-text models on candle, resolved from the Hugging Face hub
//! or a local directory, with the tokenisation and image preprocessing of their
//! reference implementations.
//!
//! - [`registry`]: the zoo ids (`clip-vit-b32`, …) and what each resolves to;
//! - [`hub`]: finding a model's files (hub cache, download, or `--model-path`);
//! - [`models`]: one module per architecture;
//! - [`preprocess`], [`tokenizer`]: inputs exactly as the reference code prepares them;
//! - [`DualEncoder`] and [`FusionEncoder`]: what the runner asks of a model, as [`Model`].

pub mod device;
pub mod error;
pub mod hub;
pub mod kernels;
pub mod models;
pub mod preprocess;
pub mod registry;
pub mod tokenizer;

pub use benchctl_scoring::ScoreKind;
pub use error::{Error, ErrorKind, Result};

use candle_core::Tensor;

/// A model that embeds images and texts separately and scores a pair by their embeddings.
pub trait DualEncoder {
    /// Where the model's weights live; inputs must be moved there.
    fn device(&self) -> &candle_core::Device;

    /// How images must be prepared for [`DualEncoder::encode_images`].
    fn preprocessor(&self) -> &preprocess::Preprocessor;

    /// L2-normalised embeddings of a batch of preprocessed images, `(batch, C, H, W)` → `(batch, dim)`.
    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor>;

    /// L2-normalised embeddings of a batch of texts → `(batch, dim)`.
    fn encode_texts(&self, texts: &[&str]) -> Result<Tensor>;

    /// Scores of normalised embeddings, batched over items:
    /// `(n, K, dim)` images × `(n, L, dim)` texts → `(n, K, L)`.
    fn scores(&self, images: &Tensor, texts: &Tensor) -> Result<Tensor>;

    /// Scores for ranking only, `(n, K, dim)` × `(n, L, dim)` → `(n, K, L)`: any strictly
    /// increasing function of [`DualEncoder::scores`] ranks the same. The zoo's models return
    /// the embeddings' dot product (CLIP's scale, SigLIP's scale, bias and sigmoid are
    /// increasing), which saves a pass over a retrieval gallery's scores and keeps ties that
    /// saturation would create (a sigmoid at 1.0) apart.
    fn rank_scores(&self, images: &Tensor, texts: &Tensor) -> Result<Tensor> {
        self.scores(images, texts)
    }

    /// What [`DualEncoder::scores`] returns: similarities (logits, cosines) or match
    /// probabilities. It decides how the pairwise metrics treat ties and thresholds.
    fn score_kind(&self) -> ScoreKind {
        ScoreKind::Similarity
    }
}

/// A model that scores each (image, text) pair jointly, e.g. an image-text-matching head
/// with cross-attention (BLIP ITM, FIBER, METER): `K·L` forward passes per item.
///
/// The image half of the work is shared: [`FusionEncoder::encode_images`] turns pixels into
/// whatever the fusion layers attend to (patch tokens), once per image; the runner then asks
/// [`FusionEncoder::score_pairs`] for batches of (image state, text) pairs. A new fusion
/// model is one module implementing this trait and one registry line.
pub trait FusionEncoder {
    fn device(&self) -> &candle_core::Device;

    fn preprocessor(&self) -> &preprocess::Preprocessor;

    /// Per-image states, `(batch, C, H, W)` → `(batch, …)`; row `i` belongs to image `i`.
    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor>;

    /// One score per pair `(image_states[i], texts[i])` → `(batch,)`.
    fn score_pairs(&self, image_states: &Tensor, texts: &[&str]) -> Result<Tensor>;

    fn score_kind(&self) -> ScoreKind;

    /// A cheap dual-encoder head of the same model (BLIP's ITC) that retrieval suites use to
    /// shortlist candidates before [`FusionEncoder::score_pairs`] re-ranks them.
    fn shortlister(&self) -> Option<&dyn DualEncoder>;
}

/// A loaded model of either kind.
pub enum Model {
    Dual(Box<dyn DualEncoder>),
    Fusion(Box<dyn FusionEncoder>),
}

impl Model {
    pub fn preprocessor(&self) -> &preprocess::Preprocessor {
        match self {
            Model::Dual(m) => m.preprocessor(),
            Model::Fusion(m) => m.preprocessor(),
        }
    }

    pub fn device(&self) -> &candle_core::Device {
        match self {
            Model::Dual(m) => m.device(),
            Model::Fusion(m) => m.device(),
        }
    }

    pub fn score_kind(&self) -> ScoreKind {
        match self {
            Model::Dual(m) => m.score_kind(),
            Model::Fusion(m) => m.score_kind(),
        }
    }
}
