//! Perception Encoder's PE-Core (Bolya et al., "Perception Encoder: The best visual embeddings
//! are not at the output of the network", 2025, <https://arxiv.org/abs/2504.13181>) as open_clip
//! publishes it, e.g. <https://huggingface.co/timm/PE-Core-B-16>: `open_clip_config.json` naming
//! timm's `vit_pe_core_*` image tower, and `open_clip_model.safetensors`.
//!
//! The image tower is timm's `Eva` under PE's settings; what sets it apart from CLIP's ViT:
//! - a learned absolute position per token and, on the patch tokens (not the class token), a
//!   2-D rotary embedding in each attention layer: per head, the first half of the channels
//!   rotate with the patch's column, the second with its row, in interleaved pairs, the
//!   coordinates `(index + offset) / grid · reference grid` ([`rotary_table`]);
//! - a LayerNorm before the blocks (and a patch embedding without bias), fused q/k/v with
//!   bias, GELU MLPs, LayerNorm ε 1e-5, a final LayerNorm;
//! - attention pooling (`map`): a learned latent query attends over every token with its own
//!   heads (8), then a projection and a residual MLP, and a linear head to the joint width;
//! - the text tower is open_clip's (`CustomTextCLIP`'s `text.`), pooled at the end token,
//!   32 tokens of OpenAI's BPE, captions cleaned as open_clip cleans them;
//! - images squashed to the input size, bilinear, mean and std 0.5 (the checkpoint's
//!   `preprocess_cfg`).
//!
//! `open_clip_config.json` names the tower only; its fixed settings are in [`PE_CORE_TOWERS`],
//! as timm's model definitions give them; the width, depth and MLP width come from the weights.

use std::collections::HashMap;

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::VarBuilder;

use serde::Deserialize;

use super::clip::ClipText;
use super::clip_openai::{check_plain, convert_text, read_open_clip_weights, OpenClipPreprocess, OpenClipText};
use super::transformer::{attend, fused_self_attention, l2_normalise, token, Dense, Mlp, PatchEmbedding, Tower};
use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, ScoreHead, TextPrep};
use crate::hub::{ModelFiles, OPEN_CLIP_LAYOUT};
use crate::kernels::LayerNorm;
use crate::preprocess::Preprocessor;
use crate::tokenizer::{CaptionCleaning, ClipTokenizer};
use crate::{DualEncoder, Error, ErrorKind, Result, Similarity};

/// What timm's definition of one `vit_pe_core_*` tower fixes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeTower {
    pub timm_name: &'static str,
    pub heads: usize,
    pub class_token: bool,
    /// Added to each patch index before the rotary coordinates are scaled.
    pub rope_offset: f32,
    /// The grid the rotary coordinates are scaled to (`ref_feat_shape`, square).
    pub rope_reference: usize,
    /// The published shape (benchmarks on random weights; a checkpoint's own weights give it
    /// when one loads).
    pub width: usize,
    pub depth: usize,
    pub mlp: usize,
    pub patch: usize,
}

/// The heads of the attention pool (`attn_pool_num_heads`) of every PE-Core tower.
const POOL_HEADS: usize = 8;
const EPS: f64 = 1e-5;
const ROPE_TEMPERATURE: f32 = 10_000.0;

/// Every PE-Core image tower of timm 1.0, one line each.
pub const PE_CORE_TOWERS: &[PeTower] = &[
    pe("vit_pe_core_tiny_patch16_384", 3, true, 24, (192, 12, 768, 16)),
    pe("vit_pe_core_small_patch16_384", 6, true, 24, (384, 12, 1536, 16)),
    pe("vit_pe_core_base_patch16_224", 12, true, 14, (768, 12, 3072, 16)),
    pe("vit_pe_core_large_patch14_336", 16, true, 24, (1024, 24, 4096, 14)),
    pe("vit_pe_core_gigantic_patch14_448", 16, false, 32, (1536, 50, 8960, 14)),
];

/// One table line: timm's settings; the rotary offset is 1 with a class token, 0 without.
const fn pe(
    timm_name: &'static str,
    heads: usize,
    class_token: bool,
    rope_reference: usize,
    (width, depth, mlp, patch): (usize, usize, usize, usize),
) -> PeTower {
    let rope_offset = if class_token { 1.0 } else { 0.0 };
    PeTower { timm_name, heads, class_token, rope_offset, rope_reference, width, depth, mlp, patch }
}

/// The rotary embedding of a `rows × columns` patch grid for heads of `head_dim` channels, as
/// timm's `RotaryEmbeddingCat` builds it (`in_pixels=False`, `grid_indexing="xy"`, f32):
/// `(sin, cos)`, each `rows · columns × head_dim` row-major, the pairs interleaved.
pub fn rotary_table(head_dim: usize, (rows, columns): (usize, usize), tower: &PeTower) -> (Vec<f32>, Vec<f32>) {
    let bands_len = head_dim / 4;
    let bands: Vec<f32> = (0..bands_len).map(|i| 1.0 / ROPE_TEMPERATURE.powf(i as f32 / bands_len as f32)).collect();
    let reference = tower.rope_reference as f32;
    let coordinate = |i: usize, len: usize| (i as f32 + tower.rope_offset) / len as f32 * reference;
    let (mut sin, mut cos) =
        (Vec::with_capacity(rows * columns * head_dim), Vec::with_capacity(rows * columns * head_dim));
    for row in 0..rows {
        for column in 0..columns {
            for position in [coordinate(column, columns), coordinate(row, rows)] {
                for band in &bands {
                    let angle = position * band;
                    sin.extend([angle.sin(); 2]);
                    cos.extend([angle.cos(); 2]);
                }
            }
        }
    }
    (sin, cos)
}

/// One block: `x + attn(norm1(x))`, then `x + mlp(norm2(x))`, the attention with rotary q and k.
#[derive(Debug, Clone)]
struct RopeBlock {
    norm1: LayerNorm,
    qkv: Dense,
    proj: Dense,
    norm2: LayerNorm,
    mlp: Mlp,
    heads: usize,
}

impl RopeBlock {
    fn load(w: &Weights, tower: &Tower) -> Result<Self> {
        let width = tower.width;
        Ok(Self {
            norm1: w.pp("norm1").layer_norm(width, EPS)?,
            qkv: Dense::new(w.pp("attn.qkv").linear(width, 3 * width, true)?)?,
            proj: Dense::new(w.pp("attn.proj").linear(width, width, true)?)?,
            norm2: w.pp("norm2").layer_norm(width, EPS)?,
            mlp: Mlp::load(&w.pp("mlp"), tower)?,
            heads: tower.heads,
        })
    }

    /// `rope` is `(sin, cos)`, `(seq, width)` each (the head's table repeated per head; the
    /// identity on prefix tokens).
    fn forward(&self, xs: &Tensor, rope: &(Tensor, Tensor)) -> candle_core::Result<Tensor> {
        let (b, n, width) = xs.dims3()?;
        let qkv = self.qkv.forward(&self.norm1.forward(xs)?)?;
        let rotate = |x: Tensor| -> candle_core::Result<Tensor> {
            // Each pair (x0, x1) → (−x1, x0).
            let pairs = x.reshape((b, n, width / 2, 2))?;
            let rotated =
                Tensor::cat(&[&pairs.narrow(3, 1, 1)?.neg()?, &pairs.narrow(3, 0, 1)?], 3)?.reshape((b, n, width))?;
            x.broadcast_mul(&rope.1)? + rotated.broadcast_mul(&rope.0)?
        };
        let q = rotate(qkv.narrow(D::Minus1, 0, width)?)?;
        let k = rotate(qkv.narrow(D::Minus1, width, width)?)?;
        let v = qkv.narrow(D::Minus1, 2 * width, width)?;
        let qkv = Tensor::cat(&[&q, &k, &v], D::Minus1)?;
        let attended = match fused_self_attention(&qkv, self.heads, None, None)? {
            Some(attended) => attended,
            None => attend(&q, &k, &v.contiguous()?, self.heads, None)?,
        };
        let xs = (self.proj.forward(&attended)? + xs)?;
        self.mlp.forward_plus(&self.norm2.forward(&xs)?, &xs)
    }
}

/// timm's `AttentionPoolLatent`: a latent query over every token, a projection, a residual MLP.
#[derive(Debug, Clone)]
struct LatentPool {
    latent: Tensor,
    q: Dense,
    kv: Dense,
    proj: Dense,
    norm: LayerNorm,
    mlp: Mlp,
}

impl LatentPool {
    fn load(w: &Weights, width: usize, tower: &Tower) -> Result<Self> {
        Ok(Self {
            latent: w.get((1, 1, width), "latent")?,
            q: Dense::new(w.pp("q").linear(width, width, true)?)?,
            kv: Dense::new(w.pp("kv").linear(width, 2 * width, true)?)?,
            proj: Dense::new(w.pp("proj").linear(width, width, true)?)?,
            norm: w.pp("norm").layer_norm(width, EPS)?,
            mlp: Mlp::load(&w.pp("mlp"), tower)?,
        })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let (b, _, width) = xs.dims3()?;
        let q = self.q.forward(&self.latent.broadcast_as((b, 1, width))?.contiguous()?)?;
        let kv = self.kv.forward(xs)?;
        let (k, v) = (kv.narrow(D::Minus1, 0, width)?, kv.narrow(D::Minus1, width, width)?);
        let pooled = self.proj.forward(&attend(&q, &k.contiguous()?, &v.contiguous()?, POOL_HEADS, None)?)?;
        let pooled = self.mlp.forward_plus(&self.norm.forward(&pooled)?, &pooled)?;
        token(&pooled, 0)
    }
}

/// PE-Core's image tower with its head to the joint width.
#[derive(Debug, Clone)]
pub struct PeVision {
    tower: PeTower,
    patch_embedding: PatchEmbedding,
    class_token: Option<Tensor>,
    positions: Tensor,
    norm_pre: LayerNorm,
    blocks: Vec<RopeBlock>,
    norm: LayerNorm,
    pool: LatentPool,
    head: Dense,
    /// The rotary table of the trained grid, `(sin, cos)` at `(tokens, width)`.
    rope: (Tensor, Tensor),
    image_size: usize,
}

impl PeVision {
    /// The tower under `w` (`visual.trunk.*` of open_clip's checkpoint) for `tower`, at
    /// `image_size` px; its width, depth and MLP width read from the weights.
    fn load(w: &Weights, tower: &PeTower, image_size: usize, dims: &VisionDims) -> Result<Self> {
        let (width, patch) = (dims.width, dims.patch);
        let grid = image_size / patch;
        let prefix = usize::from(tower.class_token);
        let blocks_tower = Tower::new(width, dims.mlp, dims.depth, tower.heads, "gelu", EPS)?;
        let pool_tower = Tower::new(width, dims.pool_mlp, 1, POOL_HEADS, "gelu", EPS)?;
        let head_dim = width / tower.heads;
        let (sin, cos) = rotary_table(head_dim, (grid, grid), tower);
        // Per token: the identity on prefix tokens, then the head's table repeated per head.
        let table = |values: Vec<f32>, identity: f32| -> Vec<f32> {
            let mut out = vec![identity; prefix * width];
            for row in values.chunks(head_dim) {
                for _ in 0..tower.heads {
                    out.extend_from_slice(row);
                }
            }
            out
        };
        let device = w.device().clone();
        let tokens = prefix + grid * grid;
        let as_tensor = |values: Vec<f32>| {
            Tensor::from_vec(values, (tokens, width), &device)
                .and_then(|t| t.to_dtype(w.dtype()))
                .map_err(|e| Error::compute("build the rotary table", e))
        };
        Ok(Self {
            tower: *tower,
            patch_embedding: PatchEmbedding::load(&w.pp("patch_embed.proj"), width, 3, patch, false)?,
            class_token: if tower.class_token { Some(w.get((1, 1, width), "cls_token")?) } else { None },
            positions: w.get((1, tokens, width), "pos_embed")?,
            norm_pre: w.pp("norm_pre").layer_norm(width, EPS)?,
            blocks: (0..dims.depth)
                .map(|i| RopeBlock::load(&w.pp(format!("blocks.{i}")), &blocks_tower))
                .collect::<Result<_>>()?,
            norm: w.pp("norm").layer_norm(width, EPS)?,
            pool: LatentPool::load(&w.pp("attn_pool"), width, &pool_tower)?,
            head: Dense::new(w.pp("head").linear(width, dims.embed, true)?)?,
            rope: (as_tensor(table(sin, 0.0))?, as_tensor(table(cos, 1.0))?),
            image_size,
        })
    }

    /// The tower of `tower`'s published shape with random weights, projecting to `embed`
    /// (benchmarks).
    pub fn random(tower: &PeTower, image_size: usize, embed: usize, dtype: DType, device: &Device) -> Result<Self> {
        let dims = VisionDims {
            width: tower.width,
            patch: tower.patch,
            depth: tower.depth,
            mlp: tower.mlp,
            pool_mlp: 4 * tower.width,
            embed,
        };
        Weights::build_random(dtype, device, "random weights", |w| Self::load(w, tower, image_size, &dims))
    }

    /// `(b, 3, S, S)` → projected image features `(b, embed)`, unnormalised.
    pub fn forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let patches = self.patch_embedding.forward(pixels)?;
        let (b, _, width) = patches.dims3()?;
        let xs = match &self.class_token {
            Some(class) => Tensor::cat(&[&class.broadcast_as((b, 1, width))?.contiguous()?, &patches], 1)?,
            None => patches,
        };
        let mut xs = self.norm_pre.forward(&xs.broadcast_add(&self.positions)?)?;
        for block in &self.blocks {
            xs = block.forward(&xs, &self.rope)?;
        }
        self.head.forward(&self.pool.forward(&self.norm.forward(&xs)?)?)
    }

    pub fn tower(&self) -> &PeTower {
        &self.tower
    }

    pub fn image_size(&self) -> usize {
        self.image_size
    }
}

/// The tower's sizes as its weights give them.
struct VisionDims {
    width: usize,
    patch: usize,
    depth: usize,
    mlp: usize,
    pool_mlp: usize,
    embed: usize,
}

impl VisionDims {
    fn of(map: &HashMap<String, Tensor>, prefix: &str, source: &std::path::Path) -> Result<Self> {
        let shape = |name: &str| -> Result<Vec<usize>> {
            map.get(&format!("{prefix}.{name}")).map(|t| t.dims().to_vec()).ok_or_else(|| {
                Error::new(
                    ErrorKind::BadWeights,
                    format!("read weights {}: tensor `{prefix}.{name}` is missing", source.display()),
                )
            })
        };
        let patch = shape("patch_embed.proj.weight")?;
        let depth = (0..).take_while(|i| map.contains_key(&format!("{prefix}.blocks.{i}.norm1.weight"))).count();
        Ok(Self {
            width: patch[0],
            patch: patch[patch.len() - 1],
            depth,
            mlp: shape("blocks.0.mlp.fc1.weight")?[0],
            pool_mlp: shape("attn_pool.mlp.fc1.weight")?[0],
            embed: shape("head.weight")?[0],
        })
    }
}

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
    /// The file, refused where it asks for what benchctl does not build: another pool than
    /// `map`, an extra projection (`timm_proj`), a text tower other than open_clip's plain one,
    /// a tower other than PE-Core's.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let file: Self = super::read_config(path)?;
        let v = &file.model_cfg.vision_cfg;
        let bad = |what: String| Error::new(ErrorKind::BadConfig, format!("use {}: {what}", path.display()));
        if v.timm_pool.as_deref() != Some("map") || v.timm_proj.is_some() {
            return Err(bad(format!(
                "model_cfg.vision_cfg pools with {:?} and projects with {:?}; PE-Core's towers pool with \"map\" and project with none",
                v.timm_pool, v.timm_proj
            )));
        }
        tower_named(&v.timm_model_name).ok_or_else(|| {
            let names: Vec<&str> = PE_CORE_TOWERS.iter().map(|t| t.timm_name).collect();
            bad(format!(
                "the timm image tower `{}` is not supported (supported: {})",
                v.timm_model_name,
                names.join(", ")
            ))
        })?;
        check_plain("text_cfg", &file.model_cfg.text_cfg.other, path)?;
        file.preprocess_cfg.check(path)?;
        Ok(file)
    }

    pub fn tower(&self) -> &'static PeTower {
        tower_named(&self.model_cfg.vision_cfg.timm_model_name).unwrap_or(&PE_CORE_TOWERS[0])
    }

    pub fn text_config(&self) -> super::clip::TextConfig {
        self.model_cfg.text_cfg.clip_text_config(self.model_cfg.quick_gelu)
    }
}

/// The PE-Core tower of this timm name.
pub fn tower_named(name: &str) -> Option<&'static PeTower> {
    PE_CORE_TOWERS.iter().find(|t| t.timm_name == name)
}

/// PE-Core with its tokenizer and preprocessing: a ready [`DualEncoder`].
#[derive(Debug, Clone)]
pub struct PeCoreEncoder {
    vision: PeVision,
    text: ClipText,
    logit_scale: f32,
    tokenizer: ClipTokenizer,
    preprocessor: Preprocessor,
    device: Device,
}

impl PeCoreEncoder {
    pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Self> {
        let file = TimmClipFile::from_file(&files.config)?;
        let tower = file.tower();
        let mut map = read_open_clip_weights(&files.weights, device)?;
        let dims = VisionDims::of(&map, "visual.trunk", &files.weights)?;
        let vision_map: HashMap<String, Tensor> = map
            .keys()
            .filter(|k| k.starts_with("visual.trunk."))
            .cloned()
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(|k| map.remove(&k).map(|t| (k["visual.trunk.".len()..].to_string(), t)))
            .collect();
        let mut text_map: HashMap<String, Tensor> =
            map.into_iter().map(|(k, t)| (k.strip_prefix("text.").map(str::to_string).unwrap_or(k), t)).collect();
        let text_config = file.text_config();
        let text_tensors =
            convert_text(&mut text_map, text_config.num_hidden_layers).map_err(|e| e.context(&files.weights))?;
        text_map.remove("attn_mask");
        if let Some(left) = text_map.keys().next() {
            return Err(Error::new(
                ErrorKind::BadWeights,
                format!("load weights {}: tensor `{left}` is not part of a PE-Core model", files.weights.display()),
            ));
        }
        let image_size = file.model_cfg.vision_cfg.image_size;
        let source = files.weights.display().to_string();
        let vision_weights = Weights::from_var_builder(VarBuilder::from_tensors(vision_map, dtype, device), &source);
        let vision = PeVision::load(&vision_weights, tower, image_size, &dims)?;
        vision_weights.check_every_tensor_used("PE-Core", &[])?;
        let (text, logit_scale) =
            ClipText::from_tensors(&text_config, file.model_cfg.embed_dim, text_tensors, dtype, device, &source)?;
        let tokenizer =
            ClipTokenizer::from_file(&files.tokenizer, text_config.max_position_embeddings, CaptionCleaning::OpenClip)?;
        let preprocessor = file.preprocess_cfg.preprocessor(image_size);
        Ok(Self { vision, text, logit_scale, tokenizer, preprocessor, device: device.clone() })
    }

    pub fn vision(&self) -> &PeVision {
        &self.vision
    }

    pub fn text(&self) -> &ClipText {
        &self.text
    }

    pub fn tokenizer(&self) -> &ClipTokenizer {
        &self.tokenizer
    }
}

impl DualEncoder for PeCoreEncoder {
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

/// PE-Core in open_clip's files, as [`crate::registry::ARCHITECTURES`] lists it.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "pe-core",
    model_types: &[],
    layout: OPEN_CLIP_LAYOUT,
    timm_towers: &["vit_pe_core_"],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Contrastive],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |_| None,
    caption_limit: |files, _| {
        let context = TimmClipFile::from_file(&files.config)?.text_config().max_position_embeddings;
        super::clip::caption_limit(files, context, CaptionCleaning::OpenClip)
    },
    load: |_, files, dtype, device| Ok(crate::Model::Dual(Box::new(PeCoreEncoder::load(files, dtype, device)?))),
    bench_towers: BenchTowers::PeCore,
    pre_captions: false,
});
