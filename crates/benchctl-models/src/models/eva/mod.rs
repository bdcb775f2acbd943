//! open_clip checkpoints whose image tower is timm's `Eva` (`open_clip_config.json` naming it in
//! `vision_cfg.timm_model_name`, the weights under `visual.trunk.`) beside open_clip's text
//! tower (`text.`): Perception Encoder's PE-Core ([`pe_core`]) and EVA02-CLIP ([`eva02`]). Each
//! family is one module with its table of towers; the tower ([`tower`]), the files and the
//! encoder are shared here.
//!
//! The config names a tower only: what timm's definition fixes for it is in the family's table;
//! the width, depth and MLP width come from the weights. The text tower is open_clip's, pooled
//! at the end token, captions cleaned as open_clip cleans them; images as the checkpoint's
//! `preprocess_cfg` says.

pub mod eva02;
pub mod pe_core;
pub mod tower;

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use super::clip::{ClipText, TextConfig};
use super::clip_openai::{check_plain, convert_text, read_open_clip_weights, OpenClipPreprocess, OpenClipText};
use super::transformer::l2_normalise;
use super::weights::Weights;
use crate::architecture::CaptionLimit;
use crate::hub::ModelFiles;
use crate::preprocess::Preprocessor;
use crate::tokenizer::{CaptionCleaning, ClipTokenizer};
use crate::{DualEncoder, Error, ErrorKind, Result, Similarity};
pub use tower::{Dims, EvaTower, EvaVision, Family, Pool};

/// `open_clip_config.json` of a `CustomTextCLIP` with a timm image tower.
#[derive(Debug, Clone, Deserialize)]
pub struct TimmClipFile {
    pub model_cfg: TimmClipConfig,
    #[serde(default)]
    pub preprocess_cfg: OpenClipPreprocess,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TimmClipConfig {
    pub embed_dim: usize,
    #[serde(default)]
    pub quick_gelu: bool,
    pub vision_cfg: TimmVision,
    pub text_cfg: OpenClipText,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TimmVision {
    pub image_size: usize,
    pub timm_model_name: String,
    #[serde(default)]
    pub timm_pool: Option<String>,
    #[serde(default)]
    pub timm_proj: Option<String>,
}

impl TimmClipFile {
    /// The file with its tower among `towers`, refused where it asks for what benchctl does not
    /// build: another tower, another pool than the family's, an extra projection (`timm_proj`),
    /// a text tower other than open_clip's plain one, preprocessing benchctl does not reproduce.
    pub fn from_file(path: &std::path::Path, towers: &'static [EvaTower]) -> Result<(Self, &'static EvaTower)> {
        let file: Self = super::read_config(path)?;
        let v = &file.model_cfg.vision_cfg;
        let bad = |what: String| Error::new(ErrorKind::BadConfig, format!("use {}: {what}", path.display()));
        let tower = towers.iter().find(|t| t.timm_name == v.timm_model_name).ok_or_else(|| {
            let names: Vec<&str> = towers.iter().map(|t| t.timm_name).collect();
            bad(format!(
                "the timm image tower `{}` is not supported (supported: {})",
                v.timm_model_name,
                names.join(", ")
            ))
        })?;
        let pool = tower.family.pool.name();
        if v.timm_pool.as_deref() != Some(pool) || v.timm_proj.is_some() {
            return Err(bad(format!(
                "model_cfg.vision_cfg pools with {:?} and projects with {:?}; {}'s towers pool with {pool:?} and project with none",
                v.timm_pool, v.timm_proj, tower.family.name
            )));
        }
        check_plain("text_cfg", &file.model_cfg.text_cfg.other, path)?;
        file.preprocess_cfg.check(path)?;
        Ok((file, tower))
    }

    pub fn text_config(&self) -> TextConfig {
        self.model_cfg.text_cfg.clip_text_config(self.model_cfg.quick_gelu)
    }
}

/// The tower's sizes as its weights give them.
fn dims_of(map: &HashMap<String, Tensor>, family: &Family, source: &std::path::Path) -> Result<Dims> {
    let shape = |name: &str| -> Result<Vec<usize>> {
        map.get(&format!("visual.trunk.{name}")).map(|t| t.dims().to_vec()).ok_or_else(|| {
            Error::new(
                ErrorKind::BadWeights,
                format!("read weights {}: tensor `visual.trunk.{name}` is missing", source.display()),
            )
        })
    };
    let patch = shape("patch_embed.proj.weight")?;
    let depth = (0..).take_while(|i| map.contains_key(&format!("visual.trunk.blocks.{i}.norm1.weight"))).count();
    let mlp = if family.swiglu { "blocks.0.mlp.fc1_g.weight" } else { "blocks.0.mlp.fc1.weight" };
    Ok(Dims {
        width: patch[0],
        patch: patch[patch.len() - 1],
        depth,
        mlp: shape(mlp)?[0],
        pool_mlp: match family.pool {
            Pool::Latent { .. } => shape("attn_pool.mlp.fc1.weight")?[0],
            Pool::ClassToken => 0,
        },
        embed: shape("head.weight")?[0],
    })
}

/// An open_clip `CustomTextCLIP` with an `Eva` image tower, its tokenizer and preprocessing: a
/// ready [`DualEncoder`].
#[derive(Debug, Clone)]
pub struct EvaClipEncoder {
    vision: EvaVision,
    text: ClipText,
    logit_scale: f32,
    tokenizer: ClipTokenizer,
    preprocessor: Preprocessor,
    device: Device,
}

impl EvaClipEncoder {
    /// A checkpoint whose tower is one of `towers` (a family's table).
    pub fn load(files: &ModelFiles, towers: &'static [EvaTower], dtype: DType, device: &Device) -> Result<Self> {
        let (file, tower) = TimmClipFile::from_file(&files.config, towers)?;
        let mut map = read_open_clip_weights(&files.weights, device)?;
        let dims = dims_of(&map, &tower.family, &files.weights)?;
        let vision_names: Vec<String> = map.keys().filter(|k| k.starts_with("visual.trunk.")).cloned().collect();
        let vision_map: HashMap<String, Tensor> =
            vision_names.into_iter().filter_map(|k| map.remove(&k).map(|t| (k, t))).collect();
        let mut text_map: HashMap<String, Tensor> =
            map.into_iter().map(|(k, t)| (k.strip_prefix("text.").map(str::to_string).unwrap_or(k), t)).collect();
        let text_config = file.text_config();
        let text_tensors =
            convert_text(&mut text_map, text_config.num_hidden_layers).map_err(|e| e.context(&files.weights))?;
        // `attn_mask` is a buffer older open_clip versions saved.
        text_map.remove("attn_mask");
        if let Some(left) = text_map.keys().next() {
            return Err(Error::new(
                ErrorKind::BadWeights,
                format!(
                    "load weights {}: tensor `{left}` is not part of a {} model",
                    files.weights.display(),
                    tower.family.name
                ),
            ));
        }
        let image_size = file.model_cfg.vision_cfg.image_size;
        let source = files.weights.display().to_string();
        // Marked as read, so that a tensor the tower does not read is named.
        let vision_weights = Weights::from_tensors(vision_map, dtype, device, &source);
        let vision = EvaVision::load(&vision_weights.pp("visual.trunk"), tower, image_size, &dims)?;
        vision_weights.check_every_tensor_used(tower.family.name, &[])?;
        let (text, logit_scale) =
            ClipText::from_tensors(&text_config, file.model_cfg.embed_dim, text_tensors, dtype, device, &source)?;
        let context = text_config.max_position_embeddings;
        let tokenizer = ClipTokenizer::from_file(&files.tokenizer, context, CaptionCleaning::OpenClip)?;
        let preprocessor = file.preprocess_cfg.preprocessor(image_size);
        Ok(Self { vision, text, logit_scale, tokenizer, preprocessor, device: device.clone() })
    }

    pub fn vision(&self) -> &EvaVision {
        &self.vision
    }

    pub fn text(&self) -> &ClipText {
        &self.text
    }

    pub fn tokenizer(&self) -> &ClipTokenizer {
        &self.tokenizer
    }
}

impl DualEncoder for EvaClipEncoder {
    fn device(&self) -> &Device {
        &self.device
    }

    fn preprocessor(&self) -> &Preprocessor {
        &self.preprocessor
    }

    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor> {
        let run = || l2_normalise(&self.vision.forward(pixels)?);
        run().map_err(|e| Error::compute("encode images", e))
    }

    fn encode_texts(&self, texts: &[&str]) -> Result<Tensor> {
        let ids = texts.iter().map(|t| self.tokenizer.encode(t)).collect::<Result<Vec<_>>>()?;
        l2_normalise(&self.text.text_features(&ids)?).map_err(|e| Error::compute("normalise text embeddings", e))
    }

    fn similarity(&self) -> Similarity {
        Similarity { scale: self.logit_scale, bias: 0.0, sigmoid: false }
    }
}

/// The caption limit of a checkpoint of `towers` (open_clip's tokenizer at its context).
fn caption_limit(files: &ModelFiles, towers: &'static [EvaTower]) -> Result<CaptionLimit> {
    let context = TimmClipFile::from_file(&files.config, towers)?.0.text_config().max_position_embeddings;
    super::clip::caption_limit(files, context, CaptionCleaning::OpenClip)
}

/// Text and image towers of a family's checkpoint config with random weights (benchmarks).
pub fn random_towers(
    file: &TimmClipFile,
    tower: &EvaTower,
    dtype: DType,
    device: &Device,
) -> Result<(EvaVision, ClipText)> {
    let embed = file.model_cfg.embed_dim;
    let vision = EvaVision::random(tower, file.model_cfg.vision_cfg.image_size, embed, dtype, device)?;
    Ok((vision, ClipText::random(&file.text_config(), embed, dtype, device)?))
}
