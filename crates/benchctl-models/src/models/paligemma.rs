//! PaliGemma (Beyer et al., 2024, *PaliGemma: A versatile 3B VLM for transfer*,
//! <https://arxiv.org/abs/2407.07726>) as a VQAScore model, e.g.
//! <https://huggingface.co/google/paligemma-3b-mix-224>: a SigLIP tower whose patch tokens are
//! projected into a Gemma 1 decoder.
//!
//! The prompt is the one `t2v_metrics`' PaliGemma model builds with the checkpoint's processor,
//! `processor(text=question, images=image)`: the image tokens, `<bos>`, the question and `\n`;
//! the score is the log-softmax of the next token's logits at the answer's token.
//!
//! What sets it apart, and is easy to get silently wrong:
//! - the whole prompt, image and text, is a *prefix*: every position of it attends to every
//!   other both ways (an answer teacher-forced after it is causal), so the image's states
//!   depend on the caption and no prompt state can be shared between captions; an image's
//!   projected patch tokens are what is computed once;
//! - rotary positions count from 1, not 0;
//! - the patch tokens, projected, replace the image tokens' embeddings *unscaled*, while token
//!   embeddings are multiplied by `√hidden`;
//! - its processor turns the tokenizer's `<bos>` off, so `tokenizer.encode("Yes")[0]`, the
//!   token `t2v_metrics` reads, is "Yes" itself.
//!
//! PaliGemma 2 (a Gemma 2 decoder) is refused by name.

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use super::gemma::{multimodal_parts, Decoder, DecoderSpec};
use super::siglip::{SiglipVisionConfig, VisionTower};
use super::transformer::Dense;
use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::ModelFiles;
use crate::hub::HF_SHARDED_LAYOUT;
use crate::preprocess::{ColourKey, ModeRule, Preprocessor, HALF};
use crate::vqascore::local::{answer_ids, encode_caption_prompt, load_tokenizer, LocalVqa, ReplyState};
use crate::vqascore::Template;
use crate::{Error, ErrorKind, Result};

/// `config.json` of a `PaliGemmaForConditionalGeneration`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PaliGemmaConfig {
    pub text_config: PaliGemmaTextConfig,
    pub vision_config: SiglipVisionConfig,
    /// The projector's output width (the decoder's hidden size).
    pub projection_dim: usize,
    pub image_token_index: u32,
}

/// The Gemma decoder's part, with `transformers`' `GemmaConfig` defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PaliGemmaTextConfig {
    #[serde(default = "default_model_type")]
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    #[serde(default = "default_head_dim")]
    pub head_dim: usize,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub hidden_activation: Option<String>,
    #[serde(default)]
    pub hidden_act: Option<String>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_parameters: Option<super::gemma3::RopeParameters>,
    #[serde(default = "default_positions")]
    pub max_position_embeddings: usize,
}

fn default_model_type() -> String {
    "gemma".into()
}
fn default_head_dim() -> usize {
    256
}
fn default_eps() -> f64 {
    1e-6
}
fn default_positions() -> usize {
    8192
}

impl PaliGemmaConfig {
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let config: Self = super::read_config(path)?;
        let bad = |what: String| Error::new(ErrorKind::BadConfig, format!("use {}: {what}", path.display()));
        let (t, v) = (&config.text_config, &config.vision_config);
        if t.model_type != "gemma" {
            return Err(bad(format!(
                "text_config.model_type `{}` is not supported (PaliGemma 1's `gemma` is; PaliGemma 2's Gemma 2 decoder is not)",
                t.model_type
            )));
        }
        super::check_patch_grid(path, v.image_size, v.patch_size)?;
        if t.num_key_value_heads == 0 || !t.num_attention_heads.is_multiple_of(t.num_key_value_heads) {
            return Err(bad(format!(
                "{} attention heads do not share {} key-value heads evenly",
                t.num_attention_heads, t.num_key_value_heads
            )));
        }
        if config.projection_dim != t.hidden_size {
            return Err(bad(format!(
                "projection_dim {} must equal the decoder's hidden_size {}",
                config.projection_dim, t.hidden_size
            )));
        }
        if let Some(p) = &t.rope_parameters {
            if p.rope_type != "default" {
                return Err(bad(format!("the RoPE type `{}` is not supported", p.rope_type)));
            }
        }
        Ok(config)
    }

    fn decoder_spec(&self) -> DecoderSpec {
        let t = &self.text_config;
        let theta = t.rope_parameters.as_ref().and_then(|p| p.rope_theta).or(t.rope_theta).unwrap_or(10_000.0);
        DecoderSpec {
            vocab: t.vocab_size,
            hidden: t.hidden_size,
            intermediate: t.intermediate_size,
            heads: t.num_attention_heads,
            kv_heads: t.num_key_value_heads,
            head_dim: t.head_dim,
            eps: t.rms_norm_eps,
            activation: t
                .hidden_activation
                .clone()
                .or_else(|| t.hidden_act.clone())
                .unwrap_or_else(|| "gelu_pytorch_tanh".into()),
            scale: (t.head_dim as f64).powf(-0.5),
            attn_softcap: None,
            final_softcap: None,
            layers: vec![(None, theta, 1.0); t.num_hidden_layers],
            sandwich_norms: false,
            positions: t.max_position_embeddings.min(8192),
        }
    }

    /// Image tokens per image: one per patch.
    pub fn image_tokens(&self) -> usize {
        (self.vision_config.image_size / self.vision_config.patch_size).pow(2)
    }
}

/// PaliGemma's vision tower, projector and decoder.
#[derive(Debug, Clone)]
pub struct PaliGemma {
    vision: VisionTower,
    projector: Dense,
    decoder: Decoder,
    image_token: u32,
}

impl PaliGemma {
    fn from_weights(config: &PaliGemmaConfig, w: &Weights) -> Result<Self> {
        let vc = &config.vision_config;
        let (v, t, p) = multimodal_parts(w);
        Ok(Self {
            vision: VisionTower::load(&v, vc)?,
            projector: Dense::new(p.pp("linear").linear(vc.hidden_size, config.projection_dim, true)?)?,
            decoder: Decoder::load(&t, &config.decoder_spec())?,
            image_token: config.image_token_index,
        })
    }

    /// The image tokens' embeddings: `(b, 3, H, W)` → `(b, patches, hidden)`.
    pub fn image_embeddings(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        self.projector.forward(&self.vision.forward(pixels)?)
    }
}

/// PaliGemma with its tokenizer, prompt and preprocessing: a [`crate::FusionEncoder`] whose pair
/// scores are `log P(answer)` ([`crate::ScoreKind::LogProbability`]).
pub struct PaliGemmaVqa {
    model: PaliGemma,
    tokenizer: tokenizers::Tokenizer,
    template: Template,
    preprocessor: Preprocessor,
    image_tokens: usize,
    bos: u32,
    dtype: DType,
}

/// `PaliGemmaProcessor`'s image settings where a checkpoint gives none (SigLIP's: stretched
/// to the tower's size, scaled to [−1, 1]); images opened with `convert("RGB")`, as
/// `t2v_metrics` opens them, then `convert_to_rgb` (the processor's default `do_convert_rgb`).
fn default_preprocessor(size: usize) -> Preprocessor {
    Preprocessor::stretch(size, HALF, HALF)
        .with_modes(ModeRule::ConvertFirst { colour_key: ColourKey::WhiteBeforeResize })
}

impl LocalVqa for PaliGemmaVqa {
    fn with_template(files: &ModelFiles, dtype: DType, device: &Device, template: Template) -> Result<Self> {
        let config = PaliGemmaConfig::from_file(&files.config)?;
        let weights = Weights::open(&files.weights, dtype, device)?;
        let model = PaliGemma::from_weights(&config, &weights)?;
        let tokenizer = load_tokenizer(&files.tokenizer)?;
        let bos = tokenizer.token_to_id("<bos>").ok_or_else(|| {
            Error::new(
                ErrorKind::Tokenizer,
                format!("use the tokenizer {}: it has no <bos>", files.tokenizer.display()),
            )
        })?;
        let size = config.vision_config.image_size;
        let preprocessor = Preprocessor::for_hf_model(files, default_preprocessor(size), size)?;
        Ok(Self { image_tokens: config.image_tokens(), model, tokenizer, template, preprocessor, bos, dtype })
    }

    fn weights_device(&self) -> &Device {
        self.model.decoder.device()
    }

    fn image_preprocessor(&self) -> &Preprocessor {
        &self.preprocessor
    }

    /// The projected patch tokens of each image, `(b, patches, hidden)`.
    fn image_states(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        self.model.image_embeddings(&pixels.to_dtype(self.dtype)?)
    }

    /// The whole prompt: image tokens, `<bos>`, the question and `\n` (an image state holds
    /// only the projected patches, since the prompt attends both ways).
    fn caption_ids(&self, caption: &str) -> Result<(Vec<u32>, Vec<u32>)> {
        let text = format!("{}\n", self.template.question_for(caption));
        let mut ids = vec![self.model.image_token; self.image_tokens];
        ids.push(self.bos);
        ids.extend(encode_caption_prompt(&self.tokenizer, &text, caption, &[self.model.image_token])?);
        Ok((ids, answer_ids(&self.tokenizer, &self.template, caption)?))
    }

    /// The prompt is the prefix, both ways; the teacher-forced answer, or a reply, after it is
    /// causal.
    fn start_reply(
        &self,
        images: &Tensor,
        inputs: &[Vec<u32>],
        prompt: usize,
    ) -> candle_core::Result<(Tensor, ReplyState)> {
        let decoder = &self.model.decoder;
        let xs = decoder.embed(inputs, Some((images, self.model.image_token)))?;
        // The image and the prompt attend both ways, as one span.
        let (hidden, caches) = decoder.decode(xs, 0, 1, None, std::slice::from_ref(&(0..prompt)))?;
        Ok((hidden, ReplyState { caches, next: inputs[0].len() }))
    }

    /// The reply is causal after the prompt, which attends both ways.
    fn continue_reply(&self, state: &ReplyState, ids: &[u32]) -> candle_core::Result<(Tensor, ReplyState)> {
        self.model.decoder.continue_reply(state, ids, 1)
    }

    fn logits(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        self.model.decoder.logits(hidden)
    }

    fn tokenizer(&self) -> &tokenizers::Tokenizer {
        &self.tokenizer
    }

    fn template(&self) -> &Template {
        &self.template
    }

    /// None: [`LocalVqa::caption_ids`] holds the whole prompt.
    fn ids_before_caption(&self, _images: usize) -> Result<Vec<u32>> {
        Ok(Vec::new())
    }
}

/// PaliGemma scored by VQAScore, as [`crate::registry::ARCHITECTURES`] lists it.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "paligemma",
    model_types: &["paligemma"],
    layout: HF_SHARDED_LAYOUT,
    timm_towers: &[],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Vqa],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |size| Some(default_preprocessor(size)),
    caption_limit: |files, _| {
        Ok(CaptionLimit::never_cut(PaliGemmaConfig::from_file(&files.config)?.text_config.max_position_embeddings))
    },
    load: |choice, files, dtype, device| {
        crate::vqascore::generate::load_vqa(choice, files, || PaliGemmaVqa::load(files, dtype, device))
    },
    bench_towers: BenchTowers::None,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: false,
    images_together: false,
    generates_replies: true,
});
