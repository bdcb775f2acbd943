//! The benchctl model zoo: image-text models on candle, resolved from the Hugging Face hub
//! or a local directory, with the tokenisation and image preprocessing of their
//! reference implementations.
//!
//! - [`registry`]: the zoo ids (`clip-vit-b32`, …) and what each resolves to, and the table
//!   of [`architecture`]s (each declared once in its module of [`models`]);
//! - [`hub`]: finding a model's files (hub cache, download, or `--model-path`);
//! - [`models`]: one module per architecture;
//! - [`preprocess`], [`tokenizer`]: inputs exactly as the reference code prepares them;
//! - [`vqascore`]: generative scoring (the probability of "Yes"), through a server;
//! - [`DualEncoder`] and [`FusionEncoder`]: what the runner asks of a model, as [`Model`].

/// The version of everything in this crate that decides an embedding's values (decoding
/// rules, preprocessing, model code, kernels). Bump it with any change that alters an output,
/// so that embedding caches written before it are never served after it (CHANGELOG.md names
/// each bump).
pub const OUTPUT_VERSION: u32 = 8;

pub mod architecture;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod error;
mod gemm;
pub mod hub;
pub mod kernels;
pub mod models;
pub mod preprocess;
pub mod registry;
pub mod text_clean;
pub mod tokenizer;
pub mod vqascore;

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

    /// How this model turns the dot product of two normalised embeddings into its score.
    fn similarity(&self) -> Similarity;

    /// Scores of normalised embeddings, batched over items:
    /// `(n, K, dim)` images × `(n, L, dim)` texts → `(n, K, L)`.
    fn scores(&self, images: &Tensor, texts: &Tensor) -> Result<Tensor> {
        self.similarity().scores(images, texts)
    }

    /// What [`DualEncoder::scores`] returns (see [`Similarity::kind`]).
    fn score_kind(&self) -> ScoreKind {
        self.similarity().kind()
    }
}

/// A dual encoder's score head as a value: `σ?(scale · cos + bias)`. Every zoo dual encoder
/// scores this way (CLIP: `exp(logit_scale) · cos`; SigLIP: the sigmoid of
/// `exp(logit_scale) · cos + logit_bias`; BLIP ITC: the cosine), so scoring needs only these
/// three numbers and the embeddings, not the model: a re-run whose embeddings are all cached
/// scores without loading the weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Similarity {
    pub scale: f32,
    pub bias: f32,
    /// Scores are the sigmoid of the logit: match probabilities.
    pub sigmoid: bool,
}

impl Similarity {
    /// The plain cosine of normalised embeddings.
    pub const COSINE: Similarity = Similarity { scale: 1.0, bias: 0.0, sigmoid: false };

    /// `(n, K, dim)` images × `(n, L, dim)` texts → `(n, K, L)` scores: `scale · cos + bias`.
    /// For a sigmoid head these are the logits of its match probabilities
    /// ([`ScoreKind::Logit`]): the sigmoid saturates to exactly 1.0 in f32 and would turn a
    /// wide margin into a tie, so it is applied only where a metric thresholds.
    pub fn scores(&self, images: &Tensor, texts: &Tensor) -> Result<Tensor> {
        self.logits(images, texts)
    }

    /// `scale · cos + bias`, before any sigmoid.
    pub fn logits(&self, images: &Tensor, texts: &Tensor) -> Result<Tensor> {
        let dots = self.rank_scores(images, texts)?;
        match (self.scale, self.bias) {
            (1.0, 0.0) => Ok(dots),
            (scale, 0.0) => (dots * scale as f64).map_err(|e| Error::compute("score", e)),
            (scale, bias) => dots.affine(scale as f64, bias as f64).map_err(|e| Error::compute("score", e)),
        }
    }

    /// Scores for ranking only: the dot product. Every score above increases with it (the
    /// scale is positive, the sigmoid increasing), so it ranks the same, saves a pass over a
    /// retrieval gallery's scores and keeps ties that saturation would create (a sigmoid at
    /// 1.0) apart.
    pub fn rank_scores(&self, images: &Tensor, texts: &Tensor) -> Result<Tensor> {
        models::transformer::pairwise_dot(images, texts).map_err(|e| Error::compute("rank", e))
    }

    /// Similarities (logits, cosines), or the logits of match probabilities for a sigmoid
    /// head: it decides how the pairwise metrics treat thresholds.
    pub fn kind(&self) -> ScoreKind {
        if self.sigmoid {
            ScoreKind::Logit
        } else {
            ScoreKind::Similarity
        }
    }

    /// As three numbers (for storing beside cached embeddings).
    pub fn to_values(&self) -> [f32; 3] {
        [self.scale, self.bias, if self.sigmoid { 1.0 } else { 0.0 }]
    }

    /// From [`Similarity::to_values`]; `None` unless it is three numbers with a positive scale.
    pub fn from_values(values: &[f32]) -> Option<Similarity> {
        match *values {
            [scale, bias, sigmoid]
                if scale > 0.0 && scale.is_finite() && bias.is_finite() && (sigmoid == 0.0 || sigmoid == 1.0) =>
            {
                Some(Similarity { scale, bias, sigmoid: sigmoid == 1.0 })
            }
            _ => None,
        }
    }
}

/// A model that scores each (image, text) pair jointly, e.g. an image-text-matching head
/// with cross-attention (BLIP ITM, FIBER, METER): `K·L` forward passes per item.
///
/// The image half of the work is shared: [`FusionEncoder::encode_images`] turns pixels into
/// whatever the fusion layers attend to (patch tokens), once per image; the runner then asks
/// [`FusionEncoder::score_pairs`] for batches of (image state, text) pairs. A new fusion
/// model is one module implementing this trait and declaring its [`architecture`], and one
/// line in [`registry::ARCHITECTURES`].
pub trait FusionEncoder {
    fn device(&self) -> &candle_core::Device;

    fn preprocessor(&self) -> &preprocess::Preprocessor;

    /// Per-image states, `(batch, C, H, W)` → `(batch, …)`; row `i` belongs to image `i`.
    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor>;

    /// The state of several images shown together in one prompt, in order, each `(1, C, H, W)`
    /// (of its own size where the model resizes each to about its own) → `(1, …)` (VisMin's
    /// image task); refused by a model whose prompt takes one image.
    fn encode_shown_together(&self, _images: &[Tensor]) -> Result<Tensor> {
        Err(one_image_per_prompt())
    }

    /// One score per pair `(image_states[i], texts[i])` → `(batch,)`.
    fn score_pairs(&self, image_states: &Tensor, texts: &[&str]) -> Result<Tensor>;

    /// [`FusionEncoder::score_pairs`], with the reply generated for each pair that its score
    /// was read from, where the model scores by generated replies (`--answer-rule generate`);
    /// `None` for a model that reads scores otherwise.
    fn score_pairs_with_replies(&self, image_states: &Tensor, texts: &[&str]) -> Result<(Tensor, Option<Vec<String>>)> {
        Ok((self.score_pairs(image_states, texts)?, None))
    }

    fn score_kind(&self) -> ScoreKind;

    /// The score a retrieval shortlist is re-ranked by, one per pair as in
    /// [`FusionEncoder::score_pairs`], before the shortlist's similarity is added
    /// (`benchctl_scoring::metrics::retrieval::rerank_row`). BLIP: the ITM head's raw
    /// class-1 logit, as BLIP's own evaluation uses it. Default: the pair score.
    fn rerank_pairs(&self, image_states: &Tensor, texts: &[&str]) -> Result<Tensor> {
        self.score_pairs(image_states, texts)
    }

    /// A cheap dual-encoder head of the same model (BLIP's ITC) that retrieval suites use to
    /// shortlist candidates before [`FusionEncoder::score_pairs`] re-ranks them.
    fn shortlister(&self) -> Option<&dyn DualEncoder>;
}

/// The refusal of images shown together by a model whose prompt takes one image.
pub(crate) fn one_image_per_prompt() -> Error {
    Error::new(
        ErrorKind::UnusableInput,
        "show several images together: this model's prompt takes one image (score such a suite through --endpoint)",
    )
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
