//! Qwen2.5-VL (Qwen Team, 2025, <https://arxiv.org/abs/2502.13923>) as a VQAScore model, e.g.
//! <https://huggingface.co/Qwen/Qwen2.5-VL-3B-Instruct>: scored as `t2v_metrics`' `Qwen2VLModel`
//! scores it, which asks and reads as its Qwen3-VL model does: [`load`] builds a
//! [`super::qwen3vl::Qwen3VlVqa`] (the prompt, the image state, the positions) on this family's
//! vision tower and decoder variant.
//!
//! What differs from Qwen3-VL, and is easy to get silently wrong:
//! - the vision tower (`vision.rs`) has no learned positions, RMS norms and SwiGLU MLPs, and
//!   attends within windows of merged tokens but in the few blocks `fullatt_block_indexes`
//!   names;
//! - patches are 14 pixels: `qwen_vl_utils` resizes to multiples of 28, and the processor
//!   normalises with OpenAI CLIP's mean and std;
//! - the decoder is Qwen2's: biased query, key and value projections, no query/key norms, and
//!   its rotary sections contiguous (time, then rows, then columns), not interleaved; no
//!   DeepStack;
//! - its chat template opens every conversation without a system turn with
//!   `<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n` ([`DEFAULT_SYSTEM_MESSAGE`]),
//!   which Qwen3-VL's does not: the prompt is scored with it, as `t2v_metrics`' processor
//!   renders it.
//!
//! Checkpoints come in `transformers` 4's layout (the text settings at the top of
//! `config.json`, `rope_scaling`; weights under `model.` and `visual.`) or 5's (`text_config`,
//! `rope_parameters`; `model.language_model.` and `model.visual.`): both are read.

mod vision;

use candle_core::{DType, Device};
use serde::Deserialize;

use super::qwen3vl::text::{Decoder, TextSpec};
use super::qwen3vl::{lm_head, ImageTokenIds, Parts, Qwen3VlTextConfig, Qwen3VlVqa, TextRope};
use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::{ModelFiles, HF_LAYOUT};
use crate::preprocess::{Preprocessor, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD};
use crate::vqascore::Template;
use crate::{Error, ErrorKind, Result};

/// The system message Qwen2.5-VL's chat template (`chat_template.json` of the Instruct
/// checkpoints) opens a conversation with when it is given none, as `t2v_metrics` and
/// NaturalBench's example give none: their prompts start with it.
pub const DEFAULT_SYSTEM_MESSAGE: &str = "You are a helpful assistant.";

/// The `model_type` of a Qwen2.5-VL `config.json`.
pub const MODEL_TYPE: &str = "qwen2_5_vl";

/// `config.json` of a `Qwen2_5_VLForConditionalGeneration`, the text settings gathered into
/// `text_config` where `transformers` 4 wrote them at the top.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Qwen25VlConfig {
    pub text_config: Qwen3VlTextConfig,
    pub vision_config: Qwen25VlVisionConfig,
    pub image_token_id: u32,
    pub vision_start_token_id: u32,
    pub vision_end_token_id: u32,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Qwen25VlVisionConfig {
    pub depth: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_heads: usize,
    #[serde(default = "default_vision_activation")]
    pub hidden_act: String,
    pub patch_size: usize,
    pub spatial_merge_size: usize,
    pub temporal_patch_size: usize,
    pub window_size: usize,
    pub out_hidden_size: usize,
    #[serde(default)]
    pub fullatt_block_indexes: Vec<usize>,
    #[serde(default)]
    pub rope_parameters: Option<TextRope>,
}

fn default_vision_activation() -> String {
    "silu".into()
}

impl Qwen25VlVisionConfig {
    pub fn rope_theta(&self) -> f64 {
        self.rope_parameters.as_ref().and_then(|r| r.rope_theta).unwrap_or(10_000.0)
    }
}

impl Qwen25VlConfig {
    /// The config at `path` if it is a Qwen2.5-VL one (`model_type` `qwen2_5_vl`), checked.
    pub fn read(path: &std::path::Path) -> Result<Option<Self>> {
        let mut value: serde_json::Value = super::read_config(path)?;
        if value.get("model_type").and_then(|t| t.as_str()) != Some(MODEL_TYPE) {
            return Ok(None);
        }
        let bad = |what: String| Error::new(ErrorKind::BadConfig, format!("use {}: {what}", path.display()));
        if value.get("text_config").is_none() {
            value["text_config"] = value.clone();
        }
        let config: Self = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        let (t, v) = (&config.text_config, &config.vision_config);
        if t.hidden_act != "silu" || v.hidden_act != "silu" {
            return Err(bad(format!(
                "activations `{}` and `{}` are not Qwen2.5-VL's silu",
                t.hidden_act, v.hidden_act
            )));
        }
        if t.num_attention_heads % t.num_key_value_heads != 0 || v.hidden_size % v.num_heads != 0 {
            return Err(bad("the attention heads do not divide evenly".into()));
        }
        let patch = v.patch_size * v.spatial_merge_size;
        if v.spatial_merge_size == 0 || patch == 0 || v.window_size % patch != 0 {
            return Err(bad(format!("window_size {} is not a multiple of patch × merge {patch}", v.window_size)));
        }
        if let Some(&last) = v.fullatt_block_indexes.iter().max().filter(|&&last| last >= v.depth) {
            return Err(bad(format!("fullatt_block_indexes names block {last} of {}", v.depth)));
        }
        let sections = config.text_spec().mrope_section;
        if sections.len() != 3 || sections.iter().sum::<usize>() != config.head_dim() / 2 {
            return Err(bad(format!("mrope_section {sections:?} does not split head_dim / 2 in three")));
        }
        Ok(Some(config))
    }

    fn head_dim(&self) -> usize {
        let t = &self.text_config;
        t.head_dim.unwrap_or(t.hidden_size / t.num_attention_heads)
    }

    /// The decoder's spec: Qwen2's biased projections, no query/key norms, contiguous sections.
    pub(crate) fn text_spec(&self) -> TextSpec<'_> {
        let t = &self.text_config;
        let rope = t.rope_parameters.as_ref().or(t.rope_scaling.as_ref());
        TextSpec {
            text: t,
            head_dim: self.head_dim(),
            rope_theta: rope.and_then(|r| r.rope_theta).or(t.rope_theta).unwrap_or(1_000_000.0),
            mrope_section: rope.and_then(|r| r.mrope_section.clone()).unwrap_or_else(|| vec![16, 24, 24]),
            interleaved: false,
            qk_norms: false,
            qkv_bias: true,
            mixture: None,
        }
    }

    pub fn ids(&self) -> ImageTokenIds {
        ImageTokenIds {
            image: self.image_token_id,
            vision_start: self.vision_start_token_id,
            vision_end: self.vision_end_token_id,
        }
    }

    /// `qwen_vl_utils`' resize (multiples of 28 for 14-pixel patches), OpenAI CLIP's mean and
    /// std where the checkpoint's settings give none.
    pub fn preprocessor(&self) -> Preprocessor {
        let factor = self.vision_config.patch_size * self.vision_config.spatial_merge_size;
        super::qwen3vl::qwen_vl_utils_preprocessor(factor, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)
    }
}

/// Loads a Qwen2.5-VL checkpoint (either layout) as the Qwen-VL VQAScore model, asking
/// t2v_metrics' question.
pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Qwen3VlVqa> {
    let config = Qwen25VlConfig::read(&files.config)?.ok_or_else(|| {
        Error::new(ErrorKind::BadConfig, format!("use {}: its model_type is not {MODEL_TYPE}", files.config.display()))
    })?;
    let weights = Weights::open(&files.weights, dtype, device)?;
    let (visual, text) = if weights.has("visual.patch_embed.proj.weight") {
        ("visual", "model")
    } else {
        ("model.visual", "model.language_model")
    };
    let vision = Box::new(vision::WindowVisionTower::load(&weights.pp(visual), &config.vision_config)?);
    let decoder = Decoder::load(&weights.pp(text), lm_head(&weights, &config.text_config)?, &config.text_spec())?;
    weights.check_every_tensor_used(MODEL_TYPE, &[])?;
    let parts = Parts {
        vision,
        decoder,
        ids: config.ids(),
        preprocessor: config.preprocessor(),
        system: Some(DEFAULT_SYSTEM_MESSAGE),
    };
    Qwen3VlVqa::assemble(files, parts, Template::t2v_metrics(), dtype, device)
}

/// Qwen2.5-VL scored by VQAScore, each image at its own size, as
/// [`crate::registry::ARCHITECTURES`] lists it; its preprocessing comes from its config.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "qwen2_5_vl",
    model_types: &[MODEL_TYPE],
    layout: HF_LAYOUT,
    timm_towers: &[],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Vqa],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |_| None,
    caption_limit: |files, _| {
        let config = Qwen25VlConfig::read(&files.config)?.ok_or_else(|| {
            Error::new(ErrorKind::BadConfig, format!("use {}: it is not a Qwen2.5-VL config", files.config.display()))
        })?;
        Ok(CaptionLimit::never_cut(config.text_config.max_position_embeddings))
    },
    load: |choice, files, dtype, device| {
        let load = || Ok(load(files, dtype, device)?.with_processor_pixels(choice.processor_pixels));
        crate::vqascore::generate::load_vqa(choice, files, load)
    },
    bench_towers: BenchTowers::None,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: true,
    images_together: true,
    generates_replies: true,
});
