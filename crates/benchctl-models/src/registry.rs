//! The zoo: model ids and what each resolves to.
//!
//! Every entry pins a hub revision, so a run names exactly the weights it used.

use crate::{Error, ErrorKind, Result};

/// The architectures benchctl implements, one module each under [`crate::models`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// CLIP in Hugging Face layout ([`crate::models::clip`]).
    Clip,
}

/// One zoo entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelEntry {
    pub id: &'static str,
    pub repo: &'static str,
    /// The pinned hub revision (a commit).
    pub revision: &'static str,
    pub architecture: Architecture,
    pub description: &'static str,
}

/// Every model in the zoo.
pub const MODELS: &[ModelEntry] = &[ModelEntry {
    id: "clip-vit-b32",
    repo: "openai/clip-vit-base-patch32",
    revision: "3d74acf9a28c67741b2f4f2ea7635f0aaf6f0268",
    architecture: Architecture::Clip,
    description: "OpenAI CLIP ViT-B/32 (Radford et al., 2021), 224 px, QuickGELU",
}];

/// The entry with this id, or an error listing the known ones.
pub fn find(id: &str) -> Result<&'static ModelEntry> {
    MODELS.iter().find(|m| m.id == id).ok_or_else(|| {
        let known: Vec<&str> = MODELS.iter().map(|m| m.id).collect();
        Error::new(
            ErrorKind::UnknownModel,
            format!("find model `{id}`: known models are {} (or pass --model-path DIR)", known.join(", ")),
        )
    })
}

/// The architecture of a local model directory, from `model_type` in its `config.json`.
pub fn detect_architecture(config: &std::path::Path) -> Result<Architecture> {
    let text = std::fs::read_to_string(config)
        .map_err(|e| Error::new(ErrorKind::BadConfig, format!("read {}: {e}", config.display())))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::new(ErrorKind::BadConfig, format!("parse {}: {e}", config.display())))?;
    match value.get("model_type").and_then(|v| v.as_str()) {
        Some("clip") => Ok(Architecture::Clip),
        Some(other) => Err(Error::new(
            ErrorKind::BadConfig,
            format!("use {}: model_type `{other}` is not supported (supported: clip)", config.display()),
        )),
        None => Err(Error::new(
            ErrorKind::BadConfig,
            format!("use {}: it has no `model_type` key", config.display()),
        )),
    }
}

/// Loads a model of `architecture` from its files.
pub fn load(
    architecture: Architecture,
    files: &crate::hub::ModelFiles,
    dtype: candle_core::DType,
    device: &candle_core::Device,
) -> Result<Box<dyn crate::DualEncoder>> {
    match architecture {
        Architecture::Clip => Ok(Box::new(crate::models::clip::ClipEncoder::load(files, dtype, device)?)),
    }
}
