//! FIBER (Dou et al., "Coarse-to-Fine Vision-Language Pre-training with Fusion in the
//! Backbone", NeurIPS 2022, <https://arxiv.org/abs/2206.07643>), the coarse-grained model
//! `FIBERTransformerSS` of <https://github.com/microsoft/FIBER> (`coarse_grained/`), as its
//! released PyTorch Lightning checkpoints hold it (`fiber_coco_irtr_itm.ckpt`, …; see
//! [`crate::registry::FIBER_CHECKPOINTS`]).
//!
//! A Swin-B image backbone ([`swin`]) and a RoBERTa-base text backbone ([`roberta`]) whose
//! top layers exchange information through gated cross-attention: "fusion in the backbone".
//! Two scores from one checkpoint, as `--score itm|itc` picks:
//! - **ITC**: the unimodal paths (the Swin with its final norm, RoBERTa without
//!   cross-attention), each through `cross_modal_*_transform_itc` and `*_pooler_itc` (the text
//!   at its first token, the image averaged over tokens), L2-normalised; the score is the
//!   cosine, as `compute_itc_recall` ranks ([`FiberItc`], a [`DualEncoder`]);
//! - **ITM**: the fused path: Swin stages 0–1 and stage 2's first blocks on the image, RoBERTa's
//!   first layers on the text, then the last fused blocks and layers in step, each computed
//!   from the other's previous output; the fused path skips the Swin's final norm and the
//!   last text layer's output LayerNorm. `itm_score.fc` on `[text pooler, image pooler]`
//!   gives two logits, index 1 "match" ([`FiberItm`], a [`FusionEncoder`]).
//!
//! The unimodal prefix of the fused path (the image up to the first fused block) is what
//! [`FiberItm`] caches per image; each pair then runs the six fused steps.
//!
//! Inputs as FIBER's evaluation prepares them: the `albef` transform (PIL RGB, square
//! bicubic resize to the image size, ImageNet mean/std), and `RobertaTokenizer` with
//! `truncation=True, max_length=max_text_len` (50 for the fine-tuned checkpoints).

pub mod roberta;
pub mod swin;

use std::sync::Arc;

use candle_core::{DType, Device, IndexOp, Module, Tensor, D};
use candle_nn::Linear;
use serde::Deserialize;

use self::roberta::{additive_mask, Roberta, RobertaShape};
use self::swin::{Swin, SwinShape, TextContext};
use super::transformer::{dense, l2_normalise, token};
use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::ModelFiles;
use crate::hub::{Layout, HF_LAYOUT};
use crate::preprocess::{ColourKey, ModeRule, Pipeline, Preprocessor, IMAGENET_MEAN, IMAGENET_STD};
use crate::tokenizer::RobertaTokenizer;
use crate::{DualEncoder, Error, ErrorKind, FusionEncoder, Result, ScoreKind, Similarity};

/// The text length of FIBER's fine-tuned checkpoints (`max_text_len` 50; pretraining used 40).
pub const FIBER_MAX_TEXT_LEN: usize = 50;

/// A FIBER model's shape: `config.json` beside the checkpoint (`"model_type": "fiber"`), every
/// key optional. FIBER's own `config.py` keys keep their names (`image_size`, `max_text_len`,
/// `hidden_size`, `num_fuse_block`, and `input_image_embed_size` / `input_text_embed_size`,
/// checked against the backbones). Defaults: the released FIBER-base (Swin-B, roberta-base,
/// hidden size 768, 6 fused blocks, 50 text tokens); the image size, when not given, is read
/// from the checkpoint's relative position tables (window = size / 32: 384 px for the ITM
/// checkpoints, 576 px for the ITC ones), else 384.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct FiberConfig {
    pub model_type: Option<String>,
    pub image_size: Option<usize>,
    pub max_text_len: Option<usize>,
    pub hidden_size: Option<usize>,
    pub num_fuse_block: Option<usize>,
    pub input_image_embed_size: Option<usize>,
    pub input_text_embed_size: Option<usize>,
    pub swin: SwinShape,
    pub roberta: RobertaShape,
}

impl FiberConfig {
    /// `path` when it exists, else the defaults (a checkpoint alone is enough).
    pub fn from_file_or_default(path: &std::path::Path) -> Result<Self> {
        if !path.exists() {
            return Ok(Self::default());
        }
        let config: Self = super::read_config(path)?;
        if let Some(kind) = config.model_type.as_deref().filter(|k| *k != "fiber") {
            return Err(Error::new(
                ErrorKind::BadConfig,
                format!("use {}: model_type `{kind}` is not `fiber`", path.display()),
            ));
        }
        Ok(config)
    }

    pub fn max_text_len(&self) -> usize {
        self.max_text_len.unwrap_or(FIBER_MAX_TEXT_LEN)
    }

    /// The ids a text is cut to: `max_text_len`, within RoBERTa's positions (which start
    /// after the padding id).
    pub fn text_context(&self) -> usize {
        let positions = self.roberta.max_position_embeddings.saturating_sub(self.roberta.pad_token_id as usize + 1);
        self.max_text_len().min(positions)
    }

    /// The image size: the config's, else the one the checkpoint's first window table implies.
    pub(crate) fn image_size(&self, w: Option<&Weights>) -> usize {
        let from_table = || {
            let rows = w?.dims_of("vit_model.layers.0.blocks.0.attn.relative_position_bias_table")?[0];
            let side = (rows as f64).sqrt().round() as usize;
            (side * side == rows && side % 2 == 1).then_some(side.div_ceil(2) * 32)
        };
        self.image_size.or_else(from_table).unwrap_or(384)
    }

    fn swin_shape(&self, image_size: usize) -> SwinShape {
        SwinShape { image_size, ..self.swin.clone() }
    }
}

/// Which Swin blocks and text layers run in step (FIBER's `infer`): stage 3's blocks pair
/// with the last text layers, and the fused blocks before them are stage 2's last ones
/// (Swin-B, 12 text layers, 6 fused: stage-2 blocks 14–17 with layers 6–9, stage-3 blocks
/// 0–1 with layers 10–11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FusionLayout {
    /// The first fused block of stage 2.
    pub first_fused_block: usize,
    /// The first fused text layer.
    pub first_fused_layer: usize,
    pub stage2_depth: usize,
    pub stage3_depth: usize,
    pub text_layers: usize,
}

impl FusionLayout {
    fn new(swin: &SwinShape, text_layers: usize, fused: usize, source: &str) -> Result<Self> {
        let bad = |why: String| Err(Error::new(ErrorKind::BadConfig, format!("use {source}: {why}")));
        if swin.depths.len() != 4 {
            return bad(format!(
                "FIBER fuses Swin stages 2 and 3 of 4; swin depths {:?} have {}",
                swin.depths,
                swin.depths.len()
            ));
        }
        let (d2, d3) = (swin.depths[2], swin.depths[3]);
        if fused <= d3 || fused - d3 > d2 || fused > text_layers {
            return bad(format!(
                "num_fuse_block {fused} does not fit stage depths {d2} and {d3} and {text_layers} text layers"
            ));
        }
        Ok(Self {
            first_fused_block: d2 - (fused - d3),
            first_fused_layer: text_layers - fused,
            stage2_depth: d2,
            stage3_depth: d3,
            text_layers,
        })
    }

    /// The width of the image tokens text layer `i` attends to, `None` for unfused layers.
    fn image_width(&self, i: usize, swin: &SwinShape) -> Option<usize> {
        if i < self.first_fused_layer {
            None
        } else if i < self.text_layers - self.stage3_depth {
            Some(swin.stage_dim(2))
        } else {
            Some(swin.stage_dim(3))
        }
    }

    fn is_fused_block(&self, stage: usize, block: usize) -> bool {
        (stage == 2 && block >= self.first_fused_block) || stage == 3
    }
}

/// Every intermediate of the fused path, for parity checks.
#[derive(Debug, Default)]
pub struct FusionTrace {
    /// `(image, text)` after each fused step.
    pub steps: Vec<(Tensor, Tensor)>,
    /// After stage 2's patch merging.
    pub stage2_out: Option<Tensor>,
}

/// What the fused path's heads see: the features and the pooled `cls_feats`.
#[derive(Debug)]
pub struct FusedHeads {
    pub text_feats: Tensor,
    pub image_feats: Tensor,
    pub cls_feats: Tensor,
}

/// The whole model.
#[derive(Debug)]
pub struct Fiber {
    swin: Swin,
    roberta: Roberta,
    layout: FusionLayout,
    text_transform: Linear,
    image_transform: Linear,
    text_pooler: Linear,
    image_pooler: Linear,
    text_transform_itc: Linear,
    image_transform_itc: Linear,
    text_pooler_itc: Linear,
    image_pooler_itc: Linear,
    /// `itm_score.fc`, absent from ITC-only checkpoints.
    itm: Option<Linear>,
    /// The ITC temperature, where the checkpoint has one (`temp`).
    temp: Option<f32>,
    /// The input size the Swin was built for.
    image_size: usize,
    device: Device,
    dtype: DType,
}

/// Token ids padded to one length and their attention mask (1 real, 0 padding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextBatch {
    pub ids: Vec<Vec<u32>>,
    pub mask: Vec<Vec<u8>>,
}

impl TextBatch {
    /// Rows of ids padded with `pad` to the longest.
    pub fn pad(rows: &[Vec<u32>], pad: u32) -> Self {
        let len = rows.iter().map(Vec::len).max().unwrap_or(0);
        let ids = rows.iter().map(|r| r.iter().copied().chain(std::iter::repeat(pad)).take(len).collect()).collect();
        let mask = rows.iter().map(|r| (0..len).map(|i| u8::from(i < r.len())).collect()).collect();
        Self { ids, mask }
    }
}

impl Fiber {
    /// Builds the model from `w` (the LightningModule's state dict naming) with `config`.
    pub(crate) fn from_weights(config: &FiberConfig, w: &Weights, source: &str) -> Result<Self> {
        let swin_shape = config.swin_shape(config.image_size(Some(w)));
        swin_shape.check(source)?;
        let text = &config.roberta;
        let layout =
            FusionLayout::new(&swin_shape, text.num_hidden_layers, config.num_fuse_block.unwrap_or(6), source)?;
        let image_width = swin_shape.stage_dim(3);
        let mismatch = |key: &str, given: usize, built: usize| {
            Err(Error::new(
                ErrorKind::BadConfig,
                format!("use {source}: {key} is {given} but the backbone it names is {built} wide"),
            ))
        };
        if let Some(given) = config.input_image_embed_size.filter(|&g| g != image_width) {
            return mismatch("input_image_embed_size", given, image_width);
        }
        if let Some(given) = config.input_text_embed_size.filter(|&g| g != text.hidden_size) {
            return mismatch("input_text_embed_size", given, text.hidden_size);
        }
        let hidden = config.hidden_size.unwrap_or(768);
        let swin = Swin::load(&w.pp("vit_model"), &swin_shape, text.hidden_size, |s, b| layout.is_fused_block(s, b))?;
        let roberta = Roberta::load(&w.pp("text_transformer"), text, |i| layout.image_width(i, &swin_shape))?;
        let itm = if w.has("itm_score.fc.weight") {
            // `rank_output` is a view of row 1 of this head; read it so that it counts as used.
            if w.has("rank_output.weight") {
                w.pp("rank_output").linear(2 * hidden, 1, true)?;
            }
            Some(w.pp("itm_score.fc").linear(2 * hidden, 2, true)?)
        } else {
            None
        };
        let temp = if w.has("temp") {
            let temp = w.get((), "temp")?;
            Some(
                temp.to_dtype(DType::F32)
                    .and_then(|t| t.to_scalar::<f32>())
                    .map_err(|e| Error::compute("read temp", e))?,
            )
        } else {
            None
        };
        Ok(Self {
            swin,
            roberta,
            layout,
            text_transform: w.pp("cross_modal_text_transform").linear(text.hidden_size, hidden, true)?,
            image_transform: w.pp("cross_modal_image_transform").linear(image_width, hidden, true)?,
            text_pooler: w.pp("cross_modal_text_pooler.dense").linear(hidden, hidden, true)?,
            image_pooler: w.pp("cross_modal_image_pooler.dense").linear(hidden, hidden, true)?,
            text_transform_itc: w.pp("cross_modal_text_transform_itc").linear(text.hidden_size, hidden, true)?,
            image_transform_itc: w.pp("cross_modal_image_transform_itc").linear(image_width, hidden, true)?,
            text_pooler_itc: w.pp("cross_modal_text_pooler_itc.dense").linear(hidden, hidden, true)?,
            image_pooler_itc: w.pp("cross_modal_image_pooler_itc.dense").linear(hidden, hidden, true)?,
            itm,
            temp,
            image_size: swin_shape.image_size,
            device: w.device().clone(),
            dtype: w.dtype(),
        })
    }

    pub fn image_size(&self) -> usize {
        self.image_size
    }

    pub fn layout(&self) -> FusionLayout {
        self.layout
    }

    pub fn has_itm_head(&self) -> bool {
        self.itm.is_some()
    }

    /// The ITC temperature (`temp`; training divides the similarities by it).
    pub fn temp(&self) -> Option<f32> {
        self.temp
    }

    /// Reads a FIBER from `weights` (safetensors or a PyTorch / Lightning checkpoint) with
    /// `config`, refusing missing tensors, wrong shapes and layers beyond the config's.
    pub fn load(config: &FiberConfig, weights: &std::path::Path, dtype: DType, device: &Device) -> Result<Self> {
        let w = Weights::open(weights, dtype, device)?;
        let model = Self::from_weights(config, &w, &weights.display().to_string())?;
        w.check_every_tensor_used("FIBER", FIBER_UNUSED)?;
        Ok(model)
    }

    /// The unimodal image path stage by stage: the patch tokens, each stage's output
    /// (patch merging included), and the final norm's.
    pub fn image_stages(&self, pixels: &Tensor) -> Result<Vec<Tensor>> {
        let run = || -> candle_core::Result<Vec<Tensor>> {
            let mut outputs = vec![self.swin.embed(&pixels.to_dtype(self.dtype)?)?];
            for s in 0..self.swin.stages() {
                let next = self.swin.stage(s, outputs[outputs.len() - 1].clone())?;
                outputs.push(next);
            }
            outputs.push(self.swin.forward_norm(&outputs[outputs.len() - 1])?);
            Ok(outputs)
        };
        run().map_err(|e| Error::compute("encode images", e))
    }

    /// `(b, 1, 1, L)` additive mask of a text batch, in the model's dtype.
    pub fn text_mask(&self, text: &TextBatch) -> Result<Tensor> {
        additive_mask(&text.mask, self.dtype, &self.device).map_err(|e| Error::compute("build the text mask", e))
    }

    /// The unimodal image backbone (all stages and the final norm).
    pub fn image_backbone(&self, pixels: &Tensor) -> Result<Tensor> {
        pixels.to_dtype(self.dtype).and_then(|p| self.swin.forward(&p)).map_err(|e| Error::compute("encode images", e))
    }

    /// ITC image features `(b, tokens, hidden)` and L2-normalised embeddings `(b, hidden)`
    /// from the unimodal backbone's output.
    pub fn itc_image_from_backbone(&self, backbone: &Tensor) -> Result<(Tensor, Tensor)> {
        let run = || -> candle_core::Result<(Tensor, Tensor)> {
            let feats = dense(&self.image_transform_itc, backbone)?;
            let pooled = self.image_pooler_itc.forward(&feats.mean(1)?)?.tanh()?;
            Ok((feats.clone(), l2_normalise(&pooled)?))
        };
        run().map_err(|e| Error::compute("project image embeddings", e))
    }

    /// The unimodal text backbone: embeddings and every layer, no cross-attention.
    pub fn text_backbone(&self, text: &TextBatch) -> Result<Tensor> {
        let mask = self.text_mask(text)?;
        self.roberta
            .embed(&text.ids)
            .and_then(|xs| self.roberta.run_layers(0..self.roberta.depth(), xs, &mask))
            .map_err(|e| Error::compute("encode texts", e))
    }

    /// The text embeddings alone (before any layer).
    pub fn text_embeddings(&self, text: &TextBatch) -> Result<Tensor> {
        self.roberta.embed(&text.ids).map_err(|e| Error::compute("embed texts", e))
    }

    /// ITC text features `(b, L, hidden)` and L2-normalised embeddings `(b, hidden)`.
    pub fn itc_text_from_backbone(&self, backbone: &Tensor) -> Result<(Tensor, Tensor)> {
        let run = || -> candle_core::Result<(Tensor, Tensor)> {
            let feats = dense(&self.text_transform_itc, backbone)?;
            let pooled = self.text_pooler_itc.forward(&token(&feats, 0)?)?.tanh()?;
            Ok((feats.clone(), l2_normalise(&pooled)?))
        };
        run().map_err(|e| Error::compute("project text embeddings", e))
    }

    /// The image tokens entering the first fused block: patch embedding, stages 0 and 1,
    /// and stage 2's unfused blocks.
    pub fn image_prefusion(&self, pixels: &Tensor) -> Result<Tensor> {
        let run = || -> candle_core::Result<Tensor> {
            let xs = self.swin.embed(&pixels.to_dtype(self.dtype)?)?;
            let xs = self.swin.stage(0, xs)?;
            let xs = self.swin.stage(1, xs)?;
            self.swin.run_blocks(2, 0..self.layout.first_fused_block, xs)
        };
        run().map_err(|e| Error::compute("encode images", e))
    }

    /// The text states entering the first fused layer.
    pub fn text_prefusion(&self, text: &TextBatch, mask: &Tensor) -> Result<Tensor> {
        self.roberta
            .embed(&text.ids)
            .and_then(|xs| self.roberta.run_layers(0..self.layout.first_fused_layer, xs, mask))
            .map_err(|e| Error::compute("encode texts", e))
    }

    /// The fused steps on aligned pairs: `image` `(P, n, C₂)` pre-fusion tokens, `text`
    /// `(P, L, D)` pre-fusion states with their mask → the fused backbones' outputs `(image
    /// (P, n₃, C₃), text (P, L, D))`. Each step's new image and new text both come from the
    /// previous step's outputs.
    pub fn fuse(
        &self,
        image: &Tensor,
        text: &Tensor,
        mask: &Tensor,
        mut trace: Option<&mut FusionTrace>,
    ) -> Result<(Tensor, Tensor)> {
        let l = self.layout;
        let run = |trace: &mut Option<&mut FusionTrace>| -> candle_core::Result<(Tensor, Tensor)> {
            let (mut img, mut txt) = (image.to_dtype(self.dtype)?, text.clone());
            let mut layer = l.first_fused_layer;
            for block in l.first_fused_block..l.stage2_depth {
                let context = TextContext { states: &txt, mask };
                let new_img = self.swin.fused_block(2, block, &img, context)?;
                txt = self.roberta.fused_layer(layer, &txt, mask, &img, true)?;
                img = new_img;
                layer += 1;
                if let Some(t) = trace.as_deref_mut() {
                    t.steps.push((img.clone(), txt.clone()));
                }
            }
            img = self.swin.downsample(2, img)?;
            if let Some(t) = trace.as_deref_mut() {
                t.stage2_out = Some(img.clone());
            }
            for block in 0..l.stage3_depth {
                let context = TextContext { states: &txt, mask };
                let new_img = self.swin.fused_block(3, block, &img, context)?;
                // As FIBER's `infer`: `last_norm=(blk_cnt == 0)`.
                txt = self.roberta.fused_layer(layer, &txt, mask, &img, block == 0)?;
                img = new_img;
                layer += 1;
                if let Some(t) = trace.as_deref_mut() {
                    t.steps.push((img.clone(), txt.clone()));
                }
            }
            Ok((img, txt))
        };
        run(&mut trace).map_err(|e| Error::compute("fuse image and text", e))
    }

    /// The fused path's heads on the fused backbones' outputs.
    pub fn fused_heads(&self, image: &Tensor, text: &Tensor) -> Result<FusedHeads> {
        let run = || -> candle_core::Result<FusedHeads> {
            let text_feats = dense(&self.text_transform, text)?;
            let image_feats = dense(&self.image_transform, image)?;
            let text_cls = self.text_pooler.forward(&token(&text_feats, 0)?)?.tanh()?;
            let image_cls = self.image_pooler.forward(&image_feats.mean(1)?)?.tanh()?;
            let cls_feats = Tensor::cat(&[&text_cls, &image_cls], D::Minus1)?;
            Ok(FusedHeads { text_feats, image_feats, cls_feats })
        };
        run().map_err(|e| Error::compute("pool fused features", e))
    }

    /// `itm_score.fc(cls_feats)`, `(P, 2)` in f32, index 1 "match".
    pub fn itm_logits(&self, cls_feats: &Tensor) -> Result<Tensor> {
        let Some(itm) = &self.itm else {
            return Err(Error::new(
                ErrorKind::BadWeights,
                "score pairs: this FIBER checkpoint has no ITM head (`itm_score.fc`); use --score itc",
            ));
        };
        itm.forward(cls_feats).and_then(|l| l.to_dtype(DType::F32)).map_err(|e| Error::compute("score pairs", e))
    }

    /// ITM logits of aligned (pre-fusion image tokens, text) pairs.
    pub fn pair_logits(&self, image_prefusion: &Tensor, text: &TextBatch) -> Result<Tensor> {
        let mask = self.text_mask(text)?;
        let states = self.text_prefusion(text, &mask)?;
        let (img, txt) = self.fuse(image_prefusion, &states, &mask, None)?;
        self.itm_logits(&self.fused_heads(&img, &txt)?.cls_feats)
    }
}

/// A loaded FIBER with its tokenizer and preprocessing, shared by both heads.
#[derive(Debug)]
struct Loaded {
    model: Fiber,
    tokenizer: RobertaTokenizer,
    preprocessor: Preprocessor,
}

/// FIBER's `albef` eval transform at `size`.
pub fn preprocessor(size: usize) -> Preprocessor {
    Preprocessor {
        pipeline: Pipeline::Torchvision,
        modes: ModeRule::ConvertFirst { colour_key: ColourKey::Kept },
        ..Preprocessor::stretch(size, IMAGENET_MEAN, IMAGENET_STD)
    }
}

fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Arc<Loaded>> {
    let config = FiberConfig::from_file_or_default(&files.config)?;
    let model = Fiber::load(&config, &files.weights, dtype, device)?;
    let tokenizer = RobertaTokenizer::from_file(&files.tokenizer, config.text_context())?;
    let preprocessor = preprocessor(model.image_size);
    Ok(Arc::new(Loaded { model, tokenizer, preprocessor }))
}

/// What a FIBER checkpoint may hold that retrieval does not use (from `FIBERTransformerSS`
/// in microsoft/FIBER's `fiber_module.py` and the reference model): buffers recomputed here
/// (position ids, Swin's relative position index and shift mask), the ITC queues and the
/// training inputs kept for hard negatives, the heads of other tasks (MLM, captioning, VQA,
/// NLVR2), RoBERTa's own pooler, and parts the fusion never reads (the gates of unfused
/// layers, the norm of the cross-attention output).
const FIBER_UNUSED: &[&str] = &[
    ".position_ids",
    ".relative_position_index",
    ".attn_mask",
    "image_queue",
    "text_queue",
    "image_input_queue",
    "text_input_queue",
    "text_input_mask_queue",
    "queue_ptr",
    "queue_total",
    "mlm_score.",
    "cross_modal_att_layers.",
    "vqa_classifier.",
    "nlvr2_classifier.",
    "text_transformer.pooler.",
    ".alpha_t2i",
    ".crossattention_t2i.output.LayerNorm.",
];

/// FIBER-base with random weights at `image_size` (benchmarks and smoke tests).
pub fn random_base(image_size: usize, dtype: DType, device: &Device) -> Result<Fiber> {
    let config = FiberConfig { image_size: Some(image_size), ..FiberConfig::default() };
    Weights::build_random(dtype, device, "random FIBER-base", |w| Fiber::from_weights(&config, w, "random FIBER-base"))
}

/// Writes a FIBER-base of random weights at `image_size` as safetensors in the official
/// naming (full-size benchmarks and smoke runs of the whole evaluation path, no download).
pub fn save_random_base(image_size: usize, path: &std::path::Path) -> Result<()> {
    let config = FiberConfig { image_size: Some(image_size), ..FiberConfig::default() };
    let varmap = candle_nn::VarMap::new();
    let vb = candle_nn::VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    drop(Fiber::from_weights(
        &config,
        &Weights::from_var_builder(vb, "random FIBER-base").random(),
        "random FIBER-base",
    )?);
    varmap.save(path).map_err(|e| {
        Error::caused_by(ErrorKind::BadWeights, format!("write random weights {}: {e}", path.display()), e)
    })
}

impl Loaded {
    fn texts(&self, texts: &[&str]) -> Result<TextBatch> {
        let rows = texts.iter().map(|t| self.tokenizer.encode(t)).collect::<Result<Vec<_>>>()?;
        Ok(TextBatch::pad(&rows, self.tokenizer.pad()))
    }
}

/// FIBER's contrastive head as a dual encoder: cosine similarities.
#[derive(Debug, Clone)]
pub struct FiberItc(Arc<Loaded>);

impl FiberItc {
    pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Self> {
        Ok(Self(load(files, dtype, device)?))
    }

    pub fn model(&self) -> &Fiber {
        &self.0.model
    }

    pub fn tokenizer(&self) -> &RobertaTokenizer {
        &self.0.tokenizer
    }
}

impl DualEncoder for FiberItc {
    fn device(&self) -> &Device {
        &self.0.model.device
    }

    fn preprocessor(&self) -> &Preprocessor {
        &self.0.preprocessor
    }

    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor> {
        let m = &self.0.model;
        Ok(m.itc_image_from_backbone(&m.image_backbone(pixels)?)?.1)
    }

    fn encode_texts(&self, texts: &[&str]) -> Result<Tensor> {
        let m = &self.0.model;
        Ok(m.itc_text_from_backbone(&m.text_backbone(&self.0.texts(texts)?)?)?.1)
    }

    /// The cosine, as `compute_itc_recall` ranks (training divides it by `temp`).
    fn similarity(&self) -> Similarity {
        Similarity::COSINE
    }
}

/// FIBER's matching head as a fusion encoder, with its contrastive head for shortlists.
#[derive(Debug, Clone)]
pub struct FiberItm {
    loaded: Arc<Loaded>,
    itc: FiberItc,
}

impl FiberItm {
    pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Self> {
        let loaded = load(files, dtype, device)?;
        if !loaded.model.has_itm_head() {
            return Err(Error::new(
                ErrorKind::BadWeights,
                format!(
                    "load {}: this FIBER checkpoint has no ITM head (`itm_score.fc`, as in the `*_irtr_itc` checkpoints); use --score itc",
                    files.weights.display()
                ),
            ));
        }
        Ok(Self { itc: FiberItc(loaded.clone()), loaded })
    }

    pub fn model(&self) -> &Fiber {
        &self.loaded.model
    }

    fn logits(&self, image_states: &Tensor, texts: &[&str]) -> Result<Tensor> {
        if image_states.dim(0).ok() != Some(texts.len()) {
            return Err(Error::new(ErrorKind::Compute, "score pairs: as many image states as texts are needed"));
        }
        self.loaded.model.pair_logits(image_states, &self.loaded.texts(texts)?)
    }
}

impl FusionEncoder for FiberItm {
    fn device(&self) -> &Device {
        &self.loaded.model.device
    }

    fn preprocessor(&self) -> &Preprocessor {
        &self.loaded.preprocessor
    }

    /// The image tokens entering the first fused block (shared by every text paired with it).
    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor> {
        self.loaded.model.image_prefusion(pixels)
    }

    /// The match logit `l1 − l0`: `softmax(l)[1] = σ(l1 − l0)` is the match probability.
    fn score_pairs(&self, image_states: &Tensor, texts: &[&str]) -> Result<Tensor> {
        let l = self.logits(image_states, texts)?;
        (|| l.i((.., 1))? - l.i((.., 0))?)().map_err(|e| Error::compute("score pairs", e))
    }

    fn score_kind(&self) -> ScoreKind {
        ScoreKind::Logit
    }

    /// `rank_output(cls_feats)`, the class-1 logit `compute_itm_recall` ranks by.
    fn rerank_pairs(&self, image_states: &Tensor, texts: &[&str]) -> Result<Tensor> {
        let l = self.logits(image_states, texts)?;
        l.i((.., 1)).map_err(|e| Error::compute("score pairs", e))
    }

    fn shortlister(&self) -> Option<&dyn DualEncoder> {
        Some(&self.itc)
    }
}

/// FIBER's coarse-grained model, ITM and ITC heads, as [`crate::registry::ARCHITECTURES`] lists
/// it: released as PyTorch checkpoints without a `config.json`.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "fiber",
    model_types: &["fiber"],
    // Its preprocessing is ALBEF's, fixed: no image settings are read.
    layout: Layout { image_settings: false, generation: false, ..HF_LAYOUT },
    timm_towers: &[],
    released_as_torch_checkpoint: true,
    heads: &[ScoreHead::Itm, ScoreHead::Itc],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |size| Some(preprocessor(size)),
    caption_limit: |files, _| {
        let context = FiberConfig::from_file_or_default(&files.config)?.text_context();
        let tokenizer = RobertaTokenizer::from_file(&files.tokenizer, context)?;
        Ok(CaptionLimit::new(context, move |t| tokenizer.tokens_cut(t)))
    },
    load: |choice, files, dtype, device| {
        Ok(if choice.head.is_fusion() {
            crate::Model::Fusion(Box::new(FiberItm::load(files, dtype, device)?))
        } else {
            crate::Model::Dual(Box::new(FiberItc::load(files, dtype, device)?))
        })
    },
    bench_towers: BenchTowers::None,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: false,
    images_together: false,
    generates_replies: false,
});
