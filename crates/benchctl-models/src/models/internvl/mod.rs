//! InternVL3 (Zhu et al., 2025, <https://arxiv.org/abs/2504.10479>) as a VQAScore model, in
//! the hub's `transformers` layout, e.g. <https://huggingface.co/OpenGVLab/InternVL3-2B-hf>:
//! scored as `t2v_metrics`' `InternVLModel` scores the remote-code checkpoint it converts from
//! (`t2v_metrics/models/vqascore_models/internvl_model.py`).
//!
//! - The image: `convert("RGB")`, then InternVL's dynamic tiles (at most 12 of 448 pixels in
//!   the grid nearest the image's aspect ratio, plus a thumbnail where there are several:
//!   [`crate::preprocess::tiles`]), ImageNet's mean and std, torchvision's arithmetic.
//! - The prompt: the `internvl2_5` conversation with its system message,
//!   `<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n<img>` + 256 `<IMG_CONTEXT>`
//!   per tile + `</img>\n{question}<|im_end|>\n<|im_start|>assistant\n`; the score is the
//!   log-softmax of the next token's logits at "Yes".
//! - The vision tower (`vision.rs`): InternViT with layer scale, its patch grid pixel-shuffled
//!   by 0.5 and projected into the decoder.
//! - The decoder is the Qwen-VL decoder of `qwen3vl/text.rs` with ordinary one-dimensional
//!   rotary positions (the three position axes equal): Qwen2's biased query, key and value
//!   projections for InternVL3 (Qwen2.5), Qwen3's RMS-normed queries and keys for InternVL3.5
//!   (whose training scripts use the same `internvl2_5` conversation).
//!
//! - Several images in one prompt (VisMin's image task,
//!   [`crate::FusionEncoder::encode_shown_together`]): each cut into its own tiles and labelled
//!   as InternVL's model card shows separate images (`Image-1: <img>…</img>\nImage-2:
//!   <img>…</img>\n{question}`, its `num_patches_list`), which `t2v_metrics`' `_build_inputs`
//!   fills in order.
//!
//! Attention is causal throughout, so the keys and values of the prompt up to the last
//! `</img>` are each image's (or images') state, computed once; each caption runs only its own
//! tokens over them.
//! Supported: the InternViT-300M towers (layer norms, no query/key norms) and the InternViT-6B
//! ones (RMS norms, RMS-normed queries and keys, no query/key/value biases: InternVL3-38B and
//! -78B, InternVL3.5-38B and larger) with a Qwen2, a Qwen3 or a Qwen3 mixture-of-experts
//! decoder (`models/qwen3vl/experts.rs`); GPT-OSS decoders are refused by name.

mod vision;

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use super::qwen3vl::experts::Mixture;
use super::qwen3vl::text::{with_image_rows, Decoder, Positions, TextSpec};
use super::qwen3vl::Qwen3VlTextConfig;
use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::{Layout, ModelFiles, HF_LAYOUT};
use crate::preprocess::tiles::TileLayout;
use crate::preprocess::{ColourKey, ModeRule, Pipeline, Preprocessor, Resize, IMAGENET_MEAN, IMAGENET_STD};
use crate::vqascore::local::{
    answer_ids, each_image, encode, encode_caption_prompt, load_tokenizer, LocalVqa, ReplyState, TowerMemo,
};
use crate::vqascore::Template;
use crate::{Error, ErrorKind, Result};
use vision::InternVision;

/// The `model_type` of an InternVL `config.json` in `transformers`' layout.
pub const MODEL_TYPE: &str = "internvl";

/// The `model_type` of OpenGVLab's remote-code InternVL checkpoints, which benchctl does not
/// read, and what a user holding one is told.
pub const REMOTE_CODE_MODEL_TYPE: &str = "internvl_chat";
pub const REMOTE_CODE_HINT: &str =
    "; `internvl_chat` is InternVL's remote-code layout: use its transformers conversion, \
     the repo of the same name ending in `-hf` (e.g. OpenGVLab/InternVL3-2B-hf, zoo id internvl3-2b)";

/// The system message of the `internvl2_5` conversation template InternVL3's remote code
/// uses (its `conversation.py`, as `t2v_metrics`' `fastchat_utils.py` copies it).
pub const SYSTEM_MESSAGE: &str =
    "你是书生·万象，英文名是InternVL，是由上海人工智能实验室、清华大学及多家合作单位联合开发的多模态大语言模型。";

/// The most tiles `t2v_metrics`' `load_image` cuts an image into (`max_num=12`).
pub const MAX_TILES: usize = 12;

/// `config.json` of an `InternVLForConditionalGeneration`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InternVlConfig {
    pub text_config: Qwen3VlTextConfig,
    pub vision_config: InternVisionConfig,
    pub image_token_id: u32,
    #[serde(default = "default_projector_activation")]
    pub projector_hidden_act: String,
    /// `text_config.model_type`, checked.
    #[serde(skip)]
    pub decoder: TextDecoder,
}

/// The language models InternVL checkpoints pair InternViT with that benchctl computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TextDecoder {
    /// Qwen2 (InternVL3's Qwen2.5): biased query, key and value projections.
    #[default]
    Qwen2,
    /// Qwen3 (InternVL3.5): RMS-normed queries and keys, no biases.
    Qwen3,
    /// Qwen3-MoE (InternVL3.5's mixture-of-experts checkpoints): Qwen3's attention, a sparse
    /// mixture of MLPs (`models/qwen3vl/experts.rs`).
    Qwen3Moe,
}

/// `vision_config`: InternViT's settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InternVisionConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default = "default_vision_activation")]
    pub hidden_act: String,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    pub image_size: Side,
    pub patch_size: Side,
    /// InternViT-6B's RMS norms of the queries and keys.
    #[serde(default)]
    pub use_qk_norm: bool,
    /// `layer_norm` (InternViT-300M) or `rms_norm` (InternViT-6B).
    #[serde(default = "default_norm_type")]
    pub norm_type: String,
}

/// A size `transformers` writes as one number or as `[height, width]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Side {
    One(usize),
    Two([usize; 2]),
}

impl Side {
    /// The side of a square; a non-square size is refused.
    pub fn side(&self) -> Result<usize> {
        match *self {
            Side::One(side) => Ok(side),
            Side::Two([h, w]) if h == w => Ok(h),
            Side::Two([h, w]) => {
                Err(Error::new(ErrorKind::BadConfig, format!("use a {h}×{w} InternViT input: its tiles are square")))
            }
        }
    }
}

fn default_projector_activation() -> String {
    "gelu".into()
}
fn default_vision_activation() -> String {
    "gelu".into()
}
fn default_norm_type() -> String {
    "layer_norm".into()
}
fn default_eps() -> f64 {
    1e-6
}

impl InternVlConfig {
    /// The config at `path`, checked: what benchctl computes exactly, or an error naming the
    /// key that asks for something else.
    pub fn read(path: &std::path::Path) -> Result<Self> {
        let value: serde_json::Value = super::read_config(path)?;
        let bad = |what: String| Error::new(ErrorKind::BadConfig, format!("use {}: {what}", path.display()));
        if value.get("model_type").and_then(|t| t.as_str()) != Some(MODEL_TYPE) {
            return Err(bad(format!("its model_type is not {MODEL_TYPE}")));
        }
        let (text, vision) = (&value["text_config"], &value["vision_config"]);
        // (key, the value benchctl computes, its default where absent)
        let expected = [
            (&value["downsample_ratio"], "downsample_ratio", serde_json::json!(0.5), true),
            (&value["vision_feature_layer"], "vision_feature_layer", serde_json::json!(-1), true),
            (
                &value["vision_feature_select_strategy"],
                "vision_feature_select_strategy",
                serde_json::json!("default"),
                true,
            ),
            (&text["attention_bias"], "text_config.attention_bias", serde_json::json!(false), true),
            (&text["use_sliding_window"], "text_config.use_sliding_window", serde_json::json!(false), true),
            (&vision["use_mean_pooling"], "vision_config.use_mean_pooling", serde_json::json!(true), true),
            (
                &vision["use_absolute_position_embeddings"],
                "vision_config.use_absolute_position_embeddings",
                serde_json::json!(true),
                true,
            ),
        ];
        for (found, key, want, absent_ok) in expected {
            let same = found == &want || (found.as_f64().is_some() && found.as_f64() == want.as_f64());
            if !(same || (absent_ok && found.is_null())) {
                return Err(bad(format!("{key} is {found}; benchctl computes InternVL with {want} only")));
            }
        }
        let rope = text.get("rope_parameters").or_else(|| text.get("rope_scaling")).filter(|r| !r.is_null());
        let rope_type = rope.and_then(|r| r.get("rope_type").or_else(|| r.get("type"))).and_then(|t| t.as_str());
        if rope_type.is_some_and(|t| t != "default") {
            return Err(bad(format!("text_config's rope type {rope_type:?} is not the default one benchctl computes")));
        }
        let decoder = match text.get("model_type").and_then(|t| t.as_str()) {
            Some("qwen2") => TextDecoder::Qwen2,
            Some("qwen3") => TextDecoder::Qwen3,
            Some("qwen3_moe") => TextDecoder::Qwen3Moe,
            other => {
                return Err(bad(format!(
                    "text_config.model_type {other:?} is not a decoder benchctl computes for InternVL (qwen2: InternVL3; qwen3, qwen3_moe: InternVL3.5)"
                )))
            }
        };
        let mut config: Self = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
        config.decoder = decoder;
        let t = &config.text_config;
        if t.hidden_act != "silu" {
            return Err(bad(format!("text_config.hidden_act `{}` is not Qwen's silu", t.hidden_act)));
        }
        if t.num_key_value_heads == 0 || !t.num_attention_heads.is_multiple_of(t.num_key_value_heads) {
            return Err(bad("the decoder's attention heads do not divide evenly".into()));
        }
        vision::check_grid(&config.vision_config).map_err(|e| bad(e.to_string()))?;
        if config.decoder == TextDecoder::Qwen3Moe {
            config.text_config.check_mixture().map_err(bad)?;
        }
        if !["layer_norm", "rms_norm"].contains(&config.vision_config.norm_type.as_str()) {
            return Err(bad(format!(
                "vision_config.norm_type `{}` is neither InternViT-300M's layer_norm nor InternViT-6B's rms_norm",
                config.vision_config.norm_type
            )));
        }
        Ok(config)
    }

    /// The decoder's spec: Qwen2's biased projections or Qwen3's normed queries and keys, one
    /// rotary axis.
    fn text_spec(&self) -> TextSpec<'_> {
        let t = &self.text_config;
        let head_dim = t.head_dim.unwrap_or(t.hidden_size / t.num_attention_heads);
        let rope = t.rope_parameters.as_ref().or(t.rope_scaling.as_ref());
        TextSpec {
            text: t,
            head_dim,
            rope_theta: rope.and_then(|r| r.rope_theta).or(t.rope_theta).unwrap_or(1_000_000.0),
            mrope_section: vec![head_dim / 2, 0, 0],
            interleaved: false,
            qk_norms: self.decoder != TextDecoder::Qwen2,
            qkv_bias: self.decoder == TextDecoder::Qwen2,
            mixture: (self.decoder == TextDecoder::Qwen3Moe).then_some(Mixture::Qwen3Moe),
        }
    }

    /// `t2v_metrics`' `load_image`: `convert("RGB")`, tiles of the tower's input size,
    /// `ToTensor` and ImageNet's normalisation.
    pub fn preprocessor(&self) -> Result<Preprocessor> {
        Ok(Preprocessor {
            size: self.vision_config.image_size.side()?,
            resize: Resize::Tiles { max_tiles: MAX_TILES },
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
            pipeline: Pipeline::Torchvision,
            filter: crate::preprocess::Filter::Bicubic,
            modes: ModeRule::ConvertFirst { colour_key: ColourKey::Kept },
            square_canvas: None,
        })
    }
}

/// InternVL scored by VQAScore.
pub struct InternVlVqa {
    vision: InternVision,
    /// The tower's last outputs (tile features, tiles): an image shown with others has just
    /// been encoded alone.
    towered: TowerMemo<(Tensor, usize)>,
    decoder: Decoder,
    tokenizer: tokenizers::Tokenizer,
    template: Template,
    preprocessor: Preprocessor,
    /// The prompt before the image: the system turn, then `<|im_start|>user\n<img>`.
    before_image: Vec<u32>,
    /// The same before the first of several images: `<|im_start|>user\nImage-1: <img>`.
    before_labelled: Vec<u32>,
    context_token: u32,
    image_end: u32,
    dtype: DType,
    device: Device,
}

impl InternVlVqa {
    /// The prompt's ids up to the last `</img>` for images of `tiles[i]` tiles each, and where
    /// each image's context tokens start. One image follows the user turn's opening
    /// (`t2v_metrics`' `<image>\n{question}`); several are labelled as InternVL's model card
    /// shows separate images (`Image-1: <image>\nImage-2: <image>\n{question}`).
    fn image_prompt(&self, tiles: &[usize]) -> Result<(Vec<u32>, Vec<usize>)> {
        let mut ids = if tiles.len() == 1 { self.before_image.clone() } else { self.before_labelled.clone() };
        let mut starts = Vec::with_capacity(tiles.len());
        for (n, &count) in tiles.iter().enumerate() {
            if n > 0 {
                ids.extend(encode(&self.tokenizer, &format!("\nImage-{}: <img>", n + 1))?);
            }
            starts.push(ids.len());
            ids.extend(std::iter::repeat_n(self.context_token, count * self.vision.tokens_per_tile()));
            ids.push(self.image_end);
        }
        Ok((ids, starts))
    }

    /// How many images its vision tower has run on (an image shown with others, just encoded
    /// alone, reuses that run).
    pub fn tower_runs(&self) -> usize {
        self.towered.runs()
    }

    /// The token that stands for one of an image's features in the prompt.
    pub fn context_token(&self) -> u32 {
        self.context_token
    }

    /// The whole prompt's ids for an image of `tiles` tiles and `caption`.
    pub fn prompt_ids(&self, tiles: usize, caption: &str) -> Result<Vec<u32>> {
        Ok([self.image_prompt(&[tiles])?.0, self.caption_ids(caption)?.0].concat())
    }

    /// The whole prompt's ids for images of `tiles[i]` tiles each, shown together, and
    /// `caption`.
    pub fn prompt_ids_together(&self, tiles: &[usize], caption: &str) -> Result<Vec<u32>> {
        Ok([self.image_prompt(tiles)?.0, self.caption_ids(caption)?.0].concat())
    }

    /// One packed image's `(3, height, width)` tiles through the tower: its features, one row
    /// per context token, and its number of tiles.
    fn tile_features(&self, packed: &Tensor) -> candle_core::Result<(Tensor, usize)> {
        let (_, height, width) = packed.dims3()?;
        let tile = self.preprocessor.size;
        let Some(layout) = TileLayout::of(width, height, tile) else {
            candle_core::bail!("a {width}×{height} input is not a packed image of {tile}-pixel tiles");
        };
        let tiles = layout
            .origins(tile)
            .into_iter()
            .map(|(left, top)| packed.narrow(2, left, tile)?.narrow(1, top, tile))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok((self.vision.forward(&Tensor::stack(&tiles, 0)?)?, layout.tiles()))
    }

    /// The state of packed images `(3, height, width)` shown in one prompt, in order: the
    /// prompt's keys and values up to the last `</img>` in f32, then the position the caption
    /// starts at.
    fn state_of(&self, packed: &[Tensor]) -> candle_core::Result<Tensor> {
        let (features, tiles): (Vec<Tensor>, Vec<usize>) = packed
            .iter()
            .map(|image| self.towered.get_or(image, || self.tile_features(image)))
            .collect::<candle_core::Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        let (ids, starts) = self.image_prompt(&tiles).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let xs = self.decoder.embed(std::slice::from_ref(&ids))?;
        // The text's embeddings, each image's features in place of its context tokens.
        let rows: Vec<std::ops::Range<usize>> = (starts.iter().zip(&features))
            .map(|(&start, image)| Ok(start..start + image.dim(0)?))
            .collect::<candle_core::Result<_>>()?;
        let embedded = with_image_rows(&xs, &features, &rows)?;
        let positions: Positions = std::array::from_fn(|_| (0..ids.len() as u32).collect());
        let (_, caches) = self.decoder.decode(embedded, &positions, None, None)?;
        self.decoder.kv_layout().flatten(&caches, ids.len() as u32)
    }
}

impl LocalVqa for InternVlVqa {
    fn with_template(files: &ModelFiles, dtype: DType, device: &Device, template: Template) -> Result<Self> {
        let config = InternVlConfig::read(&files.config)?;
        let weights = Weights::open(&files.weights, dtype, device)?;
        // The hub's `-hf` checkpoints keep `transformers` 4's names; a model saved since may
        // use the current ones.
        let (vision, projector, text, head) = if weights.has("vision_tower.embeddings.cls_token") {
            ("vision_tower", "multi_modal_projector", "language_model.model", "language_model.lm_head.weight")
        } else {
            ("model.vision_tower", "model.multi_modal_projector", "model.language_model", "lm_head.weight")
        };
        let t = &config.text_config;
        let vision = InternVision::load(
            &weights.pp(vision),
            &weights.pp(projector),
            &config.vision_config,
            &config.projector_hidden_act,
            t.hidden_size,
        )?;
        let lm_head = weights.has(head).then(|| weights.get((t.vocab_size, t.hidden_size), head)).transpose()?;
        let decoder = Decoder::load(&weights.pp(text), lm_head, &config.text_spec())?;
        weights.check_every_tensor_used(MODEL_TYPE, &[])?;

        let tokenizer = load_tokenizer(&files.tokenizer)?;
        let system = format!("<|im_start|>system\n{SYSTEM_MESSAGE}<|im_end|>\n<|im_start|>user\n");
        let before_image = encode(&tokenizer, &format!("{system}<img>"))?;
        let before_labelled = encode(&tokenizer, &format!("{system}Image-1: <img>"))?;
        let special = |name: &str| tokenizer.token_to_id(name);
        let (Some(start), Some(image_end)) = (special("<img>"), special("</img>")) else {
            return Err(missing_tokens(files, config.image_token_id));
        };
        if special("<IMG_CONTEXT>") != Some(config.image_token_id) || before_image.last() != Some(&start) {
            return Err(missing_tokens(files, config.image_token_id));
        }
        Ok(Self {
            vision,
            towered: TowerMemo::default(),
            decoder,
            tokenizer,
            template,
            preprocessor: config.preprocessor()?,
            before_image,
            before_labelled,
            context_token: config.image_token_id,
            image_end,
            dtype,
            device: device.clone(),
        })
    }

    fn weights_device(&self) -> &Device {
        &self.device
    }

    fn image_preprocessor(&self) -> &Preprocessor {
        &self.preprocessor
    }

    /// `(b, 3, height, width)` packed images of one size → one state row each.
    fn image_states(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        each_image(pixels, |image| self.state_of(std::slice::from_ref(image)))
    }

    /// Each image as its own tiles, labelled in one prompt.
    fn shown_together_states(&self, images: &[Tensor]) -> Option<candle_core::Result<Tensor>> {
        let images: candle_core::Result<Vec<Tensor>> = images.iter().map(|i| i.get(0)).collect();
        Some(images.and_then(|images| self.state_of(&images)))
    }

    /// The prompt's ids after `</img>` for `caption`, and the answer's ids. A caption holding
    /// `<IMG_CONTEXT>` is refused: the remote model's `generate` fails on the count of image
    /// tokens it makes.
    fn caption_ids(&self, caption: &str) -> Result<(Vec<u32>, Vec<u32>)> {
        let suffix = format!("\n{}<|im_end|>\n<|im_start|>assistant\n", self.template.question_for(caption));
        let prompt = encode_caption_prompt(&self.tokenizer, &suffix, caption, &[self.context_token])?;
        Ok((prompt, answer_ids(&self.tokenizer, &self.template, caption)?))
    }

    fn start_reply(
        &self,
        image_states: &Tensor,
        inputs: &[Vec<u32>],
        _prompt: usize,
    ) -> candle_core::Result<(Tensor, ReplyState)> {
        self.decoder.start_reply(image_states, inputs, self.dtype)
    }

    fn continue_reply(&self, state: &ReplyState, ids: &[u32]) -> candle_core::Result<(Tensor, ReplyState)> {
        self.decoder.continue_reply(state, ids)
    }

    fn logits(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        self.decoder.logits(hidden)
    }

    fn tokenizer(&self) -> &tokenizers::Tokenizer {
        &self.tokenizer
    }

    fn template(&self) -> &Template {
        &self.template
    }

    fn ids_before_caption(&self, images: usize) -> Result<Vec<u32>> {
        Ok(self.image_prompt(&vec![1; images])?.0)
    }
}

fn missing_tokens(files: &ModelFiles, image_token_id: u32) -> Error {
    Error::new(
        ErrorKind::Tokenizer,
        format!(
            "use the tokenizer {}: it does not read InternVL's image tokens (<img>, </img>, <IMG_CONTEXT> as id {image_token_id})",
            files.tokenizer.display()
        ),
    )
}

/// InternVL scored by VQAScore, each image as its tiles, as [`crate::registry::ARCHITECTURES`]
/// lists it.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: MODEL_TYPE,
    model_types: &[MODEL_TYPE],
    // t2v_metrics' own transform, whatever image processor settings the checkpoint carries.
    layout: Layout { image_settings: false, ..HF_LAYOUT },
    timm_towers: &[],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Vqa],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |_| None,
    caption_limit: |files, _| {
        Ok(CaptionLimit::never_cut(InternVlConfig::read(&files.config)?.text_config.max_position_embeddings))
    },
    load: |choice, files, dtype, device| {
        crate::vqascore::generate::load_vqa(choice, files, || InternVlVqa::load(files, dtype, device))
    },
    bench_towers: BenchTowers::None,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: false,
    images_together: true,
    generates_replies: true,
});
