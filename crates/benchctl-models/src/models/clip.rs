//! CLIP (Radford et al., "Learning Transferable Visual Models From Natural Language
//! Supervision", 2021, <https://arxiv.org/abs/2103.00020>) in Hugging Face layout, e.g.
//! <https://huggingface.co/openai/clip-vit-base-patch32>.
//!
//! The architecture is read from `config.json` (`text_config`, `vision_config`,
//! `projection_dim`): width, depth, heads, patch and image size, activation
//! (`quick_gelu` for OpenAI weights, `gelu`), layer-norm epsilon and the end-of-text
//! convention. It follows `transformers`' `CLIPModel` and candle-transformers' CLIP, with
//! three differences that matter for evaluation: the activation and epsilon come from the
//! config instead of being fixed, a missing or misshapen tensor is an error instead of a
//! random initialisation, and texts are padded only to the longest text of a batch (the
//! causal mask makes padding after the end token irrelevant to the pooled output).

use std::path::Path;

use candle_core::{DType, Device, IndexOp, Module, Tensor};
use candle_nn::Linear;
use serde::Deserialize;

pub use super::transformer::Activation;
use super::transformer::{l2_normalise, load_blocks, run_blocks, Block, PatchEmbedding, Tower};
use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::ModelFiles;
use crate::hub::HF_LAYOUT;
use crate::kernels::LayerNorm;
use crate::preprocess::Preprocessor;
use crate::tokenizer::{CaptionCleaning, ClipTokenizer};
use crate::{DualEncoder, Error, ErrorKind, Result, Similarity};

/// `config.json` of a `CLIPModel`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ClipConfig {
    pub text_config: TextConfig,
    pub vision_config: VisionConfig,
    #[serde(default = "defaults::projection_dim")]
    pub projection_dim: usize,
}

/// `text_config`, with `transformers`' defaults for absent keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TextConfig {
    #[serde(default = "defaults::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "defaults::text_hidden")]
    pub hidden_size: usize,
    #[serde(default = "defaults::text_intermediate")]
    pub intermediate_size: usize,
    #[serde(default = "defaults::depth")]
    pub num_hidden_layers: usize,
    #[serde(default = "defaults::text_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "defaults::max_positions")]
    pub max_position_embeddings: usize,
    #[serde(default = "defaults::act")]
    pub hidden_act: String,
    #[serde(default = "defaults::eps")]
    pub layer_norm_eps: f64,
    /// 2 in older configs (OpenAI's uploads): the end token is then found as the largest id,
    /// as `transformers` does for them.
    #[serde(default = "defaults::eos")]
    pub eos_token_id: u32,
}

/// `vision_config`, with `transformers`' defaults for absent keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VisionConfig {
    #[serde(default = "defaults::vision_hidden")]
    pub hidden_size: usize,
    #[serde(default = "defaults::vision_intermediate")]
    pub intermediate_size: usize,
    #[serde(default = "defaults::depth")]
    pub num_hidden_layers: usize,
    #[serde(default = "defaults::vision_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "defaults::channels")]
    pub num_channels: usize,
    #[serde(default = "defaults::image_size")]
    pub image_size: usize,
    #[serde(default = "defaults::patch_size")]
    pub patch_size: usize,
    #[serde(default = "defaults::act")]
    pub hidden_act: String,
    #[serde(default = "defaults::eps")]
    pub layer_norm_eps: f64,
}

mod defaults {
    pub fn projection_dim() -> usize {
        512
    }
    pub fn vocab_size() -> usize {
        49408
    }
    pub fn text_hidden() -> usize {
        512
    }
    pub fn text_intermediate() -> usize {
        2048
    }
    pub fn depth() -> usize {
        12
    }
    pub fn text_heads() -> usize {
        8
    }
    pub fn max_positions() -> usize {
        77
    }
    pub fn act() -> String {
        "quick_gelu".into()
    }
    pub fn eps() -> f64 {
        1e-5
    }
    pub fn eos() -> u32 {
        49407
    }
    pub fn vision_hidden() -> usize {
        768
    }
    pub fn vision_intermediate() -> usize {
        3072
    }
    pub fn vision_heads() -> usize {
        12
    }
    pub fn channels() -> usize {
        3
    }
    pub fn image_size() -> usize {
        224
    }
    pub fn patch_size() -> usize {
        32
    }
}

impl ClipConfig {
    /// Reads and validates `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let config: Self = super::read_config(path)?;
        super::check_patch_grid(path, config.vision_config.image_size, config.vision_config.patch_size)?;
        config.validate(path)?;
        Ok(config)
    }

    /// OpenAI's ViT-B/32 (`openai/clip-vit-base-patch32`), for benchmarks on random weights.
    pub fn vit_b32() -> Self {
        use defaults as d;
        Self {
            text_config: TextConfig {
                vocab_size: d::vocab_size(),
                hidden_size: d::text_hidden(),
                intermediate_size: d::text_intermediate(),
                num_hidden_layers: d::depth(),
                num_attention_heads: d::text_heads(),
                max_position_embeddings: d::max_positions(),
                hidden_act: d::act(),
                layer_norm_eps: d::eps(),
                eos_token_id: d::eos(),
            },
            vision_config: VisionConfig {
                hidden_size: d::vision_hidden(),
                intermediate_size: d::vision_intermediate(),
                num_hidden_layers: d::depth(),
                num_attention_heads: d::vision_heads(),
                num_channels: d::channels(),
                image_size: d::image_size(),
                patch_size: d::patch_size(),
                hidden_act: d::act(),
                layer_norm_eps: d::eps(),
            },
            projection_dim: d::projection_dim(),
        }
    }

    /// Refuses a config the towers cannot be built from, naming the file and key.
    fn validate(&self, path: &Path) -> Result<()> {
        let bad = |what: String| Error::new(ErrorKind::BadConfig, format!("use {}: {what}", path.display()));
        let t = &self.text_config;
        let v = &self.vision_config;
        for (key, width, heads) in [
            ("text_config", t.hidden_size, t.num_attention_heads),
            ("vision_config", v.hidden_size, v.num_attention_heads),
        ] {
            if heads == 0 || width % heads != 0 {
                return Err(bad(format!("{key}.hidden_size {width} is not a multiple of num_attention_heads {heads}")));
            }
        }
        for (key, act) in [("text_config", &t.hidden_act), ("vision_config", &v.hidden_act)] {
            Activation::parse(act).map_err(|e| bad(format!("{key}.hidden_act: {e}")))?;
        }
        Ok(())
    }
}

/// The text tower and its projection.
#[derive(Debug, Clone)]
struct TextTower {
    token_embedding: Tensor,
    position_embedding: Tensor,
    blocks: Vec<Block>,
    final_norm: LayerNorm,
    projection: Linear,
    eos_token_id: u32,
    /// `transformers`' `CLIPTextModel` reads `eos_token_id == 2` as a legacy config and pools
    /// at the largest id; models that do not (MetaCLIP 2) pool at the first `eos_token_id`.
    largest_id_when_eos_is_2: bool,
}

/// The vision tower and its projection.
#[derive(Debug, Clone)]
struct VisionTower {
    trunk: VisionTrunk,
    post_norm: LayerNorm,
    projection: Linear,
}

impl VisionTower {
    /// The vision tower under `vision_model.` and its projection `visual_projection`.
    fn load(w: &Weights, vc: &VisionConfig, projection_dim: usize) -> Result<Self> {
        let v = w.pp("vision_model");
        Ok(VisionTower {
            trunk: VisionTrunk::load(&v, vc)?,
            post_norm: v.pp("post_layernorm").layer_norm(vc.hidden_size, vc.layer_norm_eps)?,
            projection: w.pp("visual_projection").linear(vc.hidden_size, projection_dim, false)?,
        })
    }

    fn forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let xs = self.trunk.forward(pixels)?;
        let pooled = self.post_norm.forward(&xs.i((.., 0, ..))?)?;
        self.projection.forward(&pooled)
    }
}

/// CLIP's vision transformer without its pooling: embeddings, the pre-norm and the blocks, each
/// token's hidden state after a given block (`hidden_states[layer]` of `transformers`'
/// `CLIPVisionModel`), the class token first. LLaVA-style models (CLIP-FlanT5) read a layer
/// before the last.
#[derive(Debug, Clone)]
pub struct VisionTrunk {
    patch_embedding: PatchEmbedding,
    class_embedding: Tensor,
    position_embedding: Tensor,
    pre_norm: LayerNorm,
    blocks: Vec<Block>,
}

impl VisionTrunk {
    /// The trunk under `v` (a `vision_model.` prefix).
    pub(crate) fn load(v: &Weights, vc: &VisionConfig) -> Result<Self> {
        let tower = Tower::new(
            vc.hidden_size,
            vc.intermediate_size,
            vc.num_hidden_layers,
            vc.num_attention_heads,
            &vc.hidden_act,
            vc.layer_norm_eps,
        )?;
        let patches = (vc.image_size / vc.patch_size).pow(2);
        Ok(VisionTrunk {
            patch_embedding: PatchEmbedding::load(
                &v.pp("embeddings.patch_embedding"),
                vc.hidden_size,
                vc.num_channels,
                vc.patch_size,
                false,
            )?,
            class_embedding: v.get(vc.hidden_size, "embeddings.class_embedding")?,
            position_embedding: v.get((patches + 1, vc.hidden_size), "embeddings.position_embedding.weight")?,
            pre_norm: v.pp("pre_layrnorm").layer_norm(vc.hidden_size, vc.layer_norm_eps)?,
            blocks: load_blocks(v, &tower)?,
        })
    }

    /// `(b, C, H, W)` pixels → `(b, 1 + patches, width)` after the last block, the class
    /// token first.
    pub fn forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        self.hidden_state(pixels, self.blocks.len())
    }

    /// The blocks, as `hidden_states` counts them (0: the embeddings after the pre-norm).
    pub fn depth(&self) -> usize {
        self.blocks.len()
    }

    /// `(b, C, H, W)` pixels → `(b, 1 + patches, width)` after the first `layer` blocks (at
    /// most [`VisionTrunk::depth`]), the class token first.
    pub fn hidden_state(&self, pixels: &Tensor, layer: usize) -> candle_core::Result<Tensor> {
        let b = pixels.dim(0)?;
        let patch_embeds = self.patch_embedding.forward(pixels)?;
        let width = self.class_embedding.dim(0)?;
        let class = self.class_embedding.reshape((1, 1, width))?.broadcast_as((b, 1, width))?;
        let xs = Tensor::cat(&[&class, &patch_embeds], 1)?.broadcast_add(&self.position_embedding)?;
        run_blocks(&self.blocks[..layer.min(self.blocks.len())], self.pre_norm.forward(&xs)?, None)
    }
}

/// CLIP's vision tower alone, e.g. for weights converted from OpenAI's naming
/// ([`super::clip_openai`]).
#[derive(Debug, Clone)]
pub struct ClipVision {
    tower: VisionTower,
}

impl ClipVision {
    /// The tower from tensors in Hugging Face naming (`vision_model.…`, `visual_projection.weight`).
    pub fn from_tensors(
        config: &VisionConfig,
        projection_dim: usize,
        tensors: std::collections::HashMap<String, Tensor>,
        device: &Device,
    ) -> Result<Self> {
        let vb = candle_nn::VarBuilder::from_tensors(tensors, DType::F32, device);
        let w = Weights::from_var_builder(vb, "converted weights");
        Ok(Self { tower: VisionTower::load(&w, config, projection_dim)? })
    }

    /// Projected, unnormalised image features.
    pub fn image_features(&self, pixels: &Tensor) -> Result<Tensor> {
        self.tower.forward(pixels).map_err(|e| Error::compute("encode images", e))
    }
}

/// One pre-norm residual attention block on its own (for reference vectors of a single block).
#[derive(Debug, Clone)]
pub struct ResidualBlock(Block);

impl ResidualBlock {
    /// The block from tensors in Hugging Face naming (`layer_norm1`, `self_attn.{q,k,v,out}_proj`,
    /// `layer_norm2`, `mlp.fc1`, `mlp.fc2`), with OpenAI's QuickGELU and ε = 1e-5.
    pub fn from_tensors(
        width: usize,
        heads: usize,
        tensors: std::collections::HashMap<String, Tensor>,
        device: &Device,
    ) -> Result<Self> {
        let vb = candle_nn::VarBuilder::from_tensors(tensors, DType::F32, device);
        let w = Weights::from_var_builder(vb, "converted weights");
        let tower = Tower::new(width, 4 * width, 1, heads, "quick_gelu", 1e-5)?;
        Ok(Self(Block::load(&w, &tower)?))
    }

    /// `(batch, seq, width)` → `(batch, seq, width)`, no mask.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        self.0.forward(xs, None).map_err(|e| Error::compute("run a residual block", e))
    }
}

/// A CLIP model: both towers, both projections and the learned temperature.
#[derive(Debug, Clone)]
pub struct Clip {
    config: ClipConfig,
    text: TextTower,
    vision: VisionTower,
    logit_scale: f32,
    device: Device,
}

impl Clip {
    /// Loads `model.safetensors` against `config`, converting weights to `dtype`.
    pub fn load(config: ClipConfig, weights: &Path, dtype: DType, device: &Device) -> Result<Self> {
        let w = Weights::open(weights, dtype, device)?;
        let model = Self::from_weights(config, &w)?;
        // Position ids are a buffer transformers saved in older checkpoints.
        w.check_every_tensor_used("CLIP", &[".position_ids"])?;
        Ok(model)
    }

    /// A model with random weights of the configured shape (for benchmarks).
    pub fn random(config: ClipConfig, dtype: DType, device: &Device) -> Result<Self> {
        Weights::build_random(dtype, device, "random weights", |w| Self::from_weights(config.clone(), w))
    }

    /// Writes a model of this shape with random weights as `model.safetensors` (Hugging Face
    /// naming) to `path`: full-size benchmarks of the whole evaluation path, no download.
    pub fn save_random(config: &ClipConfig, path: &Path) -> Result<()> {
        let varmap = candle_nn::VarMap::new();
        let vb = candle_nn::VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
        drop(Self::from_weights(config.clone(), &Weights::from_var_builder(vb, "random weights").random())?);
        varmap.save(path).map_err(|e| {
            Error::caused_by(ErrorKind::BadWeights, format!("write random weights {}: {e}", path.display()), e)
        })
    }

    /// A model from tensors in Hugging Face naming (e.g. converted from OpenAI's naming);
    /// `source` names them in errors.
    pub fn from_tensors(
        config: ClipConfig,
        tensors: std::collections::HashMap<String, Tensor>,
        dtype: DType,
        device: &Device,
        source: &str,
    ) -> Result<Self> {
        let vb = candle_nn::VarBuilder::from_tensors(tensors, dtype, device);
        Self::from_weights(config, &Weights::from_var_builder(vb, source))
    }

    fn from_weights(config: ClipConfig, w: &Weights) -> Result<Self> {
        let text = TextTower::load(w, &config.text_config, config.projection_dim)?;
        let vision = VisionTower::load(w, &config.vision_config, config.projection_dim)?;
        let logit_scale = read_logit_scale(w)?;
        Ok(Self { config, text, vision, logit_scale, device: w.device().clone() })
    }

    pub fn config(&self) -> &ClipConfig {
        &self.config
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// `exp(logit_scale)`: the factor from cosine similarity to logit.
    pub fn logit_scale(&self) -> f32 {
        self.logit_scale
    }

    /// Projected, unnormalised image features (`get_image_features`): `(b, C, H, W)` → `(b, projection_dim)`.
    pub fn image_features(&self, pixels: &Tensor) -> Result<Tensor> {
        self.vision_forward(pixels).map_err(|e| Error::compute("encode images", e))
    }

    /// Projected, unnormalised text features (`get_text_features`) of token id rows.
    /// Rows may differ in length; they are padded to the longest.
    pub fn text_features(&self, ids: &[Vec<u32>]) -> Result<Tensor> {
        self.text_forward(ids).map_err(|e| Error::compute("encode texts", e))
    }

    fn vision_forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        self.vision.forward(pixels)
    }

    fn text_forward(&self, ids: &[Vec<u32>]) -> candle_core::Result<Tensor> {
        self.text.forward(ids, &self.device)
    }

    /// The same model pooling its texts at the first `eos_token_id` whatever it is.
    pub fn pooling_at_first_eos(mut self) -> Self {
        self.text.largest_id_when_eos_is_2 = false;
        self
    }
}

impl TextTower {
    fn load(w: &Weights, tc: &TextConfig, projection_dim: usize) -> Result<Self> {
        let tower = Tower::new(
            tc.hidden_size,
            tc.intermediate_size,
            tc.num_hidden_layers,
            tc.num_attention_heads,
            &tc.hidden_act,
            tc.layer_norm_eps,
        )?;
        let t = w.pp("text_model");
        Ok(TextTower {
            token_embedding: t.get((tc.vocab_size, tc.hidden_size), "embeddings.token_embedding.weight")?,
            position_embedding: t
                .get((tc.max_position_embeddings, tc.hidden_size), "embeddings.position_embedding.weight")?,
            blocks: load_blocks(&t, &tower)?,
            final_norm: t.pp("final_layer_norm").layer_norm(tc.hidden_size, tc.layer_norm_eps)?,
            projection: w.pp("text_projection").linear(tc.hidden_size, projection_dim, false)?,
            eos_token_id: tc.eos_token_id,
            largest_id_when_eos_is_2: true,
        })
    }

    /// Projected text features of id rows (padded to the longest), causally masked, pooled
    /// at each row's end token.
    fn forward(&self, ids: &[Vec<u32>], device: &Device) -> candle_core::Result<Tensor> {
        let b = ids.len();
        let s = ids.iter().map(Vec::len).max().unwrap_or(0);
        let max_positions = self.position_embedding.dim(0)?;
        if b == 0 || s == 0 || s > max_positions {
            candle_core::bail!("texts must have 1 to {max_positions} tokens, got a batch of {b} up to {s} tokens");
        }
        let mut flat = Vec::with_capacity(b * s);
        let mut ends = Vec::with_capacity(b);
        for (row, seq) in ids.iter().enumerate() {
            flat.extend_from_slice(seq);
            flat.extend(std::iter::repeat_n(0u32, s - seq.len()));
            ends.push((row * s + self.end_position(seq)) as u32);
        }
        let ids = Tensor::from_vec(flat, (b * s,), device)?;
        let xs = self.token_embedding.index_select(&ids, 0)?.reshape((b, s, ()))?;
        let xs = xs.broadcast_add(&self.position_embedding.narrow(0, 0, s)?)?;
        let mask: Vec<f32> =
            (0..s).flat_map(|i| (0..s).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 })).collect();
        let mask = Tensor::from_vec(mask, (s, s), device)?.to_dtype(xs.dtype())?;
        let xs = run_blocks(&self.blocks, xs, Some(&mask))?;
        let xs = self.final_norm.forward(&xs)?;
        let ends = Tensor::from_vec(ends, (b,), device)?;
        let pooled = xs.reshape((b * s, ()))?.index_select(&ends, 0)?;
        self.projection.forward(&pooled)
    }

    /// Where a sequence's end token is: the first `eos_token_id`, or for legacy configs
    /// (`eos_token_id == 2`) the first largest id, as `transformers` pools.
    fn end_position(&self, seq: &[u32]) -> usize {
        if self.eos_token_id == 2 && self.largest_id_when_eos_is_2 {
            let max = seq.iter().copied().max().unwrap_or(0);
            seq.iter().position(|&id| id == max).unwrap_or(0)
        } else {
            seq.iter().position(|&id| id == self.eos_token_id).unwrap_or(seq.len() - 1)
        }
    }
}

/// CLIP's text tower alone, e.g. beside another image tower in open_clip's `CustomTextCLIP`
/// ([`super::eva`]).
#[derive(Debug, Clone)]
pub struct ClipText {
    tower: TextTower,
    device: Device,
}

impl ClipText {
    /// The tower from tensors in Hugging Face naming (`text_model.…`, `text_projection.weight`,
    /// `logit_scale`), and `exp(logit_scale)`; `source` names them in errors.
    pub fn from_tensors(
        config: &TextConfig,
        projection_dim: usize,
        tensors: std::collections::HashMap<String, Tensor>,
        dtype: DType,
        device: &Device,
        source: &str,
    ) -> Result<(Self, f32)> {
        let w = Weights::from_var_builder(candle_nn::VarBuilder::from_tensors(tensors, dtype, device), source);
        let tower = TextTower::load(&w, config, projection_dim)?;
        let logit_scale = read_logit_scale(&w)?;
        w.check_every_tensor_used("a text tower", &[])?;
        Ok((Self { tower, device: device.clone() }, logit_scale))
    }

    /// The tower of `config`'s shape with random weights (benchmarks).
    pub fn random(config: &TextConfig, projection_dim: usize, dtype: DType, device: &Device) -> Result<Self> {
        let tower =
            Weights::build_random(dtype, device, "random weights", |w| TextTower::load(w, config, projection_dim))?;
        Ok(Self { tower, device: device.clone() })
    }

    /// The context it was built for.
    pub fn max_positions(&self) -> usize {
        self.tower.position_embedding.dim(0).unwrap_or(0)
    }

    /// The size of its vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.tower.token_embedding.dim(0).unwrap_or(0)
    }

    /// Projected, unnormalised text features of token id rows (pooled at the largest id, as
    /// open_clip's `argmax`, or at the first `eos_token_id`).
    pub fn text_features(&self, ids: &[Vec<u32>]) -> Result<Tensor> {
        self.tower.forward(ids, &self.device).map_err(|e| Error::compute("encode texts", e))
    }
}

/// `exp(logit_scale)`.
fn read_logit_scale(w: &Weights) -> Result<f32> {
    Ok(w.get((), "logit_scale")?
        .to_dtype(DType::F32)
        .and_then(|s| s.to_scalar::<f32>())
        .map_err(|e| Error::compute("read logit_scale", e))?
        .exp())
}

/// CLIP with its tokenizer and preprocessing: a ready [`DualEncoder`].
#[derive(Debug, Clone)]
pub struct ClipEncoder {
    model: Clip,
    tokenizer: ClipTokenizer,
    preprocessor: Preprocessor,
}

impl ClipEncoder {
    /// Loads a model from its files.
    pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Self> {
        let config = ClipConfig::from_file(&files.config)?;
        let context = config.text_config.max_position_embeddings;
        let tokenizer = ClipTokenizer::from_file(&files.tokenizer, context, CaptionCleaning::HtmlReferences)?;
        if tokenizer.eos() as usize >= config.text_config.vocab_size {
            return Err(Error::new(
                ErrorKind::Tokenizer,
                format!(
                    "use tokenizer {}: its end token {} is outside the model's vocabulary of {}",
                    files.tokenizer.display(),
                    tokenizer.eos(),
                    config.text_config.vocab_size
                ),
            ));
        }
        let size = config.vision_config.image_size;
        let preprocessor = Preprocessor::for_hf_model(files, Preprocessor::hf_clip(size), size)?;
        let model = Clip::load(config, &files.weights, dtype, device)?;
        Ok(Self { model, tokenizer, preprocessor })
    }

    /// A model of the given shape with random weights and the given tokenizer (benchmarks).
    pub fn random(config: ClipConfig, tokenizer: ClipTokenizer, dtype: DType, device: &Device) -> Result<Self> {
        let preprocessor = Preprocessor::openai_clip(config.vision_config.image_size);
        Ok(Self { model: Clip::random(config, dtype, device)?, tokenizer, preprocessor })
    }

    /// A model with its tokenizer and preprocessing.
    pub fn from_parts(model: Clip, tokenizer: ClipTokenizer, preprocessor: Preprocessor) -> Self {
        Self { model, tokenizer, preprocessor }
    }

    pub fn model(&self) -> &Clip {
        &self.model
    }

    pub fn tokenizer(&self) -> &ClipTokenizer {
        &self.tokenizer
    }
}

impl DualEncoder for ClipEncoder {
    fn device(&self) -> &Device {
        self.model.device()
    }

    fn preprocessor(&self) -> &Preprocessor {
        &self.preprocessor
    }

    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor> {
        let features = self.model.image_features(pixels)?;
        l2_normalise(&features).map_err(|e| Error::compute("normalise image embeddings", e))
    }

    fn encode_texts(&self, texts: &[&str]) -> Result<Tensor> {
        let ids = texts.iter().map(|t| self.tokenizer.encode(t)).collect::<Result<Vec<_>>>()?;
        let features = self.model.text_features(&ids)?;
        l2_normalise(&features).map_err(|e| Error::compute("normalise text embeddings", e))
    }

    /// `exp(logit_scale) · cos`, the logits of `CLIPModel`.
    fn similarity(&self) -> Similarity {
        Similarity { scale: self.model.logit_scale, bias: 0.0, sigmoid: false }
    }
}

/// CLIP in Hugging Face layout, as [`crate::registry::ARCHITECTURES`] lists it.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "clip",
    model_types: &["clip"],
    layout: HF_LAYOUT,
    timm_towers: &[],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Contrastive],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |size| Some(Preprocessor::hf_clip(size)),
    caption_limit: |files, _| {
        let context = ClipConfig::from_file(&files.config)?.text_config.max_position_embeddings;
        caption_limit(files, context, CaptionCleaning::HtmlReferences)
    },
    load: |_, files, dtype, device| Ok(crate::Model::Dual(Box::new(ClipEncoder::load(files, dtype, device)?))),
    bench_towers: BenchTowers::Clip,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: false,
    images_together: false,
    generates_replies: false,
});

/// The CLIP tokenizer's caption limit at a context of `context` tokens, its captions cleaned
/// by `cleaning`.
pub(crate) fn caption_limit(files: &ModelFiles, context: usize, cleaning: CaptionCleaning) -> Result<CaptionLimit> {
    let tokenizer = ClipTokenizer::from_file(&files.tokenizer, context, cleaning)?;
    Ok(CaptionLimit::new(context, move |t| tokenizer.tokens_cut(t)))
}
