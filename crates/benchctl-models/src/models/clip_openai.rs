//! CLIP weights in OpenAI's own naming (the `clip` package's state dicts, which OpenCLIP
//! keeps), converted on load to the Hugging Face naming of [`super::clip`].
//!
//! OpenAI's names and their conversion:
//! - `[visual.]conv1.weight` → `vision_model.embeddings.patch_embedding.weight`;
//!   `class_embedding`, `positional_embedding` → `embeddings.class_embedding`,
//!   `embeddings.position_embedding.weight`; `ln_pre`, `ln_post` → `pre_layrnorm`,
//!   `post_layernorm`; `proj` (a `width × output` matrix applied as `x @ proj`) →
//!   `visual_projection.weight`, transposed;
//! - in each `transformer.resblocks.N`: `attn.in_proj_weight` / `_bias` (q, k and v stacked)
//!   split into `self_attn.{q,k,v}_proj`; `attn.out_proj` → `self_attn.out_proj`; `ln_1`,
//!   `ln_2` → `layer_norm1`, `layer_norm2`; `mlp.c_fc`, `mlp.c_proj` → `mlp.fc1`, `mlp.fc2`;
//! - the text tower at the top level: `token_embedding`, `positional_embedding`,
//!   `transformer.resblocks.N`, `ln_final` → `text_model.…`; `text_projection` (applied as
//!   `x @ text_projection`) → `text_projection.weight`, transposed; `logit_scale` as is.
//!
//! A full OpenCLIP checkpoint ([`load_open_clip`], e.g.
//! <https://huggingface.co/laion/CLIP-ViT-B-32-laion2B-s34B-b79K>, Cherti et al. 2023,
//! <https://arxiv.org/abs/2212.07143>) comes with `open_clip_config.json`, whose
//! `model_cfg.quick_gelu` decides the activation: OpenAI-trained weights need QuickGELU,
//! LAION-trained ones GELU, and using the wrong one shifts every score without an error.
//! Its `preprocess_cfg` decides the resize: `shortest` (shorter side, then a centre crop) or
//! `squash` (both sides to the input size, as Apple's DFN-5B checkpoints were trained,
//! <https://huggingface.co/apple/DFN5B-CLIP-ViT-H-14-378>, Fang et al. 2023,
//! <https://arxiv.org/abs/2309.17425>). The weights are `open_clip_model.safetensors`, or the
//! PyTorch file `open_clip_pytorch_model.bin` where a repo has only that, as open_clip reads them.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use super::clip::{Clip, ClipConfig, ClipEncoder, TextConfig, VisionConfig};
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, ScoreHead, TextPrep};
use crate::hub::ModelFiles;
use crate::hub::OPEN_CLIP_LAYOUT;
use crate::preprocess::{Filter, Preprocessor, Resize, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD};
use crate::tokenizer::{CaptionCleaning, ClipTokenizer};
use crate::{Error, ErrorKind, Result};

/// Takes `name` out of `map`: what a conversion leaves behind, the model does not use.
fn take(map: &mut HashMap<String, Tensor>, name: &str) -> Result<Tensor> {
    map.remove(name).ok_or_else(|| {
        Error::new(ErrorKind::BadWeights, format!("convert open_clip weights: tensor `{name}` is missing"))
    })
}

fn compute(e: candle_core::Error) -> Error {
    Error::compute("convert open_clip weights", e)
}

/// One residual block `src` (e.g. `transformer.resblocks.3`) into `out` under `dst`
/// (e.g. `vision_model.encoder.layers.3`).
pub fn convert_block(
    map: &mut HashMap<String, Tensor>,
    src: &str,
    dst: &str,
    out: &mut HashMap<String, Tensor>,
) -> Result<()> {
    let join = |prefix: &str, name: &str| if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") };
    let in_w = take(map, &join(src, "attn.in_proj_weight"))?;
    let in_b = take(map, &join(src, "attn.in_proj_bias"))?;
    let width = in_w.dim(1).map_err(compute)?;
    for (i, part) in ["q_proj", "k_proj", "v_proj"].iter().enumerate() {
        out.insert(join(dst, &format!("self_attn.{part}.weight")), in_w.narrow(0, i * width, width).map_err(compute)?);
        out.insert(join(dst, &format!("self_attn.{part}.bias")), in_b.narrow(0, i * width, width).map_err(compute)?);
    }
    for (from, to) in [
        ("attn.out_proj", "self_attn.out_proj"),
        ("ln_1", "layer_norm1"),
        ("ln_2", "layer_norm2"),
        ("mlp.c_fc", "mlp.fc1"),
        ("mlp.c_proj", "mlp.fc2"),
    ] {
        for leaf in ["weight", "bias"] {
            out.insert(join(dst, &format!("{to}.{leaf}")), take(map, &join(src, &format!("{from}.{leaf}")))?);
        }
    }
    Ok(())
}

/// The vision tower under `prefix` (`visual` in a full checkpoint, empty for a bare one),
/// with `layers` residual blocks, in Hugging Face naming.
pub fn convert_vision(
    map: &mut HashMap<String, Tensor>,
    prefix: &str,
    layers: usize,
) -> Result<HashMap<String, Tensor>> {
    let p = |name: &str| if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") };
    let mut out = HashMap::new();
    out.insert("vision_model.embeddings.patch_embedding.weight".into(), take(map, &p("conv1.weight"))?);
    out.insert("vision_model.embeddings.class_embedding".into(), take(map, &p("class_embedding"))?);
    out.insert("vision_model.embeddings.position_embedding.weight".into(), take(map, &p("positional_embedding"))?);
    for (from, to) in [("ln_pre", "pre_layrnorm"), ("ln_post", "post_layernorm")] {
        for leaf in ["weight", "bias"] {
            out.insert(format!("vision_model.{to}.{leaf}"), take(map, &p(&format!("{from}.{leaf}")))?);
        }
    }
    let proj = take(map, &p("proj"))?.t().and_then(|t| t.contiguous()).map_err(compute)?;
    out.insert("visual_projection.weight".into(), proj);
    for i in 0..layers {
        convert_block(
            map,
            &p(&format!("transformer.resblocks.{i}")),
            &format!("vision_model.encoder.layers.{i}"),
            &mut out,
        )?;
    }
    Ok(out)
}

/// The text tower (top-level names in a full checkpoint) with `layers` blocks, and
/// `logit_scale`, in Hugging Face naming.
pub fn convert_text(map: &mut HashMap<String, Tensor>, layers: usize) -> Result<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    out.insert("text_model.embeddings.token_embedding.weight".into(), take(map, "token_embedding.weight")?);
    out.insert("text_model.embeddings.position_embedding.weight".into(), take(map, "positional_embedding")?);
    for leaf in ["weight", "bias"] {
        out.insert(format!("text_model.final_layer_norm.{leaf}"), take(map, &format!("ln_final.{leaf}"))?);
    }
    let proj = take(map, "text_projection")?.t().and_then(|t| t.contiguous()).map_err(compute)?;
    out.insert("text_projection.weight".into(), proj);
    out.insert("logit_scale".into(), take(map, "logit_scale")?);
    for i in 0..layers {
        convert_block(map, &format!("transformer.resblocks.{i}"), &format!("text_model.encoder.layers.{i}"), &mut out)?;
    }
    Ok(out)
}

/// `open_clip_config.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct OpenClipFile {
    pub model_cfg: OpenClipModelConfig,
    #[serde(default)]
    pub preprocess_cfg: OpenClipPreprocess,
}

/// `model_cfg`: the plain ViT + causal text transformer that OpenCLIP's CLIP builds by default.
#[derive(Debug, Clone, Deserialize)]
pub struct OpenClipModelConfig {
    pub embed_dim: usize,
    #[serde(default)]
    pub quick_gelu: bool,
    pub vision_cfg: OpenClipVision,
    pub text_cfg: OpenClipText,
}

#[derive(Debug, Clone, Deserialize)]
pub struct OpenClipVision {
    pub layers: usize,
    pub width: usize,
    #[serde(default = "default_head_width")]
    pub head_width: usize,
    #[serde(default = "default_mlp_ratio")]
    pub mlp_ratio: f64,
    pub patch_size: usize,
    pub image_size: usize,
    /// Every other key (`attentional_pool`, `timm_model_name`, …): checked to be off.
    #[serde(flatten)]
    pub other: HashMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct OpenClipText {
    #[serde(default = "default_context")]
    pub context_length: usize,
    #[serde(default = "default_vocab")]
    pub vocab_size: usize,
    pub width: usize,
    #[serde(default = "default_heads")]
    pub heads: usize,
    pub layers: usize,
    #[serde(default = "default_mlp_ratio")]
    pub mlp_ratio: f64,
    #[serde(flatten)]
    pub other: HashMap<String, serde_json::Value>,
}

impl OpenClipText {
    /// The text tower described as a `CLIPTextModel` config: GELU, or QuickGELU where the
    /// model config says `quick_gelu`.
    pub fn clip_text_config(&self, quick_gelu: bool) -> TextConfig {
        TextConfig {
            vocab_size: self.vocab_size,
            hidden_size: self.width,
            intermediate_size: (self.width as f64 * self.mlp_ratio) as usize,
            num_hidden_layers: self.layers,
            num_attention_heads: self.heads,
            max_position_embeddings: self.context_length,
            hidden_act: if quick_gelu { "quick_gelu" } else { "gelu" }.to_string(),
            layer_norm_eps: 1e-5,
            // OpenCLIP pools at the largest id (argmax), as legacy CLIP configs do.
            eos_token_id: 2,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct OpenClipPreprocess {
    #[serde(default = "default_mean")]
    pub mean: [f32; 3],
    #[serde(default = "default_std")]
    pub std: [f32; 3],
    #[serde(default = "default_interpolation")]
    pub interpolation: String,
    #[serde(default = "default_resize_mode")]
    pub resize_mode: String,
}

impl OpenClipPreprocess {
    /// open_clip's eval transform for an input of `size` (torchvision's `Resize` on the image
    /// as PIL opened it, in its mode, then `convert("RGB")`): the shorter side then a centre
    /// crop, or for `squash` both sides at once.
    pub fn preprocessor(&self, size: usize) -> Preprocessor {
        let resize = if self.resize_mode == "squash" { Resize::Stretch } else { Resize::ShorterSideThenCrop };
        let filter = if self.interpolation == "bilinear" { Filter::Bilinear } else { Filter::Bicubic };
        Preprocessor { mean: self.mean, std: self.std, resize, filter, ..Preprocessor::openai_clip(size) }
    }

    /// Refuses what [`OpenClipPreprocess::preprocessor`] does not reproduce.
    pub(crate) fn check(&self, path: &std::path::Path) -> Result<()> {
        if !matches!(self.interpolation.as_str(), "bicubic" | "bilinear")
            || !matches!(self.resize_mode.as_str(), "shortest" | "squash")
        {
            return Err(Error::new(
                ErrorKind::BadConfig,
                format!(
                    "use {}: preprocess_cfg {} / {} is not supported (bicubic or bilinear / shortest or squash)",
                    path.display(),
                    self.interpolation,
                    self.resize_mode
                ),
            ));
        }
        Ok(())
    }
}

impl Default for OpenClipPreprocess {
    fn default() -> Self {
        Self {
            mean: default_mean(),
            std: default_std(),
            interpolation: default_interpolation(),
            resize_mode: default_resize_mode(),
        }
    }
}

fn default_head_width() -> usize {
    64
}
fn default_mlp_ratio() -> f64 {
    4.0
}
fn default_context() -> usize {
    77
}
fn default_vocab() -> usize {
    49408
}
fn default_heads() -> usize {
    8
}
fn default_mean() -> [f32; 3] {
    OPENAI_CLIP_MEAN
}
fn default_std() -> [f32; 3] {
    OPENAI_CLIP_STD
}
fn default_interpolation() -> String {
    "bicubic".into()
}
fn default_resize_mode() -> String {
    "shortest".into()
}

/// Keys whose non-default value changes the architecture away from what is implemented,
/// with the value that keeps it.
const PLAIN_VALUES: &[(&str, &str)] = &[
    ("attentional_pool", "false"),
    ("no_ln_pre", "false"),
    ("final_ln_after_pool", "false"),
    ("ls_init_value", "null"),
    ("timm_model_name", "null"),
    ("hf_model_name", "null"),
    // Another tokenizer than OpenAI's BPE (which the loader and the hub's stand-in assume).
    ("hf_tokenizer_name", "null"),
    ("embed_cls", "false"),
    ("no_causal_mask", "false"),
    ("proj_bias", "false"),
    ("qk_norm", "false"),
    ("scaled_cosine_attn", "false"),
    ("scale_heads", "false"),
    ("scale_attn", "false"),
    ("scale_fc", "false"),
    ("pos_embed_type", "\"learnable\""),
];

pub(crate) fn check_plain(
    tower: &str,
    other: &HashMap<String, serde_json::Value>,
    path: &std::path::Path,
) -> Result<()> {
    for (key, plain) in PLAIN_VALUES {
        if let Some(value) = other.get(*key) {
            if value.to_string().as_str() != *plain {
                return Err(Error::new(
                    ErrorKind::BadConfig,
                    format!(
                        "use {}: model_cfg.{tower}.{key} = {value} is not supported (only {plain})",
                        path.display()
                    ),
                ));
            }
        }
    }
    for (key, allowed) in [("pool_type", ["\"tok\"", "\"argmax\""])] {
        if let Some(value) = other.get(key) {
            if !allowed.contains(&value.to_string().as_str()) {
                return Err(Error::new(
                    ErrorKind::BadConfig,
                    format!("use {}: model_cfg.{tower}.{key} = {value} is not supported", path.display()),
                ));
            }
        }
    }
    Ok(())
}

impl OpenClipFile {
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let file: Self = super::read_config(path)?;
        check_plain("vision_cfg", &file.model_cfg.vision_cfg.other, path)?;
        check_plain("text_cfg", &file.model_cfg.text_cfg.other, path)?;
        file.preprocess_cfg.check(path)?;
        let v = &file.model_cfg.vision_cfg;
        if v.head_width == 0 || !v.width.is_multiple_of(v.head_width) {
            return Err(Error::new(
                ErrorKind::BadConfig,
                format!(
                    "use {}: vision_cfg.width {} is not a multiple of head_width {}",
                    path.display(),
                    v.width,
                    v.head_width
                ),
            ));
        }
        Ok(file)
    }

    /// The same model described as a `CLIPModel` config.
    pub fn clip_config(&self) -> ClipConfig {
        let m = &self.model_cfg;
        let act = if m.quick_gelu { "quick_gelu" } else { "gelu" }.to_string();
        let v = &m.vision_cfg;
        ClipConfig {
            text_config: m.text_cfg.clip_text_config(m.quick_gelu),
            vision_config: VisionConfig {
                hidden_size: v.width,
                intermediate_size: (v.width as f64 * v.mlp_ratio) as usize,
                num_hidden_layers: v.layers,
                num_attention_heads: v.width / v.head_width,
                num_channels: 3,
                image_size: v.image_size,
                patch_size: v.patch_size,
                hidden_act: act,
                layer_norm_eps: 1e-5,
            },
            projection_dim: m.embed_dim,
        }
    }
}

/// Every tensor of an OpenCLIP checkpoint (`open_clip_model.safetensors`, or the PyTorch file
/// `open_clip_pytorch_model.bin`) on `device`, by open_clip's names.
pub(crate) fn read_open_clip_weights(path: &std::path::Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    let read = |e: candle_core::Error| {
        Error::caused_by(ErrorKind::BadWeights, format!("read weights {}: {e}", path.display()), e)
    };
    if crate::hub::is_torch_checkpoint(path) {
        let (tensors, _) = super::weights::read_checkpoint(path, &[])?;
        tensors
            .into_iter()
            .map(|(name, tensor)| Ok((name, tensor.to_device(device)?)))
            .collect::<candle_core::Result<HashMap<_, _>>>()
            .map_err(read)
    } else {
        candle_core::safetensors::load(path, device).map_err(read)
    }
}

/// A full OpenCLIP checkpoint (`open_clip_config.json`, `open_clip_model.safetensors`,
/// `tokenizer.json`), converted to Hugging Face naming on load.
pub fn load_open_clip(files: &ModelFiles, dtype: DType, device: &Device) -> Result<ClipEncoder> {
    let file = OpenClipFile::from_file(&files.config)?;
    let config = file.clip_config();
    let mut map = read_open_clip_weights(&files.weights, device)?;
    // The conversion reads the configured layers only: a checkpoint with more would lose them.
    for (prefix, built) in [
        ("visual.transformer.resblocks.", config.vision_config.num_hidden_layers),
        ("transformer.resblocks.", config.text_config.num_hidden_layers),
    ] {
        let beyond = map.keys().filter(|k| k.starts_with(prefix)).find(|k| {
            k[prefix.len()..].split('.').next().and_then(|i| i.parse::<usize>().ok()).is_some_and(|i| i >= built)
        });
        if let Some(name) = beyond {
            return Err(Error::new(
                ErrorKind::BadWeights,
                format!(
                    "load weights {}: tensor `{name}` belongs to a layer beyond the {built} that {} builds: the config and the checkpoint disagree",
                    files.weights.display(),
                    files.config.display()
                ),
            ));
        }
    }
    let mut tensors = convert_vision(&mut map, "visual", config.vision_config.num_hidden_layers)
        .map_err(|e| e.context(&files.weights))?;
    tensors
        .extend(convert_text(&mut map, config.text_config.num_hidden_layers).map_err(|e| e.context(&files.weights))?);
    // Every tensor was converted, or the checkpoint holds parts this plain CLIP does not have
    // (a CoCa decoder, an attention pool, a SigLIP bias) that would be silently ignored.
    // `attn_mask` is a buffer older open_clip versions saved.
    let mut left: Vec<&String> = map.keys().filter(|k| k.as_str() != "attn_mask").collect();
    left.sort();
    if let Some(first) = left.first() {
        return Err(Error::new(
            ErrorKind::BadWeights,
            format!(
                "load weights {}: tensor `{first}` (and {} more) is not part of the OpenCLIP CLIP model {} describes: the checkpoint is of another architecture or variant",
                files.weights.display(),
                left.len() - 1,
                files.config.display()
            ),
        ));
    }
    // open_clip cleans every caption with ftfy before its BPE.
    let context = config.text_config.max_position_embeddings;
    let tokenizer = ClipTokenizer::from_file(&files.tokenizer, context, CaptionCleaning::OpenClip)?;
    let preprocessor = file.preprocess_cfg.preprocessor(config.vision_config.image_size);
    let model = Clip::from_tensors(config, tensors, dtype, device, &files.weights.display().to_string())?;
    Ok(ClipEncoder::from_parts(model, tokenizer, preprocessor))
}

/// CLIP in OpenCLIP's own naming and files (`open_clip_config.json`), as
/// [`crate::registry::ARCHITECTURES`] lists it.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "openclip",
    model_types: &[],
    layout: OPEN_CLIP_LAYOUT,
    timm_towers: &[],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Contrastive],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |size| Some(Preprocessor::openai_clip(size)),
    caption_limit: |files, _| {
        let context = OpenClipFile::from_file(&files.config)?.clip_config().text_config.max_position_embeddings;
        super::clip::caption_limit(files, context, CaptionCleaning::OpenClip)
    },
    load: |_, files, dtype, device| Ok(crate::Model::Dual(Box::new(load_open_clip(files, dtype, device)?))),
    bench_towers: BenchTowers::None,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: false,
    images_together: false,
    generates_replies: false,
});
