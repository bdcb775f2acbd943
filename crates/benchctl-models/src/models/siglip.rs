//! SigLIP (Zhai et al., "Sigmoid Loss for Language Image Pre-Training", 2023,
//! <https://arxiv.org/abs/2303.15343>) in Hugging Face layout (`SiglipModel`), e.g.
//! <https://huggingface.co/google/siglip-base-patch16-224>, and the fixed-resolution
//! checkpoints of SigLIP 2 (Tschannen et al., 2025, <https://arxiv.org/abs/2502.14786>), e.g.
//! <https://huggingface.co/google/siglip2-base-patch16-224>: the same towers with Gemma's
//! vocabulary, told apart by their `tokenizer.json` ([`Siglip2Tokenizer::is_gemma_vocabulary`],
//! read once).
//!
//! What sets it apart from CLIP, and is easy to get silently wrong:
//! - the vision tower has no class token and no pre-norm; it pools with a learned probe
//!   attending over the patch tokens (multi-head attention pooling, `vision_model.head`);
//! - the text tower has no causal mask and pools the **last** position, so texts are padded
//!   to the trained length (64) and the padding takes part ([`SiglipTokenizer`];
//!   [`Siglip2Tokenizer`], whose authors' and `transformers`' preparations differ);
//! - a pair's logit is `exp(logit_scale) · cos + logit_bias` and its score the sigmoid of
//!   that: a match probability per pair, not a softmax over candidates;
//! - images are stretched to a square and scaled to [−1, 1].

use candle_core::{DType, Device, IndexOp, Module, Tensor};
use candle_nn::Linear;
use serde::Deserialize;

use super::transformer::{
    l2_normalise, load_blocks, run_blocks, token, Block, Mlp, PatchEmbedding, QueryAttention, Tower,
};
use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::ModelFiles;
use crate::hub::HF_LAYOUT;
use crate::kernels::LayerNorm;
use crate::preprocess::{Preprocessor, HALF};
use crate::tokenizer::{Siglip2Tokenizer, SiglipTokenizer};
use crate::{DualEncoder, Error, ErrorKind, Result, Similarity};

/// `config.json` of a `SiglipModel`, with `transformers`' defaults (SigLIP base/16 at 224 px).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SiglipConfig {
    #[serde(default)]
    pub text_config: SiglipTextConfig,
    #[serde(default)]
    pub vision_config: SiglipVisionConfig,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct SiglipTextConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub max_position_embeddings: usize,
    pub hidden_act: String,
    pub layer_norm_eps: f64,
    /// Width of the text head's output; `None` means `hidden_size`.
    pub projection_size: Option<usize>,
    pub pad_token_id: Option<u32>,
}

impl Default for SiglipTextConfig {
    fn default() -> Self {
        Self {
            vocab_size: 32000,
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            max_position_embeddings: 64,
            hidden_act: "gelu_pytorch_tanh".into(),
            layer_norm_eps: 1e-6,
            projection_size: None,
            pad_token_id: Some(1),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct SiglipVisionConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_channels: usize,
    pub image_size: usize,
    pub patch_size: usize,
    pub hidden_act: String,
    pub layer_norm_eps: f64,
}

impl Default for SiglipVisionConfig {
    fn default() -> Self {
        Self {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            num_channels: 3,
            image_size: 224,
            patch_size: 16,
            hidden_act: "gelu_pytorch_tanh".into(),
            layer_norm_eps: 1e-6,
        }
    }
}

impl SiglipConfig {
    /// `google/siglip2-base-patch16-224`'s shape: SigLIP's base towers at 224 px with Gemma's
    /// 256,000-token vocabulary (benchmarks on random weights).
    pub fn siglip2_base_patch16_224() -> Self {
        SiglipConfig {
            text_config: SiglipTextConfig { vocab_size: 256_000, pad_token_id: Some(0), ..Default::default() },
            vision_config: SiglipVisionConfig::default(),
        }
    }

    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let config: Self = super::read_config(path)?;
        let v = &config.vision_config;
        super::check_patch_grid(path, v.image_size, v.patch_size)?;
        let t = &config.text_config;
        if t.projection_size.unwrap_or(t.hidden_size) != v.hidden_size {
            return Err(Error::new(
                ErrorKind::BadConfig,
                format!(
                    "use {}: the text head's width {} must equal the vision width {}",
                    path.display(),
                    t.projection_size.unwrap_or(t.hidden_size),
                    v.hidden_size
                ),
            ));
        }
        Ok(config)
    }
}

impl SiglipTextConfig {
    pub(super) fn tower(&self) -> Result<Tower> {
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

impl SiglipVisionConfig {
    pub(crate) fn tower(&self) -> Result<Tower> {
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

/// SigLIP's vision tower up to its patch tokens, before any pooling: SigLIP's own image
/// encoder under its attention-pooling head, the image encoder of Gemma 3 and PaliGemma, and
/// (with [`Positions::Resized`]) SigLIP 2 NaFlex's.
#[derive(Debug, Clone)]
pub(crate) struct VisionTower {
    pub(super) patch_embedding: PatchEmbedding,
    pub(super) positions: Positions,
    pub(super) blocks: Vec<Block>,
    pub(super) post_norm: LayerNorm,
}

/// The position embeddings a vision tower adds to its patches.
#[derive(Debug, Clone)]
pub(crate) enum Positions {
    /// One per patch of the trained grid: images must have that grid.
    Fixed(Tensor),
    /// A square grid of `side × side`, `(side², width)`, resized to each image's grid
    /// ([`resized_positions`]; SigLIP 2 NaFlex).
    Resized { grid: Tensor, side: usize },
}

impl VisionTower {
    /// The tower under `v` (`embeddings.*`, `encoder.layers.N`, `post_layernorm`).
    pub fn load(v: &Weights, config: &SiglipVisionConfig) -> Result<Self> {
        let patches = (config.image_size / config.patch_size).pow(2);
        Ok(Self {
            patch_embedding: PatchEmbedding::load(
                &v.pp("embeddings.patch_embedding"),
                config.hidden_size,
                config.num_channels,
                config.patch_size,
                true,
            )?,
            positions: Positions::Fixed(v.get((patches, config.hidden_size), "embeddings.position_embedding.weight")?),
            blocks: load_blocks(v, &config.tower()?)?,
            post_norm: v.pp("post_layernorm").layer_norm(config.hidden_size, config.layer_norm_eps)?,
        })
    }

    /// The side of the square images it was trained on: √patches × the patch size.
    pub fn image_size(&self) -> usize {
        let side = match &self.positions {
            Positions::Fixed(positions) => (positions.dim(0).unwrap_or(0) as f64).sqrt().round() as usize,
            Positions::Resized { side, .. } => *side,
        };
        side * self.patch_embedding.patch_size()
    }

    /// `(b, C, H, W)` → the patch tokens `(b, patches, width)`.
    pub fn forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let patches = self.patch_embedding.forward(pixels)?;
        let xs = match &self.positions {
            Positions::Fixed(positions) => patches.broadcast_add(positions)?,
            Positions::Resized { grid, side } => {
                let (_, _, h, w) = pixels.dims4()?;
                let p = self.patch_embedding.patch_size();
                let positions = resized_positions(grid, *side, (h / p, w / p))?;
                patches.broadcast_add(&positions.to_dtype(patches.dtype())?)?
            }
        };
        self.post_norm.forward(&run_blocks(&self.blocks, xs, None)?)
    }
}

/// `Siglip2VisionEmbeddings.resize_positional_embeddings` for one image: the `side × side`
/// grid (`(side², width)`) resized to `rows × columns` as `F.interpolate(mode="bilinear",
/// align_corners=False, antialias=True)` resizes it, `(rows · columns, width)` in f32. Each
/// axis has its own weights (a triangle widened by the downscale factor, each output's
/// weights summing to 1), computed in f32 in `transformers`' order of operations.
pub fn resized_positions(grid: &Tensor, side: usize, (rows, columns): (usize, usize)) -> candle_core::Result<Tensor> {
    if rows == 0 || columns == 0 {
        candle_core::bail!("resize position embeddings to an empty {rows}×{columns} grid");
    }
    let axis = |len: usize| -> Vec<Vec<f32>> {
        let scale = side as f32 / len as f32;
        let support = scale.max(1.0);
        (0..len)
            .map(|i| {
                let centre = (i as f32 + 0.5) * scale - 0.5;
                let weights: Vec<f32> =
                    (0..side).map(|s| (1.0 - (s as f32 - centre).abs() / support).max(0.0)).collect();
                let total: f32 = weights.iter().sum();
                weights.iter().map(|w| w / total).collect()
            })
            .collect()
    };
    let (down, across) = (axis(rows), axis(columns));
    let mut weights = Vec::with_capacity(rows * columns * side * side);
    for r in &down {
        for c in &across {
            weights.extend(r.iter().flat_map(|&wr| c.iter().map(move |&wc| wr * wc)));
        }
    }
    let weights = Tensor::from_vec(weights, (rows * columns, side * side), grid.device())?;
    weights.matmul(&grid.to_dtype(DType::F32)?)
}

/// Multi-head attention pooling: a learned probe attends over the tokens, then a residual MLP.
#[derive(Debug, Clone)]
struct AttentionPool {
    probe: Tensor,
    attention: QueryAttention,
    norm: LayerNorm,
    mlp: Mlp,
}

impl AttentionPool {
    fn load(w: &Weights, t: &Tower) -> Result<Self> {
        let a = w.pp("attention");
        let qkv =
            Linear::new(a.get((3 * t.width, t.width), "in_proj_weight")?, Some(a.get(3 * t.width, "in_proj_bias")?));
        Ok(Self {
            probe: w.get((1, 1, t.width), "probe")?,
            attention: QueryAttention::from_fused(&qkv, a.pp("out_proj").linear(t.width, t.width, true)?, t.heads)?,
            norm: w.pp("layernorm").layer_norm(t.width, t.eps)?,
            mlp: Mlp::load(&w.pp("mlp"), t)?,
        })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let (b, _, width) = xs.dims3()?;
        let probe = self.probe.broadcast_as((b, 1, width))?;
        let pooled = self.attention.forward(&probe, xs)?;
        let pooled = self.mlp.forward_plus(&self.norm.forward(&pooled)?, &pooled)?;
        token(&pooled, 0)
    }
}

/// SigLIP's two towers and its logit scale and bias.
#[derive(Debug, Clone)]
pub struct Siglip {
    vision: VisionTower,
    pool: AttentionPool,
    token_embedding: Tensor,
    text_positions: Tensor,
    text_blocks: Vec<Block>,
    final_norm: LayerNorm,
    text_head: Linear,
    logit_scale: f32,
    logit_bias: f32,
    device: Device,
}

impl Siglip {
    pub(super) fn from_weights(config: &SiglipConfig, w: &Weights) -> Result<Self> {
        let vision = VisionTower::load(&w.pp("vision_model"), &config.vision_config)?;
        Self::assemble(vision, &config.vision_config.tower()?, &config.text_config, w)
    }

    /// The model around `vision` (whose blocks are `vision_tower`'s shape): the pooling head,
    /// the text tower of `tc`, and the logit scale and bias, from `w`.
    pub(super) fn assemble(
        vision: VisionTower,
        vision_tower: &Tower,
        tc: &SiglipTextConfig,
        w: &Weights,
    ) -> Result<Self> {
        let tt = tc.tower()?;
        let t = w.pp("text_model");
        let scalar = |name: &str| -> Result<f32> {
            w.get(1, name)?
                .to_dtype(DType::F32)
                .and_then(|s| s.i(0)?.to_scalar::<f32>())
                .map_err(|e| Error::compute(&format!("read {name}"), e))
        };
        Ok(Self {
            vision,
            pool: AttentionPool::load(&w.pp("vision_model.head"), vision_tower)?,
            token_embedding: t.get((tc.vocab_size, tc.hidden_size), "embeddings.token_embedding.weight")?,
            text_positions: t
                .get((tc.max_position_embeddings, tc.hidden_size), "embeddings.position_embedding.weight")?,
            text_blocks: load_blocks(&t, &tt)?,
            final_norm: t.pp("final_layer_norm").layer_norm(tc.hidden_size, tc.layer_norm_eps)?,
            text_head: t.pp("head").linear(tc.hidden_size, tc.projection_size.unwrap_or(tc.hidden_size), true)?,
            logit_scale: scalar("logit_scale")?.exp(),
            logit_bias: scalar("logit_bias")?,
            device: w.device().clone(),
        })
    }

    /// A model with random weights of the configured shape (benchmarks).
    pub fn random(config: &SiglipConfig, dtype: DType, device: &Device) -> Result<Self> {
        super::weights::Weights::build_random(dtype, device, "random weights", |w| Self::from_weights(config, w))
    }

    /// The side of the square images it takes.
    pub fn image_size(&self) -> usize {
        self.vision.image_size()
    }

    /// The size of its text vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.token_embedding.dim(0).unwrap_or(0)
    }

    /// The text length it was trained on, to which its tokenizer pads every caption.
    pub fn text_len(&self) -> usize {
        self.text_positions.dim(0).unwrap_or(0)
    }

    /// `exp(logit_scale)` and `logit_bias`.
    pub fn logit_scale_and_bias(&self) -> (f32, f32) {
        (self.logit_scale, self.logit_bias)
    }

    /// Pooled image features (`SiglipVisionModel`'s `pooler_output`), unnormalised.
    pub fn image_features(&self, pixels: &Tensor) -> Result<Tensor> {
        let run = || -> candle_core::Result<Tensor> { self.pool.forward(&self.vision.forward(pixels)?) };
        run().map_err(|e| Error::compute("encode images", e))
    }

    /// Pooled text features (`SiglipTextModel`'s `pooler_output`) of equal-length id rows.
    pub fn text_features(&self, ids: &[Vec<u32>]) -> Result<Tensor> {
        self.masked_text_features(ids, None)
    }

    /// The same with each row's attention mask (1 for a token, 0 for padding), as
    /// `transformers` applies the processor's `attention_mask`: the padding hidden as a key.
    pub fn masked_text_features(&self, ids: &[Vec<u32>], attention: Option<&[Vec<u32>]>) -> Result<Tensor> {
        let run = || -> candle_core::Result<Tensor> {
            let b = ids.len();
            let s = ids.first().map(Vec::len).unwrap_or(0);
            let max = self.text_positions.dim(0)?;
            if b == 0 || s == 0 || s > max || ids.iter().any(|r| r.len() != s) {
                candle_core::bail!("SigLIP texts must all have the same length of 1 to {max} ids");
            }
            let flat: Vec<u32> = ids.concat();
            let ids = Tensor::from_vec(flat, (b * s,), &self.device)?;
            let xs = self.token_embedding.index_select(&ids, 0)?.reshape((b, s, ()))?;
            let xs = xs.broadcast_add(&self.text_positions.narrow(0, 0, s)?)?;
            let mask = match attention {
                None => None,
                Some(rows) if rows.len() == b && rows.iter().all(|r| r.len() == s) => {
                    // `transformers`' eager mask: the dtype's lowest value where a key is padding.
                    let terms: Vec<f32> =
                        rows.iter().flatten().map(|&keep| if keep == 0 { f32::MIN } else { 0.0 }).collect();
                    Some(Tensor::from_vec(terms, (b, 1, 1, s), &self.device)?.to_dtype(xs.dtype())?)
                }
                Some(_) => candle_core::bail!("SigLIP attention masks must match their id rows"),
            };
            let xs = self.final_norm.forward(&run_blocks(&self.text_blocks, xs, mask.as_ref())?)?;
            self.text_head.forward(&token(&xs, s - 1)?)
        };
        run().map_err(|e| Error::compute("encode texts", e))
    }
}

/// A SigLIP checkpoint's tokenizer: SigLIP's T5 sentencepiece vocabulary, or SigLIP 2's Gemma one.
#[derive(Debug, Clone)]
pub enum SiglipText {
    Siglip(SiglipTokenizer),
    Siglip2(Siglip2Tokenizer),
}

impl SiglipText {
    /// The tokenizer of `files`, preparing captions as `prep` says. SigLIP's own tokenizer
    /// canonicalises in `transformers` as its authors do, so both preparations are the same there.
    pub fn of(files: &ModelFiles, tc: &SiglipTextConfig, prep: TextPrep) -> Result<Self> {
        let path = &files.tokenizer;
        let inner = crate::tokenizer::open(path)?;
        if Siglip2Tokenizer::is_gemma_vocabulary(&inner) {
            let settings = files.tokenizer_settings.as_deref();
            let tokenizer = Siglip2Tokenizer::from_tokenizer(inner, path, settings, tc.max_position_embeddings, prep)?;
            Ok(SiglipText::Siglip2(tokenizer))
        } else {
            let tokenizer = SiglipTokenizer::from_tokenizer(inner, path, tc.max_position_embeddings, tc.pad_token_id)?;
            Ok(SiglipText::Siglip(tokenizer))
        }
    }

    /// The tokenizer of an open_clip checkpoint (`HFTokenizer(clean="canonicalize")` over the
    /// repo's files, as open_clip's `SigLipTokenizer` made them): captions canonicalised as
    /// open_clip does, cut to `context − 1` pieces, the end token, then padding (`</s>` for
    /// T5's vocabulary, `<pad>` for Gemma's).
    pub fn open_clip(files: &ModelFiles, context: usize) -> Result<Self> {
        let path = &files.tokenizer;
        let inner = crate::tokenizer::open(path)?;
        if Siglip2Tokenizer::is_gemma_vocabulary(&inner) {
            let tokenizer = Siglip2Tokenizer::from_tokenizer(inner, path, None, context, TextPrep::Authors)?;
            Ok(SiglipText::Siglip2(tokenizer))
        } else {
            let tokenizer = SiglipTokenizer::from_tokenizer(inner, path, context, None)?.with_open_clip_cleaning()?;
            Ok(SiglipText::Siglip(tokenizer))
        }
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            SiglipText::Siglip(t) => t.encode(text),
            SiglipText::Siglip2(t) => t.encode(text),
        }
    }

    /// The ids and, where the preparation masks padding (`transformers`' processor with a
    /// Gemma tokenizer, whose `attention_mask` reaches the model), the attention mask.
    pub fn encode_with_mask(&self, text: &str) -> Result<(Vec<u32>, Option<Vec<u32>>)> {
        match self {
            SiglipText::Siglip(t) => Ok((t.encode(text)?, None)),
            SiglipText::Siglip2(t) => t.encode_with_mask(text),
        }
    }

    pub fn tokens_cut(&self, text: &str) -> Result<usize> {
        match self {
            SiglipText::Siglip(t) => t.tokens_cut(text),
            SiglipText::Siglip2(t) => t.tokens_cut(text),
        }
    }
}

/// SigLIP with its tokenizer and preprocessing: a ready [`DualEncoder`] whose scores are
/// sigmoid match probabilities.
#[derive(Debug, Clone)]
pub struct SiglipEncoder {
    model: Siglip,
    tokenizer: SiglipText,
    preprocessor: Preprocessor,
}

impl SiglipEncoder {
    /// With the authors' caption preparation.
    pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Self> {
        Self::load_with(files, TextPrep::Authors, dtype, device)
    }

    pub fn load_with(files: &ModelFiles, prep: TextPrep, dtype: DType, device: &Device) -> Result<Self> {
        let config = SiglipConfig::from_file(&files.config)?;
        let tokenizer = SiglipText::of(files, &config.text_config, prep)?;
        let size = config.vision_config.image_size;
        let preprocessor = Preprocessor::for_hf_model(files, Preprocessor::stretch(size, HALF, HALF), size)?;
        let w = Weights::open(&files.weights, dtype, device)?;
        let model = Siglip::from_weights(&config, &w)?;
        w.check_every_tensor_used("SigLIP", &[".position_ids"])?;
        Ok(Self { model, tokenizer, preprocessor })
    }

    /// From a loaded model, its tokenizer and its preprocessing (SigLIP 2 NaFlex's loader).
    pub(super) fn from_parts(model: Siglip, tokenizer: SiglipText, preprocessor: Preprocessor) -> Self {
        Self { model, tokenizer, preprocessor }
    }

    pub fn model(&self) -> &Siglip {
        &self.model
    }

    pub fn tokenizer(&self) -> &SiglipText {
        &self.tokenizer
    }

    /// `exp(logit_scale) · cos + logit_bias` of normalised embeddings, `(n, K, L)`.
    pub fn logits(&self, images: &Tensor, texts: &Tensor) -> Result<Tensor> {
        self.similarity().logits(images, texts)
    }
}

impl DualEncoder for SiglipEncoder {
    fn device(&self) -> &Device {
        &self.model.device
    }

    fn preprocessor(&self) -> &Preprocessor {
        &self.preprocessor
    }

    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor> {
        l2_normalise(&self.model.image_features(pixels)?).map_err(|e| Error::compute("normalise image embeddings", e))
    }

    fn encode_texts(&self, texts: &[&str]) -> Result<Tensor> {
        encode_texts(&self.model, &self.tokenizer, texts)
    }

    /// `σ(exp(logit_scale) · cos + logit_bias)`, SigLIP's per-pair match probability.
    fn similarity(&self) -> Similarity {
        let (scale, bias) = self.model.logit_scale_and_bias();
        Similarity { scale, bias, sigmoid: true }
    }
}

/// L2-normalised text embeddings of `texts`, masked where the preparation masks padding.
pub(super) fn encode_texts(model: &Siglip, tokenizer: &SiglipText, texts: &[&str]) -> Result<Tensor> {
    let (ids, masks): (Vec<_>, Vec<_>) =
        texts.iter().map(|t| tokenizer.encode_with_mask(t)).collect::<Result<Vec<_>>>()?.into_iter().unzip();
    let masks: Option<Vec<Vec<u32>>> = masks.into_iter().collect();
    let features = model.masked_text_features(&ids, masks.as_deref())?;
    l2_normalise(&features).map_err(|e| Error::compute("normalise text embeddings", e))
}

/// SigLIP and SigLIP 2 (fixed resolution) in Hugging Face layout (`SiglipModel`), as
/// [`crate::registry::ARCHITECTURES`] lists it.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "siglip",
    model_types: &["siglip"],
    layout: HF_LAYOUT,
    timm_towers: &[],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Sigmoid],
    text_preps: &TextPrep::ALL,
    default_preprocessor: |size| Some(Preprocessor::stretch(size, HALF, HALF)),
    caption_limit: |files, prep| {
        let config = SiglipConfig::from_file(&files.config)?;
        let tokenizer = SiglipText::of(files, &config.text_config, prep)?;
        Ok(CaptionLimit::new(config.text_config.max_position_embeddings, move |t| tokenizer.tokens_cut(t)))
    },
    load: |choice, files, dtype, device| {
        Ok(crate::Model::Dual(Box::new(SiglipEncoder::load_with(files, choice.text_prep, dtype, device)?)))
    },
    bench_towers: BenchTowers::Siglip,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: false,
    images_together: false,
    generates_replies: false,
});
