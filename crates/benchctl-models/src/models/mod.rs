//! One module per architecture, on the shared pieces of [`transformer`].

pub mod blip;
pub mod clip;
pub mod clip_openai;
pub mod clip_t5;
pub mod eva;
pub mod fiber;
mod gemma;
pub mod gemma3;
pub mod internvl;
pub mod metaclip2;
pub mod paligemma;
pub mod qwen25vl;
pub mod qwen3vl;
pub mod siglip;
pub mod siglip2_naflex;
pub mod siglip_open_clip;
pub mod transformer;
mod weights;

use crate::{Error, ErrorKind, Result};

/// Reads and parses a JSON config file, naming the file (and serde's line and column) on failure.
pub(crate) fn read_config<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<T> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::caused_by(ErrorKind::BadConfig, format!("read {}: {e}", path.display()), e))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::caused_by(ErrorKind::BadConfig, format!("parse {}: {e}", path.display()), e))
}

/// A ViT's input must hold at least one whole patch. It need not split into whole patches: the
/// references' patch embedding is a convolution of stride `patch_size` without padding, so 384 px
/// images in 14 px patches (the So400m/14 checkpoints) are a 27 × 27 grid, the last 6 pixels unseen.
pub(crate) fn check_patch_grid(path: &std::path::Path, image_size: usize, patch_size: usize) -> Result<()> {
    if patch_size == 0 || image_size < patch_size {
        return Err(Error::new(
            ErrorKind::BadConfig,
            format!(
                "use {}: vision_config.image_size {image_size} holds no whole patch of patch_size {patch_size}",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// What [`convert_checkpoint`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    /// Tensors written.
    pub tensors: usize,
    /// Training-only buffers left out (FIBER's ITC queues), by name.
    pub dropped: Vec<String>,
}

/// Buffers of a training checkpoint that no evaluation reads: FIBER's ITC queues (the official
/// loader pops exactly these before `load_state_dict`).
const TRAINING_BUFFERS: [&str; 7] = [
    "image_queue",
    "text_queue",
    "queue_ptr",
    "queue_total",
    "image_input_queue",
    "text_input_queue",
    "text_input_mask_queue",
];

/// Writes the tensors of a PyTorch checkpoint (a Lightning `.ckpt`'s `state_dict`, or a saved
/// state dict) as safetensors at `output`, in their own dtypes and names, without the training
/// queues; a loader then reads them without unpickling. `output` must not exist.
pub fn convert_checkpoint(input: &std::path::Path, output: &std::path::Path) -> Result<Converted> {
    if output.exists() {
        return Err(Error::new(
            ErrorKind::BadConfig,
            format!("convert to {}: it exists; choose a new file", output.display()),
        ));
    }
    if !crate::hub::is_torch_checkpoint(input) {
        return Err(Error::new(
            ErrorKind::BadWeights,
            format!("convert {}: it is not a PyTorch checkpoint (a torch.save zip archive)", input.display()),
        ));
    }
    let (tensors, dropped) = weights::read_checkpoint(input, &TRAINING_BUFFERS)?;
    let count = tensors.len();
    // Written beside the target and renamed, so a failed conversion leaves no partial file.
    let partial = output.with_extension("safetensors.partial");
    candle_core::safetensors::save(&tensors, &partial)
        .and_then(|_| std::fs::rename(&partial, output).map_err(candle_core::Error::from))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            Error::new(ErrorKind::BadWeights, format!("write {}: {e}", output.display()))
        })?;
    Ok(Converted { tensors: count, dropped })
}
