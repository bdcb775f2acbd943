//! The benchctl model zoo: image-text models on candle, resolved from the Hugging Face hub
//! or a local directory, with the tokenisation and image preprocessing of their
//! reference implementations.
//!
//! - [`registry`]: the zoo ids (`clip-vit-b32`, …) and what each resolves to;
//! - [`hub`]: finding a model's files (hub cache, download, or `--model-path`);
//! - [`models`]: one module per architecture;
//! - [`preprocess`], [`tokenizer`]: inputs exactly as the reference code prepares them;
//! - [`DualEncoder`]: what the runner asks of a model.

pub mod device;
pub mod error;
pub mod hub;
pub mod models;
pub mod preprocess;
pub mod registry;
pub mod tokenizer;

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
}
