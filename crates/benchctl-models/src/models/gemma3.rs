//! Gemma 3 (Gemma Team, 2025, *Gemma 3 Technical Report*, <https://arxiv.org/abs/2503.19786>)
//! as a VQAScore model: the probability that it answers "Yes" when asked whether an image
//! shows a caption ([`crate::vqascore`]), e.g. <https://huggingface.co/google/gemma-3-4b-it>.
//!
//! The prompt is the one `t2v_metrics`' Gemma 3 model builds with the checkpoint's processor:
//! one user turn holding the image and then the question, and the generation prompt,
//! `<bos><start_of_turn>user\n` + `\n\n<start_of_image>` + 256 image tokens +
//! `<end_of_image>\n\n` + question + `<end_of_turn>\n<start_of_turn>model\n`; the score is
//! the log-softmax of the next token's logits at the answer's token (teacher-forced, their
//! mean for an answer of several tokens).
//!
//! What sets Gemma 3 apart, and is easy to get silently wrong:
//! - the image is a SigLIP tower's patch tokens average-pooled to `mm_tokens_per_image`,
//!   RMS-normed and projected; they replace the image tokens' embeddings *unscaled*, while
//!   token embeddings are multiplied by `√hidden` (rounded to the weights' dtype);
//! - every RMS norm scales by `1 + w` and runs in f32; attention has RMS-normed queries and
//!   keys, a `query_pre_attn_scalar^−½` scale, and a norm after attention and after the MLP;
//! - layers alternate five sliding-window layers and one global one, each kind with its own
//!   RoPE base (and the global one with linear RoPE scaling in the 4B–27B checkpoints);
//! - the image tokens attend to each other both ways; everything else is causal.
//!
//! Because the image comes before the question and only attends within itself, the keys and
//! values of the prompt up to `<end_of_image>` are the same for every caption: they are the
//! image's state ([`crate::FusionEncoder::encode_images`]), computed once per image, and each
//! caption runs only its own tokens over them.

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use super::gemma::{multimodal_parts, Decoder, DecoderSpec, RmsNorm};
use super::siglip::{SiglipVisionConfig, VisionTower};
use super::transformer::over_rows;
use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::ModelFiles;
use crate::hub::HF_SHARDED_LAYOUT;
use crate::preprocess::{ColourKey, ImageSettings, ModeRule, Preprocessor, HALF};
use crate::vqascore::local::{
    answer_ids, encode, encode_caption_prompt, load_tokenizer, LocalVqa, ReplyState, TowerMemo,
};
use crate::vqascore::Template;
use crate::{Error, ErrorKind, Result};

/// `config.json` of a `Gemma3ForConditionalGeneration`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Gemma3Config {
    pub text_config: Gemma3TextConfig,
    pub vision_config: SiglipVisionConfig,
    #[serde(default = "default_mm_tokens")]
    pub mm_tokens_per_image: usize,
    #[serde(default = "default_boi")]
    pub boi_token_index: u32,
    #[serde(default = "default_eoi")]
    pub eoi_token_index: u32,
    #[serde(default = "default_image_token")]
    pub image_token_index: u32,
}

fn default_mm_tokens() -> usize {
    256
}
fn default_boi() -> u32 {
    255_999
}
fn default_eoi() -> u32 {
    256_000
}
fn default_image_token() -> u32 {
    262_144
}

/// The language model's part, as `transformers` 4 (`rope_theta`, `rope_local_base_freq`,
/// `rope_scaling`, `sliding_window_pattern`) or 5 (`rope_parameters`, `layer_types`) write it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Gemma3TextConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    pub query_pre_attn_scalar: f64,
    #[serde(default)]
    pub sliding_window: Option<usize>,
    #[serde(default = "default_activation")]
    pub hidden_activation: String,
    #[serde(default)]
    pub final_logit_softcapping: Option<f64>,
    #[serde(default)]
    pub attn_logit_softcapping: Option<f64>,
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    #[serde(default)]
    pub sliding_window_pattern: Option<usize>,
    /// transformers 5 writes the pattern under this name beside `layer_types`.
    #[serde(default, rename = "_sliding_window_pattern")]
    pub saved_sliding_window_pattern: Option<usize>,
    #[serde(default)]
    pub rope_parameters: Option<std::collections::BTreeMap<String, RopeParameters>>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_local_base_freq: Option<f64>,
    #[serde(default)]
    pub rope_scaling: Option<RopeParameters>,
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
}

fn default_eps() -> f64 {
    1e-6
}
fn default_activation() -> String {
    "gelu_pytorch_tanh".into()
}
fn default_max_positions() -> usize {
    131_072
}

/// One kind of layer's rotary embedding.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RopeParameters {
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default = "default_rope_type", alias = "type")]
    pub rope_type: String,
    #[serde(default)]
    pub factor: Option<f64>,
}

fn default_rope_type() -> String {
    "default".into()
}

/// What a layer attends over and its RoPE: `(sliding window, base, linear factor)`.
type LayerKind = (Option<usize>, f64, f64);

impl Gemma3TextConfig {
    /// Each layer's window and RoPE, from whichever keys the config has.
    fn layer_kinds(&self, path: &std::path::Path) -> Result<Vec<LayerKind>> {
        let bad = |what: String| Error::new(ErrorKind::BadConfig, format!("use {}: {what}", path.display()));
        let pattern = self.sliding_window_pattern.or(self.saved_sliding_window_pattern);
        let sliding: Vec<bool> = match (&self.layer_types, pattern) {
            (Some(types), _) => types
                .iter()
                .map(|t| match t.as_str() {
                    "sliding_attention" => Ok(true),
                    "full_attention" => Ok(false),
                    other => Err(bad(format!("text_config.layer_types holds `{other}`"))),
                })
                .collect::<Result<_>>()?,
            (None, pattern) => {
                let pattern = pattern.unwrap_or(6).max(1);
                (0..self.num_hidden_layers).map(|i| (i + 1) % pattern != 0).collect()
            }
        };
        if sliding.len() != self.num_hidden_layers {
            return Err(bad(format!(
                "text_config.layer_types names {} layers, num_hidden_layers is {}",
                sliding.len(),
                self.num_hidden_layers
            )));
        }
        let rope = |kind: &str, base: Option<f64>, scaling: Option<&RopeParameters>| -> Result<(f64, f64)> {
            let from_parameters = self.rope_parameters.as_ref().and_then(|p| p.get(kind));
            let parameters = from_parameters.or(scaling);
            let theta = from_parameters.and_then(|p| p.rope_theta).or(base).unwrap_or(10_000.0);
            match parameters.map(|p| (p.rope_type.as_str(), p.factor)) {
                None | Some(("default", _)) => Ok((theta, 1.0)),
                Some(("linear", Some(factor))) if factor > 0.0 => Ok((theta, factor)),
                Some((other, _)) => Err(bad(format!("the {kind} layers' RoPE type `{other}` is not supported"))),
            }
        };
        let global = rope("full_attention", Some(self.rope_theta.unwrap_or(1_000_000.0)), self.rope_scaling.as_ref())?;
        let local = rope("sliding_attention", Some(self.rope_local_base_freq.unwrap_or(10_000.0)), None)?;
        Ok(sliding
            .into_iter()
            .map(|s| if s { (self.sliding_window, local.0, local.1) } else { (None, global.0, global.1) })
            .collect())
    }
}

impl Gemma3Config {
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let config: Self = super::read_config(path)?;
        let (v, t) = (&config.vision_config, &config.text_config);
        super::check_patch_grid(path, v.image_size, v.patch_size)?;
        let side = v.image_size / v.patch_size;
        let per_side = (config.mm_tokens_per_image as f64).sqrt() as usize;
        if per_side == 0 || per_side * per_side != config.mm_tokens_per_image || !side.is_multiple_of(per_side) {
            return Err(Error::new(
                ErrorKind::BadConfig,
                format!(
                    "use {}: mm_tokens_per_image {} must be a square whose side divides the {side} patches a side",
                    path.display(),
                    config.mm_tokens_per_image
                ),
            ));
        }
        if t.num_key_value_heads == 0 || !t.num_attention_heads.is_multiple_of(t.num_key_value_heads) {
            return Err(Error::new(
                ErrorKind::BadConfig,
                format!(
                    "use {}: {} attention heads do not share {} key-value heads evenly",
                    path.display(),
                    t.num_attention_heads,
                    t.num_key_value_heads
                ),
            ));
        }
        t.layer_kinds(path)?;
        Ok(config)
    }

    /// The preprocessing of `Gemma3ImageProcessor` at the tower's size: stretched, bilinear, scaled to
    /// [−1, 1], images opened as `t2v_metrics` opens them (`default_preprocessor`).
    pub fn preprocessor(&self) -> Preprocessor {
        default_preprocessor(self.vision_config.image_size)
    }
}

/// Gemma 3's vision tower, projector and language model.
#[derive(Debug, Clone)]
pub struct Gemma3 {
    vision: VisionTower,
    soft_emb_norm: RmsNorm,
    /// `(vision width, hidden)`.
    projection: Tensor,
    decoder: Decoder,
    pool: usize,
    image_token: u32,
}

impl Gemma3 {
    fn from_weights(config: &Gemma3Config, path: &std::path::Path, w: &Weights) -> Result<Self> {
        let (vc, tc) = (&config.vision_config, &config.text_config);
        let (v, t, p) = multimodal_parts(w);
        let spec = DecoderSpec {
            vocab: tc.vocab_size,
            hidden: tc.hidden_size,
            intermediate: tc.intermediate_size,
            heads: tc.num_attention_heads,
            kv_heads: tc.num_key_value_heads,
            head_dim: tc.head_dim,
            eps: tc.rms_norm_eps,
            activation: tc.hidden_activation.clone(),
            scale: tc.query_pre_attn_scalar.powf(-0.5),
            attn_softcap: tc.attn_logit_softcapping,
            final_softcap: tc.final_logit_softcapping,
            layers: tc.layer_kinds(path)?,
            sandwich_norms: true,
            positions: tc.max_position_embeddings.min(8192),
        };
        let per_side = (config.mm_tokens_per_image as f64).sqrt() as usize;
        Ok(Self {
            vision: VisionTower::load(&v, vc)?,
            soft_emb_norm: RmsNorm::load(&p.pp("mm_soft_emb_norm"), vc.hidden_size, vc.layer_norm_eps)?,
            projection: p.get((vc.hidden_size, tc.hidden_size), "mm_input_projection_weight")?,
            decoder: Decoder::load(&t, &spec)?,
            pool: (vc.image_size / vc.patch_size) / per_side,
            image_token: config.image_token_index,
        })
    }

    /// The image tokens' embeddings: `(b, 3, H, W)` → `(b, mm_tokens_per_image, hidden)`.
    pub fn image_embeddings(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let xs = self.vision.forward(pixels)?;
        let (b, n, d) = xs.dims3()?;
        let side = (n as f64).sqrt() as usize;
        let grid = xs.transpose(1, 2)?.reshape((b, d, side, side))?;
        let pooled = grid.avg_pool2d(self.pool)?.flatten_from(2)?.transpose(1, 2)?;
        let normed = self.soft_emb_norm.forward(&pooled.contiguous()?)?;
        let projection = self.projection.to_dtype(normed.dtype())?;
        over_rows(&normed, |rows| rows.matmul(&projection))
    }
}

/// Gemma 3 with its tokenizer, prompt and preprocessing: a [`crate::FusionEncoder`] whose pair
/// scores are `log P(answer)` ([`crate::ScoreKind::LogProbability`]).
pub struct Gemma3Vqa {
    model: Gemma3,
    tokenizer: tokenizers::Tokenizer,
    template: Template,
    preprocessor: Preprocessor,
    /// The prompt up to and including `<end_of_image>`: the same for every caption.
    prefix: Vec<u32>,
    /// Where the image tokens are in it.
    image_span: std::ops::Range<usize>,
    tokens_per_image: usize,
    /// What a caption may not hold: the image's own token, and `<start_of_image>`, which the
    /// processor expands into the image's tokens.
    image_markers: Vec<u32>,
    /// Each of the last images' embeddings: an image shown with others has just been encoded
    /// alone.
    towered: TowerMemo<Tensor>,
    dtype: DType,
}

impl Gemma3Vqa {
    /// The whole prompt's ids for `caption` (prefix and caption part).
    pub fn prompt_ids(&self, caption: &str) -> Result<Vec<u32>> {
        Ok([self.prefix.clone(), self.caption_ids(caption)?.0].concat())
    }

    fn prefix_states(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let b = pixels.dim(0)?;
        let images = self.embeddings_of(pixels)?;
        let ids = vec![self.prefix.clone(); b];
        let xs = self.model.decoder.embed(&ids, Some((&images, self.model.image_token)))?;
        let (_, caches) = self.model.decoder.decode(xs, 0, 0, None, std::slice::from_ref(&self.image_span))?;
        self.model.decoder.kv_layout().flatten(&caches, 0)
    }

    /// The state of `pixels`' images `(n, C, H, W)` shown together in one prompt, `(1, …)`: the
    /// processor's prompt of a user turn holding the images, one after another, each
    /// `\n\n<start_of_image>` + its tokens + `<end_of_image>\n\n`, up to the last
    /// `<end_of_image>`; each image's tokens attend both ways among themselves only, as
    /// transformers' image groups do.
    fn together_states(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let n = pixels.dim(0)?;
        let prefix = self.prefix_of(n).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let spans = image_spans(&prefix, self.model.image_token);
        let images = self.embeddings_of(pixels)?;
        let (_, per_image, hidden) = images.dims3()?;
        let images = images.reshape((1, n * per_image, hidden))?;
        let xs = self.model.decoder.embed(&[prefix], Some((&images, self.model.image_token)))?;
        let (_, caches) = self.model.decoder.decode(xs, 0, 0, None, &spans)?;
        self.model.decoder.kv_layout().flatten(&caches, 0)
    }

    /// `(b, tokens, hidden)`: each image's embeddings, held from an earlier batch (an image
    /// shown with others has just been encoded alone) or computed.
    fn embeddings_of(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        self.towered.get_batch_or(pixels, |rows| self.model.image_embeddings(&rows.to_dtype(self.dtype)?))
    }

    /// How many images its vision tower has run on (an image shown with others, just encoded
    /// alone, reuses that run).
    pub fn tower_runs(&self) -> usize {
        self.towered.runs()
    }

    /// The prompt's ids up to the last image's `<end_of_image>` for `images` images.
    fn prefix_of(&self, images: usize) -> Result<Vec<u32>> {
        let image = format!("\n\n<start_of_image>{}<end_of_image>", "<image_soft_token>".repeat(self.tokens_per_image));
        encode(&self.tokenizer, &format!("<bos><start_of_turn>user\n{}", vec![image; images].join("\n\n")))
    }
}

/// The runs of `image_token` in `ids`: one per image.
fn image_spans(ids: &[u32], image_token: u32) -> Vec<std::ops::Range<usize>> {
    let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
    for (at, &id) in ids.iter().enumerate() {
        match spans.last_mut() {
            Some(span) if id == image_token && span.end == at => span.end += 1,
            _ if id == image_token => spans.push(at..at + 1),
            _ => {}
        }
    }
    spans
}

/// The checkpoint's `preprocessor_config.json` checked against what benchctl reproduces of
/// `Gemma3ImageProcessor` (a square resize to the tower's size, bilinear, no pan-and-scan
/// crops), its mean and std taken from it.
/// `Gemma3ImageProcessor`'s settings where a checkpoint gives none: stretched to the tower's
/// size, bilinear, scaled to [−1, 1]; images opened with `convert("RGB")`, as `t2v_metrics`
/// opens them, then `convert_to_rgb` (the processor's default `do_convert_rgb`).
fn default_preprocessor(size: usize) -> Preprocessor {
    Preprocessor::stretch(size, HALF, HALF)
        .bilinear()
        .with_modes(ModeRule::ConvertFirst { colour_key: ColourKey::WhiteBeforeResize })
}

/// The checkpoint's image settings on top of `default`: its mean and std, the rest checked to
/// be what benchctl reproduces.
fn preprocessor_from_settings(settings: &ImageSettings, default: Preprocessor) -> Result<Preprocessor> {
    if settings.get("do_pan_and_scan").and_then(|v| v.as_bool()) == Some(true) {
        return Err(settings.bad("do_pan_and_scan", "pan-and-scan crops are not reproduced".into()));
    }
    if let Some(resample) = settings.get("resample").and_then(|v| v.as_u64()).filter(|&r| r != 2) {
        return Err(
            settings.bad("resample", format!("{resample} is not bilinear (2), the filter benchctl reproduces here"))
        );
    }
    if let Some(size) = settings.get("size") {
        let side = |k: &str| size.get(k).and_then(|v| v.as_u64());
        if side("height") != Some(default.size as u64) || side("width") != Some(default.size as u64) {
            return Err(settings.bad("size", format!("{size} is not the vision tower's {0}×{0}", default.size)));
        }
    }
    let (mean, std) = (settings.triple("image_mean", default.mean)?, settings.triple("image_std", default.std)?);
    Ok(Preprocessor { mean, std, modes: settings.mode_rule(default.modes)?, ..default })
}

impl LocalVqa for Gemma3Vqa {
    fn with_template(files: &ModelFiles, dtype: DType, device: &Device, template: Template) -> Result<Self> {
        let config = Gemma3Config::from_file(&files.config)?;
        let weights = Weights::open(&files.weights, dtype, device)?;
        let model = Gemma3::from_weights(&config, &files.config, &weights)?;
        let tokenizer = load_tokenizer(&files.tokenizer)?;
        let image = "<image_soft_token>".repeat(config.mm_tokens_per_image);
        let text = format!("<bos><start_of_turn>user\n\n\n<start_of_image>{image}<end_of_image>");
        let prefix = encode(&tokenizer, &text)?;
        let first = prefix.iter().position(|&t| t == config.image_token_index);
        let count = prefix.iter().filter(|&&t| t == config.image_token_index).count();
        let bos = tokenizer.token_to_id("<bos>");
        let (Some(first), true, true) =
            (first, count == config.mm_tokens_per_image, bos.is_some() && prefix.first() == bos.as_ref())
        else {
            return Err(Error::new(
                ErrorKind::Tokenizer,
                format!(
                    "use the tokenizer {}: it does not read Gemma 3's special tokens (<bos>, <image_soft_token> as id {})",
                    files.tokenizer.display(),
                    config.image_token_index
                ),
            ));
        };
        let preprocessor = match ImageSettings::of(files)? {
            Some(settings) => preprocessor_from_settings(&settings, config.preprocessor())?,
            None => config.preprocessor(),
        };
        let image_markers = [model.image_token].into_iter().chain(tokenizer.token_to_id("<start_of_image>")).collect();
        Ok(Self {
            preprocessor,
            image_span: first..first + count,
            tokens_per_image: count,
            image_markers,
            prefix,
            model,
            tokenizer,
            template,
            towered: TowerMemo::default(),
            dtype,
        })
    }

    fn weights_device(&self) -> &Device {
        self.model.decoder.device()
    }

    fn image_preprocessor(&self) -> &Preprocessor {
        &self.preprocessor
    }

    /// The keys and values of the prompt up to `<end_of_image>` for each image, flattened.
    fn image_states(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        self.prefix_states(pixels)
    }

    /// The images are stretched to one size, so they are one batch.
    fn shown_together_states(&self, images: &[Tensor]) -> Option<candle_core::Result<Tensor>> {
        Some(Tensor::cat(images, 0).and_then(|pixels| self.together_states(&pixels)))
    }

    /// The prompt's token ids after the image for `caption`, and the answer's ids.
    fn caption_ids(&self, caption: &str) -> Result<(Vec<u32>, Vec<u32>)> {
        let question = self.template.question_for(caption);
        let suffix = format!("\n\n{}<end_of_turn>\n<start_of_turn>model\n", question.trim());
        let prompt = encode_caption_prompt(&self.tokenizer, &suffix, caption, &self.image_markers)?;
        Ok((prompt, answer_ids(&self.tokenizer, &self.template, caption)?))
    }

    /// The caption's tokens over each image's prompt state.
    fn start_reply(
        &self,
        image_states: &Tensor,
        inputs: &[Vec<u32>],
        _prompt: usize,
    ) -> candle_core::Result<(Tensor, ReplyState)> {
        let decoder = &self.model.decoder;
        // A prompt of one image, or of several shown together (longer).
        let (past, len, _) = decoder.kv_layout().unflatten(image_states, image_states.dtype())?;
        if len < self.prefix.len() {
            candle_core::bail!("an image state of {len} positions does not fit a {}-token prompt", self.prefix.len());
        }
        let (hidden, caches) = decoder.decode(decoder.embed(inputs, None)?, len, 0, Some(&past), &[])?;
        Ok((hidden, ReplyState { caches, next: len + inputs[0].len() }))
    }

    fn continue_reply(&self, state: &ReplyState, ids: &[u32]) -> candle_core::Result<(Tensor, ReplyState)> {
        self.model.decoder.continue_reply(state, ids, 0)
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

    fn ids_before_caption(&self, images: usize) -> Result<Vec<u32>> {
        self.prefix_of(images)
    }
}

/// Gemma 3 scored by VQAScore, as [`crate::registry::ARCHITECTURES`] lists it (its 4B and
/// larger checkpoints are published in shards).
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "gemma3",
    model_types: &["gemma3"],
    layout: HF_SHARDED_LAYOUT,
    timm_towers: &[],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Vqa],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |size| Some(default_preprocessor(size)),
    // A prompt of a few hundred tokens in a context of 8k or more: no caption is cut.
    caption_limit: |files, _| {
        Ok(CaptionLimit::never_cut(Gemma3Config::from_file(&files.config)?.text_config.max_position_embeddings))
    },
    load: |choice, files, dtype, device| {
        crate::vqascore::generate::load_vqa(choice, files, || Gemma3Vqa::load(files, dtype, device))
    },
    bench_towers: BenchTowers::None,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: false,
    images_together: true,
    generates_replies: true,
});
