//! One module per architecture, on the shared pieces of [`transformer`].

pub mod blip;
pub mod clip;
pub mod clip_openai;
pub mod fiber;
pub mod siglip;
pub mod transformer;
mod weights;

use crate::{Error, ErrorKind, Result};

/// Reads and parses a JSON config file, naming the file (and serde's line and column) on failure.
pub(crate) fn read_config<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<T> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::new(ErrorKind::BadConfig, format!("read {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| Error::new(ErrorKind::BadConfig, format!("parse {}: {e}", path.display())))
}

/// A ViT's input must split into whole patches.
pub(crate) fn check_patch_grid(path: &std::path::Path, image_size: usize, patch_size: usize) -> Result<()> {
    if patch_size == 0 || !image_size.is_multiple_of(patch_size) {
        return Err(Error::new(
            ErrorKind::BadConfig,
            format!(
                "use {}: vision_config.image_size {image_size} is not a multiple of patch_size {patch_size}",
                path.display()
            ),
        ));
    }
    Ok(())
}
