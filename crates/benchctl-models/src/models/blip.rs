//! BLIP (Li et al., "BLIP: Bootstrapping Language-Image Pre-training for Unified
//! Vision-Language Understanding and Generation", 2022, <https://arxiv.org/abs/2201.12086>)
//! for retrieval, in Hugging Face's `BlipForImageTextRetrieval` layout, e.g.
//! <https://huggingface.co/Salesforce/blip-itm-base-coco>.
//!
//! Two scores from one checkpoint, as `--score itm|itc` picks:
//! - **ITC** (image-text contrastive): cosine of `vision_proj(CLS of the ViT)` and
//!   `text_proj(CLS of the text encoder)`, a dual encoder ([`BlipItc`]);
//! - **ITM** (image-text matching): the BERT text encoder runs with cross-attention into
//!   all ViT tokens of the image, and `itm_head` on its CLS gives the match probability
//!   `softmax(…)[1]` ([`BlipItm`], a [`FusionEncoder`]: one forward pass per pair).
//!
//! The ViT is CLIP's pre-norm block with a fused `qkv`, no pre-norm, and `post_layernorm`
//! on every token. The text encoder is post-norm BERT (`LayerNorm(x + sublayer(x))`,
//! ε = 1e-12); candle-transformers' BLIP has only the captioning decoder, hence this module.
//! Like `transformers`, the `[CLS]` token stays as tokenised for ITM (BLIP's own code swaps
//! in an `[ENC]` token there).

use std::sync::Arc;

use candle_core::{DType, Device, IndexOp, Module, Tensor};
use candle_nn::Linear;
use serde::Deserialize;

use super::transformer::{
    attend, l2_normalise, load_blocks, run_blocks, token, AttentionNames, Block, Dense, PatchEmbedding, Tower,
};
use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::ModelFiles;
use crate::hub::HF_LAYOUT;
use crate::kernels::LayerNorm;
use crate::preprocess::{Preprocessor, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD};
use crate::tokenizer::BertTokenizer;
use crate::{DualEncoder, Error, ErrorKind, FusionEncoder, Result, ScoreKind, Similarity};

/// The text length BLIP's retrieval evaluation uses (`max_length=35`).
pub const BLIP_MAX_TEXT_LEN: usize = 35;

/// `config.json` of a `BlipForImageTextRetrieval`, with `transformers`' defaults (base).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BlipConfig {
    #[serde(default)]
    pub text_config: BlipTextConfig,
    #[serde(default)]
    pub vision_config: BlipVisionConfig,
    #[serde(default = "default_itc_width")]
    pub image_text_hidden_size: usize,
}

fn default_itc_width() -> usize {
    256
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct BlipTextConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub max_position_embeddings: usize,
    pub hidden_act: String,
    pub layer_norm_eps: f64,
}

impl Default for BlipTextConfig {
    fn default() -> Self {
        Self {
            vocab_size: 30524,
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            max_position_embeddings: 512,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-12,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct BlipVisionConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub image_size: usize,
    pub patch_size: usize,
    pub hidden_act: String,
    pub layer_norm_eps: f64,
}

impl Default for BlipVisionConfig {
    fn default() -> Self {
        Self {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            image_size: 384,
            patch_size: 16,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-5,
        }
    }
}

impl BlipConfig {
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let config: Self = super::read_config(path)?;
        let v = &config.vision_config;
        super::check_patch_grid(path, v.image_size, v.patch_size)?;
        Ok(config)
    }
}

/// One BERT attention sub-layer: `LayerNorm(x + dense(attention(x, context)))`.
#[derive(Debug, Clone)]
struct BertAttention {
    query: Dense,
    key: Dense,
    value: Dense,
    dense: Dense,
    norm: LayerNorm,
    heads: usize,
}

impl BertAttention {
    fn load(w: &Weights, width: usize, context_width: usize, heads: usize, eps: f64) -> Result<Self> {
        let s = w.pp("self");
        Ok(Self {
            query: Dense::new(s.pp("query").linear(width, width, true)?)?,
            key: Dense::new(s.pp("key").linear(context_width, width, true)?)?,
            value: Dense::new(s.pp("value").linear(context_width, width, true)?)?,
            dense: Dense::new(w.pp("output.dense").linear(width, width, true)?)?,
            norm: w.pp("output.LayerNorm").layer_norm(width, eps)?,
            heads,
        })
    }

    fn forward(&self, xs: &Tensor, context: &Tensor, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let (q, k, v) = (self.query.forward(xs)?, self.key.forward(context)?, self.value.forward(context)?);
        let attended = attend(&q, &k, &v, self.heads, mask)?;
        self.norm.forward(&(self.dense.forward(&attended)? + xs)?)
    }
}

/// A post-norm BERT layer with an optional cross-attention into image tokens.
#[derive(Debug, Clone)]
struct BertLayer {
    attention: BertAttention,
    cross: BertAttention,
    intermediate: Dense,
    output: Dense,
    norm: LayerNorm,
    activation: super::transformer::Activation,
}

impl BertLayer {
    fn forward(&self, xs: &Tensor, mask: &Tensor, image: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let mut xs = self.attention.forward(xs, xs, Some(mask))?;
        if let Some(image) = image {
            xs = self.cross.forward(&xs, image, None)?;
        }
        let h = self.activation.apply(&self.intermediate.forward(&xs)?)?;
        self.norm.forward(&(self.output.forward(&h)? + xs)?)
    }
}

/// The whole retrieval model: ViT, BERT text encoder with cross-attention, and the heads.
#[derive(Debug)]
pub struct Blip {
    patch_embedding: PatchEmbedding,
    class_embedding: Tensor,
    vision_positions: Tensor,
    vision_blocks: Vec<Block>,
    post_norm: LayerNorm,
    word_embeddings: Tensor,
    text_positions: Tensor,
    embedding_norm: LayerNorm,
    layers: Vec<BertLayer>,
    vision_proj: Linear,
    text_proj: Linear,
    itm_head: Linear,
    device: Device,
}

impl Blip {
    fn from_weights(config: &BlipConfig, w: &Weights) -> Result<Self> {
        let (tc, vc) = (&config.text_config, &config.vision_config);
        let vt = Tower::new(
            vc.hidden_size,
            vc.intermediate_size,
            vc.num_hidden_layers,
            vc.num_attention_heads,
            &vc.hidden_act,
            vc.layer_norm_eps,
        )?
        .with_names(AttentionNames::Fused);
        let tt = Tower::new(
            tc.hidden_size,
            tc.intermediate_size,
            tc.num_hidden_layers,
            tc.num_attention_heads,
            &tc.hidden_act,
            tc.layer_norm_eps,
        )?;
        let v = w.pp("vision_model");
        let t = w.pp("text_encoder");
        let patches = (vc.image_size / vc.patch_size).pow(2);
        let layers = (0..tc.num_hidden_layers)
            .map(|i| {
                let l = t.pp(format!("encoder.layer.{i}"));
                Ok(BertLayer {
                    attention: BertAttention::load(&l.pp("attention"), tt.width, tt.width, tt.heads, tt.eps)?,
                    cross: BertAttention::load(&l.pp("crossattention"), tt.width, vc.hidden_size, tt.heads, tt.eps)?,
                    intermediate: Dense::new(l.pp("intermediate.dense").linear(tt.width, tt.intermediate, true)?)?,
                    output: Dense::new(l.pp("output.dense").linear(tt.intermediate, tt.width, true)?)?,
                    norm: l.pp("output.LayerNorm").layer_norm(tt.width, tt.eps)?,
                    activation: tt.activation,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            patch_embedding: PatchEmbedding::load(
                &v.pp("embeddings.patch_embedding"),
                vc.hidden_size,
                3,
                vc.patch_size,
                true,
            )?,
            class_embedding: v.get((1, 1, vc.hidden_size), "embeddings.class_embedding")?,
            vision_positions: v.get((1, patches + 1, vc.hidden_size), "embeddings.position_embedding")?,
            vision_blocks: load_blocks(&v, &vt)?,
            post_norm: v.pp("post_layernorm").layer_norm(vc.hidden_size, vc.layer_norm_eps)?,
            word_embeddings: t.get((tc.vocab_size, tc.hidden_size), "embeddings.word_embeddings.weight")?,
            text_positions: t
                .get((tc.max_position_embeddings, tc.hidden_size), "embeddings.position_embeddings.weight")?,
            embedding_norm: t.pp("embeddings.LayerNorm").layer_norm(tc.hidden_size, tc.layer_norm_eps)?,
            layers,
            vision_proj: w.pp("vision_proj").linear(vc.hidden_size, config.image_text_hidden_size, true)?,
            text_proj: w.pp("text_proj").linear(tc.hidden_size, config.image_text_hidden_size, true)?,
            itm_head: w.pp("itm_head").linear(tc.hidden_size, 2, true)?,
            device: w.device().clone(),
        })
    }

    /// Every ViT token after `post_layernorm`: `(b, 3, H, W)` → `(b, 1 + patches, width)`.
    pub fn image_tokens(&self, pixels: &Tensor) -> Result<Tensor> {
        let run = || -> candle_core::Result<Tensor> {
            let patches = self.patch_embedding.forward(pixels)?;
            let (b, _, width) = patches.dims3()?;
            let class = self.class_embedding.broadcast_as((b, 1, width))?;
            let xs = Tensor::cat(&[&class, &patches], 1)?.broadcast_add(&self.vision_positions)?;
            self.post_norm.forward(&run_blocks(&self.vision_blocks, xs, None)?)
        };
        run().map_err(|e| Error::compute("encode images", e))
    }

    /// The text encoder's CLS state for id rows (padded here, padding masked), attending to
    /// `image` tokens (one image per row) when given.
    pub fn text_cls(&self, ids: &[Vec<u32>], image: Option<&Tensor>) -> Result<Tensor> {
        let run = || -> candle_core::Result<Tensor> {
            let b = ids.len();
            let s = ids.iter().map(Vec::len).max().unwrap_or(0);
            let max = self.text_positions.dim(0)?;
            if b == 0 || s == 0 || s > max {
                candle_core::bail!("texts must have 1 to {max} ids, got a batch of {b} up to {s}");
            }
            let mut flat = Vec::with_capacity(b * s);
            let mut mask = Vec::with_capacity(b * s);
            for row in ids {
                flat.extend_from_slice(row);
                flat.extend(std::iter::repeat_n(0u32, s - row.len()));
                mask.extend(std::iter::repeat_n(0f32, row.len()));
                mask.extend(std::iter::repeat_n(f32::NEG_INFINITY, s - row.len()));
            }
            let ids = Tensor::from_vec(flat, (b * s,), &self.device)?;
            let xs = self.word_embeddings.index_select(&ids, 0)?.reshape((b, s, ()))?;
            let xs = self.embedding_norm.forward(&xs.broadcast_add(&self.text_positions.narrow(0, 0, s)?)?)?;
            let mask = Tensor::from_vec(mask, (b, 1, 1, s), &self.device)?.to_dtype(xs.dtype())?;
            let xs = self.layers.iter().try_fold(xs, |xs, layer| layer.forward(&xs, &mask, image))?;
            token(&xs, 0)
        };
        run().map_err(|e| Error::compute("encode texts", e))
    }

    /// The match logit `l1 − l0` of `itm_head(CLS)` for each (image tokens, ids) row pair:
    /// `softmax(l)[1] = σ(l1 − l0)` is BLIP's match probability, which saturates to 1.0 in
    /// f32 where the logits still differ.
    pub fn match_logit(&self, image_tokens: &Tensor, ids: &[Vec<u32>]) -> Result<Tensor> {
        let l = self.itm_logits(image_tokens, ids)?;
        (|| l.i((.., 1))? - l.i((.., 0))?)().map_err(|e| Error::compute("score pairs", e))
    }

    /// `itm_head(CLS)`, `(pairs, 2)` in f32: class 0 "no match", class 1 "match".
    pub fn itm_logits(&self, image_tokens: &Tensor, ids: &[Vec<u32>]) -> Result<Tensor> {
        let cls = self.text_cls(ids, Some(image_tokens))?;
        self.itm_head
            .forward(&cls)
            .and_then(|logits| logits.to_dtype(DType::F32))
            .map_err(|e| Error::compute("score pairs", e))
    }
}

/// A loaded BLIP with its tokenizer and preprocessing, shared by both heads.
#[derive(Debug)]
struct Loaded {
    model: Blip,
    tokenizer: BertTokenizer,
    preprocessor: Preprocessor,
}

fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Arc<Loaded>> {
    let config = BlipConfig::from_file(&files.config)?;
    let max_len = BLIP_MAX_TEXT_LEN.min(config.text_config.max_position_embeddings);
    let tokenizer = BertTokenizer::from_file(&files.tokenizer, max_len)?;
    let size = config.vision_config.image_size;
    let preprocessor =
        Preprocessor::for_hf_model(files, Preprocessor::stretch(size, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD), size)?;
    let w = Weights::open(&files.weights, dtype, device)?;
    let model = Blip::from_weights(&config, &w)?;
    w.check_every_tensor_used("BLIP retrieval", &[".position_ids"])?;
    Ok(Arc::new(Loaded { model, tokenizer, preprocessor }))
}

impl Loaded {
    fn ids(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        texts.iter().map(|t| self.tokenizer.encode(t)).collect()
    }
}

/// BLIP's contrastive head as a dual encoder: cosine similarities.
#[derive(Debug, Clone)]
pub struct BlipItc(Arc<Loaded>);

impl BlipItc {
    pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Self> {
        Ok(Self(load(files, dtype, device)?))
    }

    pub fn model(&self) -> &Blip {
        &self.0.model
    }

    pub fn tokenizer(&self) -> &BertTokenizer {
        &self.0.tokenizer
    }
}

impl DualEncoder for BlipItc {
    fn device(&self) -> &Device {
        &self.0.model.device
    }

    fn preprocessor(&self) -> &Preprocessor {
        &self.0.preprocessor
    }

    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor> {
        let m = &self.0.model;
        let tokens = m.image_tokens(pixels)?;
        token(&tokens, 0)
            .and_then(|cls| m.vision_proj.forward(&cls))
            .and_then(|f| l2_normalise(&f))
            .map_err(|e| Error::compute("project image embeddings", e))
    }

    fn encode_texts(&self, texts: &[&str]) -> Result<Tensor> {
        let m = &self.0.model;
        let cls = m.text_cls(&self.0.ids(texts)?, None)?;
        m.text_proj
            .forward(&cls)
            .and_then(|f| l2_normalise(&f))
            .map_err(|e| Error::compute("project text embeddings", e))
    }

    /// The cosine, as `BlipForImageTextRetrieval(use_itm_head=False)` returns it.
    fn similarity(&self) -> Similarity {
        Similarity::COSINE
    }
}

/// BLIP's matching head as a fusion encoder, with its contrastive head for shortlists.
#[derive(Debug, Clone)]
pub struct BlipItm {
    loaded: Arc<Loaded>,
    itc: BlipItc,
}

impl BlipItm {
    pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Self> {
        let loaded = load(files, dtype, device)?;
        Ok(Self { itc: BlipItc(loaded.clone()), loaded })
    }

    pub fn model(&self) -> &Blip {
        &self.loaded.model
    }
}

impl FusionEncoder for BlipItm {
    fn device(&self) -> &Device {
        &self.loaded.model.device
    }

    fn preprocessor(&self) -> &Preprocessor {
        &self.loaded.preprocessor
    }

    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor> {
        self.loaded.model.image_tokens(pixels)
    }

    fn score_pairs(&self, image_states: &Tensor, texts: &[&str]) -> Result<Tensor> {
        if image_states.dim(0).ok() != Some(texts.len()) {
            return Err(Error::new(ErrorKind::Compute, "score pairs: as many image states as texts are needed"));
        }
        self.loaded.model.match_logit(image_states, &self.loaded.ids(texts)?)
    }

    fn score_kind(&self) -> ScoreKind {
        ScoreKind::Logit
    }

    /// The raw class-1 logit `itm_head(CLS)[:, 1]`, which BLIP's evaluation adds to the ITC
    /// similarity inside a shortlist.
    fn rerank_pairs(&self, image_states: &Tensor, texts: &[&str]) -> Result<Tensor> {
        if image_states.dim(0).ok() != Some(texts.len()) {
            return Err(Error::new(ErrorKind::Compute, "score pairs: as many image states as texts are needed"));
        }
        let logits = self.loaded.model.itm_logits(image_states, &self.loaded.ids(texts)?)?;
        logits.i((.., 1)).map_err(|e| Error::compute("score pairs", e))
    }

    fn shortlister(&self) -> Option<&dyn DualEncoder> {
        Some(&self.itc)
    }
}

/// BLIP for retrieval (`BlipForImageTextRetrieval`), ITM and ITC heads, as
/// [`crate::registry::ARCHITECTURES`] lists it.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "blip",
    model_types: &["blip"],
    layout: HF_LAYOUT,
    timm_towers: &[],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Itm, ScoreHead::Itc],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |size| Some(Preprocessor::stretch(size, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)),
    caption_limit: |files, _| {
        let config = BlipConfig::from_file(&files.config)?;
        let context = BLIP_MAX_TEXT_LEN.min(config.text_config.max_position_embeddings);
        let tokenizer = BertTokenizer::from_file(&files.tokenizer, context)?;
        Ok(CaptionLimit::new(context, move |t| tokenizer.tokens_cut(t)))
    },
    load: |choice, files, dtype, device| {
        Ok(if choice.head.is_fusion() {
            crate::Model::Fusion(Box::new(BlipItm::load(files, dtype, device)?))
        } else {
            crate::Model::Dual(Box::new(BlipItc::load(files, dtype, device)?))
        })
    },
    bench_towers: BenchTowers::None,
    pre_captions: true,
    patch_budget: false,
    processor_pixels: false,
    images_together: false,
    generates_replies: false,
});
