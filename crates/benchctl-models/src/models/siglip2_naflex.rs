//! SigLIP 2 NaFlex (Tschannen et al., "SigLIP 2", 2025, <https://arxiv.org/abs/2502.14786>) in
//! Hugging Face layout (`Siglip2Model`, `model_type` "siglip2"), e.g.
//! <https://huggingface.co/google/siglip2-base-patch16-naflex>.
//!
//! SigLIP's towers, head and text side ([`super::siglip`]); what sets NaFlex apart:
//! - each image keeps about its aspect ratio: resized to the largest grid of at most
//!   `max_num_patches` patches ([`crate::preprocess::Resize::Patches`], Pillow's bilinear
//!   filter, as `Siglip2ImageProcessor` does it), so images of one batch differ in size;
//!   `transformers` pads them to `max_num_patches` and masks the padding in every layer and in
//!   the pooling head, benchctl encodes images of each size together without padding, which
//!   gives the same embeddings (the padding never reaches a real patch);
//! - patches are embedded by a linear layer over the pixels of each patch, row by row with the
//!   channels innermost (loaded as the equivalent convolution);
//! - the square grid of position embeddings is resized to each image's grid, bilinear and
//!   antialiased ([`super::siglip::resized_positions`]);
//! - `Siglip2ImageProcessor` declares no `do_convert_rgb`, and without it refuses an image that
//!   is not RGB; benchctl converts such an image as `transformers`' `load_image` does
//!   (`convert("RGB")`), or composites it over white where the settings say `do_convert_rgb`.

use candle_core::{DType, Device};
use serde::Deserialize;

use super::siglip::{Positions, Siglip, SiglipEncoder, SiglipText, SiglipTextConfig, VisionTower};
use super::transformer::{load_blocks, PatchEmbedding, Tower};
use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::{ModelFiles, HF_LAYOUT};
use crate::preprocess::{
    ColourKey, Filter, ImageSettings, ModeRule, Pipeline, Preprocessor, Resize, HALF, RESCALE_1_255,
};
use crate::{Error, ErrorKind, Result};

/// `Siglip2Processor`'s patch budget where the settings name none.
pub const DEFAULT_MAX_PATCHES: usize = 256;

/// `config.json` of a `Siglip2Model`, with `transformers`' defaults (base/16, 256 patches).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Siglip2Config {
    #[serde(default)]
    pub text_config: SiglipTextConfig,
    #[serde(default)]
    pub vision_config: Siglip2VisionConfig,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct Siglip2VisionConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_channels: usize,
    /// The position embeddings: a square grid of this many.
    pub num_patches: usize,
    pub patch_size: usize,
    pub hidden_act: String,
    pub layer_norm_eps: f64,
}

impl Default for Siglip2VisionConfig {
    fn default() -> Self {
        Self {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            num_channels: 3,
            num_patches: 256,
            patch_size: 16,
            hidden_act: "gelu_pytorch_tanh".into(),
            layer_norm_eps: 1e-6,
        }
    }
}

impl Siglip2VisionConfig {
    /// The side of the square grid of position embeddings.
    pub fn grid_side(&self) -> usize {
        (self.num_patches as f64).sqrt().round() as usize
    }

    fn tower(&self) -> Result<Tower> {
        Tower::new(
            self.hidden_size,
            self.intermediate_size,
            self.num_hidden_layers,
            self.num_attention_heads,
            &self.hidden_act,
            self.layer_norm_eps,
        )
    }
}

impl Siglip2Config {
    /// `google/siglip2-base-patch16-naflex`'s shape (benchmarks on random weights).
    pub fn base_patch16_naflex() -> Self {
        Siglip2Config {
            text_config: SiglipTextConfig { vocab_size: 256_000, pad_token_id: Some(0), ..Default::default() },
            vision_config: Siglip2VisionConfig::default(),
        }
    }

    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let config: Self = super::read_config(path)?;
        let (v, t) = (&config.vision_config, &config.text_config);
        let bad = |what: String| Error::new(ErrorKind::BadConfig, format!("use {}: {what}", path.display()));
        if v.patch_size == 0 || v.num_channels != 3 {
            return Err(bad(format!(
                "vision_config needs a patch size and 3 channels, not {} and {}",
                v.patch_size, v.num_channels
            )));
        }
        if v.num_patches == 0 || v.grid_side().pow(2) != v.num_patches {
            return Err(bad(format!("vision_config.num_patches {} is not a square grid", v.num_patches)));
        }
        let projection = t.projection_size.unwrap_or(t.hidden_size);
        if projection != v.hidden_size {
            return Err(bad(format!(
                "the text head's width {projection} must equal the vision width {}",
                v.hidden_size
            )));
        }
        Ok(config)
    }
}

/// The vision tower of a NaFlex checkpoint (`vision_model.*`).
fn vision_tower(v: &Weights, config: &Siglip2VisionConfig) -> Result<VisionTower> {
    let (width, p, c) = (config.hidden_size, config.patch_size, config.num_channels);
    let linear = v.get((width, p * p * c), "embeddings.patch_embedding.weight")?;
    // `(width, p, p, C)` as `Siglip2ImageProcessor` flattens a patch → the convolution's
    // `(width, C, p, p)`, so that the shared patch embedding cuts whole images into patches.
    let conv = linear
        .reshape((width, p, p, c))
        .and_then(|w| w.permute((0, 3, 1, 2))?.contiguous())
        .map_err(|e| Error::compute("lay out the patch embedding", e))?;
    Ok(VisionTower {
        patch_embedding: PatchEmbedding::from_conv(conv, Some(v.get(width, "embeddings.patch_embedding.bias")?))?,
        positions: Positions::Resized {
            grid: v.get((config.num_patches, width), "embeddings.position_embedding.weight")?,
            side: config.grid_side(),
        },
        blocks: load_blocks(v, &config.tower()?)?,
        post_norm: v.pp("post_layernorm").layer_norm(width, config.layer_norm_eps)?,
    })
}

fn from_weights(config: &Siglip2Config, w: &Weights) -> Result<Siglip> {
    let vision = vision_tower(&w.pp("vision_model"), &config.vision_config)?;
    Siglip::assemble(vision, &config.vision_config.tower()?, &config.text_config, w)
}

/// A NaFlex model with random weights of the configured shape (benchmarks).
pub fn random(config: &Siglip2Config, dtype: DType, device: &Device) -> Result<Siglip> {
    Weights::build_random(dtype, device, "random weights", |w| from_weights(config, w))
}

/// `Siglip2ImageProcessor` under the checkpoint's settings (`patch_size`, `max_num_patches`,
/// `resample`, mean and std; its defaults where absent), whose patch must be the tower's.
pub fn preprocessor(files: &ModelFiles, config: &Siglip2VisionConfig) -> Result<Preprocessor> {
    let defaults = Preprocessor {
        size: config.patch_size,
        resize: Resize::Patches { patch: config.patch_size, max_patches: DEFAULT_MAX_PATCHES },
        mean: HALF,
        std: HALF,
        pipeline: Pipeline::Transformers { rescale_factor: RESCALE_1_255 },
        filter: Filter::Bilinear,
        modes: ModeRule::ConvertFirst { colour_key: ColourKey::Kept },
        square_canvas: None,
    };
    let Some(settings) = ImageSettings::of(files)? else {
        return Ok(defaults);
    };
    let mut preprocessor = crate::preprocess::read_settings(&settings, &defaults)?;
    if settings.converts_rgb_or(false)? {
        preprocessor.modes = ModeRule::OverWhite;
    }
    if preprocessor.size != config.patch_size {
        return Err(settings.bad(
            "patch_size",
            format!("{} px, but {} has patch_size {}", preprocessor.size, files.config.display(), config.patch_size),
        ));
    }
    Ok(preprocessor)
}

/// Loads a NaFlex checkpoint as a SigLIP [`SiglipEncoder`], preparing captions as `prep` says,
/// its images at most `max_patches` patches where given (as `processor(images,
/// max_num_patches=…)`), else the checkpoint's budget.
pub fn load(
    files: &ModelFiles,
    prep: TextPrep,
    max_patches: Option<usize>,
    dtype: DType,
    device: &Device,
) -> Result<SiglipEncoder> {
    let config = Siglip2Config::from_file(&files.config)?;
    let tokenizer = SiglipText::of(files, &config.text_config, prep)?;
    let mut preprocessor = preprocessor(files, &config.vision_config)?;
    if let Some(budget) = max_patches {
        preprocessor.resize = Resize::Patches { patch: config.vision_config.patch_size, max_patches: budget };
    }
    let w = Weights::open(&files.weights, dtype, device)?;
    let model = from_weights(&config, &w)?;
    w.check_every_tensor_used("SigLIP 2 NaFlex", &[".position_ids"])?;
    Ok(SiglipEncoder::from_parts(model, tokenizer, preprocessor))
}

/// SigLIP 2 NaFlex in Hugging Face layout (`Siglip2Model`), as
/// [`crate::registry::ARCHITECTURES`] lists it.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "siglip2-naflex",
    model_types: &["siglip2"],
    layout: HF_LAYOUT,
    timm_towers: &[],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Sigmoid],
    text_preps: &TextPrep::ALL,
    default_preprocessor: |_| None,
    caption_limit: |files, prep| {
        let config = Siglip2Config::from_file(&files.config)?;
        let tokenizer = SiglipText::of(files, &config.text_config, prep)?;
        Ok(CaptionLimit::new(config.text_config.max_position_embeddings, move |t| tokenizer.tokens_cut(t)))
    },
    load: |choice, files, dtype, device| {
        Ok(crate::Model::Dual(Box::new(load(files, choice.text_prep, choice.max_patches, dtype, device)?)))
    },
    bench_towers: BenchTowers::Siglip2Naflex,
    pre_captions: false,
    patch_budget: true,
    processor_pixels: false,
    images_together: false,
    generates_replies: false,
});
