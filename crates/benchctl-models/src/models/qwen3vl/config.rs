//! Qwen3-VL's `config.json`, as `transformers` 4 and 5 write it, checked on load.

use serde::Deserialize;

use crate::preprocess::{ColourKey, ModeRule, Pipeline, Preprocessor, Resize, HALF, RESCALE_1_255};
use crate::{Error, ErrorKind, Result};

/// The prompt's special tokens a Qwen-VL config names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageTokenIds {
    pub image: u32,
    pub vision_start: u32,
    pub vision_end: u32,
}

/// `config.json` of a `Qwen3VLForConditionalGeneration` or a `Qwen3VLMoeForConditionalGeneration`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Qwen3VlConfig {
    /// `qwen3_vl`, or `qwen3_vl_moe` for the mixtures of experts.
    #[serde(default)]
    pub model_type: Option<String>,
    pub text_config: Qwen3VlTextConfig,
    pub vision_config: Qwen3VlVisionConfig,
    pub image_token_id: u32,
    pub vision_start_token_id: u32,
    pub vision_end_token_id: u32,
}

/// The language model's part, as `transformers` 4 (`rope_scaling`, `rope_theta`) or 5
/// (`rope_parameters`) write it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Qwen3VlTextConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub rope_parameters: Option<TextRope>,
    #[serde(default)]
    pub rope_scaling: Option<TextRope>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    pub max_position_embeddings: usize,
    #[serde(default = "default_text_activation")]
    pub hidden_act: String,
    /// Qwen3-MoE's mixture (InternVL3.5's mixture-of-experts decoders): none where 0.
    /// `transformers` 5 writes it as `num_local_experts`.
    #[serde(default, alias = "num_local_experts")]
    pub num_experts: usize,
    #[serde(default)]
    pub num_experts_per_tok: usize,
    #[serde(default)]
    pub moe_intermediate_size: usize,
    #[serde(default)]
    pub norm_topk_prob: bool,
    #[serde(default = "default_sparse_step")]
    pub decoder_sparse_step: usize,
    /// `null` in some configs, read as none.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub mlp_only_layers: Vec<usize>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<usize>, D::Error> {
    Ok(Option::<Vec<usize>>::deserialize(d)?.unwrap_or_default())
}

/// The decoder's rotary settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TextRope {
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub mrope_section: Option<Vec<usize>>,
    #[serde(default)]
    pub mrope_interleaved: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Qwen3VlVisionConfig {
    pub depth: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_heads: usize,
    #[serde(default = "default_vision_activation")]
    pub hidden_act: String,
    pub patch_size: usize,
    pub spatial_merge_size: usize,
    pub temporal_patch_size: usize,
    pub out_hidden_size: usize,
    pub num_position_embeddings: usize,
    #[serde(default)]
    pub deepstack_visual_indexes: Vec<usize>,
    #[serde(default)]
    pub rope_parameters: Option<TextRope>,
}

impl Qwen3VlTextConfig {
    /// A mixture's settings, where the decoder is one: at least one expert, and 1 to all of them a token.
    pub(crate) fn check_mixture(&self) -> std::result::Result<(), String> {
        if self.num_experts == 0 || self.num_experts_per_tok == 0 || self.num_experts_per_tok > self.num_experts {
            return Err(format!(
                "text_config.num_experts_per_tok {} of num_experts {} is not a mixture benchctl computes",
                self.num_experts_per_tok, self.num_experts
            ));
        }
        Ok(())
    }
}

fn default_eps() -> f64 {
    1e-6
}
fn default_sparse_step() -> usize {
    1
}
fn default_text_activation() -> String {
    "silu".into()
}
fn default_vision_activation() -> String {
    "gelu_pytorch_tanh".into()
}

impl Qwen3VlConfig {
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let config: Self = crate::models::read_config(path)?;
        let bad = |what: String| Error::new(ErrorKind::BadConfig, format!("use {}: {what}", path.display()));
        let (t, v) = (&config.text_config, &config.vision_config);
        if t.hidden_act != "silu" || v.hidden_act != "gelu_pytorch_tanh" {
            return Err(bad(format!(
                "activations `{}` (text) and `{}` (vision) are not Qwen3-VL's silu and gelu_pytorch_tanh",
                t.hidden_act, v.hidden_act
            )));
        }
        let side = (v.num_position_embeddings as f64).sqrt() as usize;
        if side * side != v.num_position_embeddings || v.temporal_patch_size == 0 || v.spatial_merge_size == 0 {
            return Err(bad("the vision tower's position table is not square, or a patch size is 0".into()));
        }
        if t.num_attention_heads % t.num_key_value_heads != 0 || v.hidden_size % v.num_heads != 0 {
            return Err(bad("the attention heads do not divide evenly".into()));
        }
        if let Some(&last) = v.deepstack_visual_indexes.iter().max() {
            if last >= v.depth || v.deepstack_visual_indexes.len() > t.num_hidden_layers {
                return Err(bad(format!("DeepStack index {last} is past the vision tower or the decoder")));
            }
        }
        if config.model_type() == "qwen3_vl_moe" {
            t.check_mixture().map_err(bad)?;
        }
        let sections = config.mrope_section();
        if sections.len() != 3 || sections.iter().sum::<usize>() != config.head_dim() / 2 {
            return Err(bad(format!("mrope_section {sections:?} does not split head_dim / 2 in three")));
        }
        Ok(config)
    }

    /// The architecture's name, as the config gives it.
    pub(crate) fn model_type(&self) -> &str {
        self.model_type.as_deref().unwrap_or("qwen3_vl")
    }

    /// The prompt's special tokens.
    pub fn ids(&self) -> ImageTokenIds {
        ImageTokenIds {
            image: self.image_token_id,
            vision_start: self.vision_start_token_id,
            vision_end: self.vision_end_token_id,
        }
    }

    pub(crate) fn head_dim(&self) -> usize {
        let t = &self.text_config;
        t.head_dim.unwrap_or(t.hidden_size / t.num_attention_heads)
    }

    fn text_rope(&self) -> Option<&TextRope> {
        self.text_config.rope_parameters.as_ref().or(self.text_config.rope_scaling.as_ref())
    }

    pub(crate) fn rope_theta(&self) -> f64 {
        self.text_rope().and_then(|r| r.rope_theta).or(self.text_config.rope_theta).unwrap_or(5_000_000.0)
    }

    pub(crate) fn mrope_section(&self) -> Vec<usize> {
        self.text_rope().and_then(|r| r.mrope_section.clone()).unwrap_or_else(|| vec![24, 20, 20])
    }

    pub(crate) fn interleaved(&self) -> bool {
        self.text_rope().and_then(|r| r.mrope_interleaved).unwrap_or(true)
    }

    /// `qwen_vl_utils`' resize (what `t2v_metrics` runs) with the checkpoint's mean and std:
    /// sides in multiples of the patch size × the merge size, 4 to 16,384 merged tokens.
    pub fn preprocessor(&self) -> Preprocessor {
        qwen_vl_utils_preprocessor(self.vision_config.patch_size * self.vision_config.spatial_merge_size, HALF, HALF)
    }
}

/// `qwen_vl_utils`' resize at `factor` (the patch size × the merge size): sides in multiples of
/// it, 4 to 16,384 merged tokens; `mean` and `std` the processor's defaults.
pub(crate) fn qwen_vl_utils_preprocessor(factor: usize, mean: [f32; 3], std: [f32; 3]) -> Preprocessor {
    Preprocessor {
        size: factor,
        resize: Resize::Native {
            factor,
            min_pixels: 4 * factor * factor,
            max_pixels: 16_384 * factor * factor,
            processor: None,
        },
        mean,
        std,
        pipeline: Pipeline::Transformers { rescale_factor: RESCALE_1_255 },
        filter: crate::preprocess::Filter::Bicubic,
        // `t2v_metrics` opens every image with `convert("RGB")`; `qwen_vl_utils` resizes it
        // before the processor's `convert_to_rgb`.
        modes: ModeRule::ConvertFirst { colour_key: ColourKey::WhiteAfterResize },
        square_canvas: None,
    }
}
