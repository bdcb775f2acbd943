//! CLIP-FlanT5 (Lin et al., 2024, *Evaluating Text-to-Visual Generation with Image-to-Text
//! Generation*, <https://arxiv.org/abs/2404.01291>), the VQAScore paper's own model, e.g.
//! <https://huggingface.co/zhiqiulin/clip-flant5-xl>: a FlanT5 encoder-decoder ([`t5`]) whose
//! encoder reads the prompt with a CLIP ViT's patch features spliced in at the image's place,
//! through a GELU projector (LLaVA's recipe with T5 for the language model).
//!
//! The score is what `t2v_metrics`' `CLIPT5Model.forward` (its v3.0 release) computes:
//! - the image opened with `convert("RGB")`, padded to a square of the processor's mean colour
//!   (LLaVA's `expand2square`, `image_aspect_ratio` "pad"), then CLIP's image processor;
//! - the prompt `"{system} USER: <image>\n{question} ASSISTANT: "` with the question `Does this
//!   figure show "{caption}"? Please answer yes or no.` (lower-case, unlike the other VQAScore
//!   models' "Yes or No"); each side of `<image>` tokenised on its own, *each ending in `</s>`*;
//! - the image's features are the hidden states of the vision layer `mm_vision_select_layer`
//!   (the penultimate) without the class token, projected;
//! - the answer "Yes" tokenised the same way (`▁Yes`, `</s>`) is the decoder's label; the score
//!   is the mean of both tokens' log-probabilities (`exp(−cross-entropy)` there), over the
//!   tokenizer's vocabulary only: `load_pretrained_model` resizes the checkpoint's 32,128
//!   embedding rows to the tokenizer's 32,100, which changes every log-softmax.
//!
//! The encoder attends both ways over image and caption, so nothing of the prompt can be
//! computed once per image but the projected features: they are each image's state.

mod replies;
pub mod t5;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::{Linear, Module};
use serde::Deserialize;

use super::clip::{VisionConfig, VisionTrunk};
use super::transformer::Activation;
use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::{Companion, FileElsewhere, Layout, ModelFiles, PTH_SHARD_INDEX_FILE};
use crate::preprocess::{ColourKey, ModeRule, Preprocessor};
use crate::vqascore::local::{groups_of, image_marker_in_caption, load_tokenizer, mean_answer_log_ps};
use crate::vqascore::Template;
use crate::{Error, ErrorKind, FusionEncoder, Result, ScoreKind};
use t5::{FeedForward, Stack};

/// `t2v_metrics`' system message for CLIP-FlanT5's chat format (LLaVA's).
pub const SYSTEM: &str = "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, detailed, and polite answers to the user's questions.";

/// `t2v_metrics`' question and answer for CLIP-T5 models.
pub const TEMPLATE: (&str, &str) = ("Does this figure show \"{}\"? Please answer yes or no.", "Yes");

/// The longest prompt, in ids (the image one of them), before `t2v_metrics` truncates.
pub const CONTEXT: usize = 2048;

/// FlanT5's tokenizer, which `t2v_metrics` loads from google/flan-t5-xl (and the identical one
/// of flan-t5-xxl) rather than from the model's repo.
pub const FLAN_T5_TOKENIZER: FileElsewhere = FileElsewhere {
    repo: "google/flan-t5-xl",
    commit: "7d6315df2c2fb742f0f5b556879d730926ca9001",
    file: "tokenizer.json",
};

/// The CLIP tower of the released checkpoints' `mm_vision_tower`, whose weights `t2v_metrics`
/// loads before the checkpoint's: taken where the checkpoint does not hold the tower.
pub const CLIP_L14_336: Companion = Companion {
    file: FileElsewhere {
        repo: "openai/clip-vit-large-patch14-336",
        commit: "ce19dc912ca5cd21c8a653c79e251e808ccabcd1",
        file: "pytorch_model.bin",
    },
    unless_tensor: TOWER_PROBE,
};

/// The tensor whose presence says a checkpoint holds its CLIP tower.
const TOWER_PROBE: &str = "vision_tower.vision_tower.vision_model.embeddings.class_embedding";

/// The released checkpoints' layout: `transformers`' config and PyTorch shards (safetensors
/// refuses CLIP-T5's alias of T5's embedding), FlanT5's tokenizer where the repo has none, the
/// CLIP tower's weights from OpenAI's repo where the checkpoint lacks them.
pub const LAYOUT: Layout = Layout {
    config: "config.json",
    weights: PTH_SHARD_INDEX_FILE,
    weights_instead: Some("pytorch_model.bin"),
    tokenizer: "tokenizer.json",
    tokenizer_instead: Some(FLAN_T5_TOKENIZER),
    image_settings: false,
    generation: true,
    companion: Some(CLIP_L14_336),
};

/// The CLIP towers `mm_vision_tower` names on the hub, by their configs (their repos are not
/// downloaded: the checkpoints hold the tower's weights).
const KNOWN_TOWERS: [(&str, usize); 2] =
    [("openai/clip-vit-large-patch14-336", 336), ("openai/clip-vit-large-patch14", 224)];

/// `config.json` of a `CLIPT5ForConditionalGeneration` (`model_type` `clip_t5`): T5's keys with
/// `transformers`' `T5Config` defaults, and LLaVA's `mm_*` keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ClipT5Config {
    pub vocab_size: usize,
    pub d_model: usize,
    pub d_kv: usize,
    pub d_ff: usize,
    pub num_layers: usize,
    #[serde(default)]
    pub num_decoder_layers: Option<usize>,
    pub num_heads: usize,
    #[serde(default = "defaults::buckets")]
    pub relative_attention_num_buckets: usize,
    #[serde(default = "defaults::max_distance")]
    pub relative_attention_max_distance: usize,
    #[serde(default = "defaults::eps")]
    pub layer_norm_epsilon: f64,
    #[serde(default = "defaults::feed_forward")]
    pub feed_forward_proj: String,
    #[serde(default = "defaults::tied")]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub decoder_start_token_id: u32,
    pub mm_vision_tower: String,
    pub mm_hidden_size: usize,
    #[serde(default = "defaults::projector")]
    pub mm_projector_type: String,
    #[serde(default = "defaults::select_layer")]
    pub mm_vision_select_layer: i64,
    #[serde(default = "defaults::select_feature")]
    pub mm_vision_select_feature: String,
}

mod defaults {
    pub fn buckets() -> usize {
        32
    }
    pub fn max_distance() -> usize {
        128
    }
    pub fn eps() -> f64 {
        1e-6
    }
    pub fn feed_forward() -> String {
        "relu".into()
    }
    pub fn tied() -> bool {
        true
    }
    pub fn projector() -> String {
        "linear".into()
    }
    pub fn select_layer() -> i64 {
        -2
    }
    pub fn select_feature() -> String {
        "patch".into()
    }
}

impl ClipT5Config {
    pub fn from_file(path: &Path) -> Result<Self> {
        super::read_config(path)
    }

    fn bad(path: &Path, key: &str, what: String) -> Error {
        Error::new(ErrorKind::BadConfig, format!("use {}: `{key}` {what}", path.display()))
    }

    /// The feed-forward block `feed_forward_proj` names.
    pub fn feed_forward(&self, path: &Path) -> Result<FeedForward> {
        match self.feed_forward_proj.as_str() {
            "relu" => Ok(FeedForward::Relu),
            "gated-gelu" => Ok(FeedForward::GatedGelu),
            other => Err(Self::bad(path, "feed_forward_proj", format!("{other:?} is not relu or gated-gelu"))),
        }
    }

    /// The projector's depth: 1 for `linear`, N for `mlpNx_gelu`.
    pub fn projector_depth(&self, path: &Path) -> Result<usize> {
        let kind = self.mm_projector_type.as_str();
        let depth = match kind.strip_prefix("mlp").and_then(|rest| rest.strip_suffix("x_gelu")) {
            Some(n) => n.parse::<usize>().ok().filter(|&n| n >= 1),
            None => (kind == "linear").then_some(1),
        };
        depth.ok_or_else(|| Self::bad(path, "mm_projector_type", format!("{kind:?} is not linear or mlpNx_gelu")))
    }

    /// The vision tower `mm_vision_tower` names: its config, and the preprocessor settings file
    /// in it where it is a directory below the checkpoint's (as t2v_metrics resolves a path from
    /// its working directory), else a hub tower it knows by its config (OpenAI's ViT-L/14s).
    pub fn vision_tower(&self, path: &Path) -> Result<(VisionConfig, Option<PathBuf>, Option<PathBuf>)> {
        let name = self.mm_vision_tower.as_str();
        // Only a directory below the checkpoint's: a hub config cannot lead the reader out of
        // its snapshot.
        let below = Path::new(name).components().all(|c| matches!(c, std::path::Component::Normal(_)));
        let dir = path.parent().unwrap_or(Path::new(".")).join(name);
        if below && dir.join("config.json").is_file() {
            let value: serde_json::Value = super::read_config(&dir.join("config.json"))?;
            let vision = value.get("vision_config").cloned().unwrap_or(value);
            let config: VisionConfig = serde_json::from_value(vision).map_err(|e| {
                Self::bad(path, "mm_vision_tower", format!("names {}, not a CLIP vision config: {e}", dir.display()))
            })?;
            let settings = dir.join(crate::hub::PREPROCESSOR_FILE);
            let weights =
                ["model.safetensors", "pytorch_model.bin"].map(|f| dir.join(f)).into_iter().find(|f| f.is_file());
            return Ok((config, settings.is_file().then_some(settings), weights));
        }
        let Some(&(_, image_size)) = KNOWN_TOWERS.iter().find(|(repo, _)| *repo == name) else {
            let known: Vec<&str> = KNOWN_TOWERS.iter().map(|(repo, _)| *repo).collect();
            return Err(Self::bad(
                path,
                "mm_vision_tower",
                format!("{name:?} is neither a directory beside it nor a tower benchctl knows ({})", known.join(", ")),
            ));
        };
        // OpenAI's ViT-L/14 (transformers' CLIPVisionConfig of those repos).
        let config = serde_json::json!({"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
            "num_attention_heads": 16, "image_size": image_size, "patch_size": 14, "hidden_act": "quick_gelu"});
        let config = serde_json::from_value(config).map_err(|e| Error::new(ErrorKind::BadConfig, e.to_string()))?;
        Ok((config, None, None))
    }

    /// The number of vision blocks whose output is read: `mm_vision_select_layer` indexes
    /// `hidden_states` (the embeddings, then one per block) as Python does.
    pub fn select_layer(&self, path: &Path, depth: usize) -> Result<usize> {
        let states = depth as i64 + 1;
        let layer = self.mm_vision_select_layer;
        let index = if layer < 0 { states + layer } else { layer };
        if !(0..states).contains(&index) {
            return Err(Self::bad(
                path,
                "mm_vision_select_layer",
                format!("{layer} is outside a tower of {depth} blocks"),
            ));
        }
        Ok(index as usize)
    }
}

/// CLIP-FlanT5 scored by VQAScore.
pub struct ClipT5Vqa {
    vision: VisionTrunk,
    /// Blocks of the vision tower whose output is read.
    vision_layer: usize,
    /// Whether the class token is dropped (`mm_vision_select_feature` "patch").
    patches_only: bool,
    projector: Vec<Linear>,
    shared: Tensor,
    encoder: Stack,
    decoder: Stack,
    /// The head `(vocabulary, d_model)`, cut to the tokenizer's vocabulary.
    lm_head: Tensor,
    /// `d_model^-0.5` where the head is the embedding (the original T5), else 1.
    head_scale: f64,
    decoder_start: u32,
    prompt: Prompt,
    preprocessor: Preprocessor,
    d_model: usize,
    device: Device,
    /// Where scores are read from generated replies (`--answer-rule generate`).
    replying: Option<replies::Replying>,
}

impl ClipT5Vqa {
    pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Self> {
        let path = files.config.as_path();
        let config = ClipT5Config::from_file(path)?;
        let (vision_config, settings, tower_weights) = config.vision_tower(path)?;
        let weights = Weights::open(&files.weights, dtype, device)?;
        Activation::parse(&vision_config.hidden_act).map_err(|e| Error::new(ErrorKind::BadConfig, e.to_string()))?;
        let vision = load_tower(files, &config, &vision_config, tower_weights.as_deref(), &weights, dtype, device)?;
        let vision_layer = config.select_layer(path, vision.depth())?;
        let patches_only = match config.mm_vision_select_feature.as_str() {
            "patch" => true,
            "cls_patch" => false,
            other => {
                return Err(ClipT5Config::bad(
                    path,
                    "mm_vision_select_feature",
                    format!("{other:?} is not patch or cls_patch"),
                ))
            }
        };
        let d = config.d_model;
        // `linear` is one `nn.Linear`; `mlpNx_gelu` a `Sequential` of linears between GELUs.
        let layer = |i: usize| match config.mm_projector_type.as_str() {
            "linear" => weights.pp("mm_projector"),
            _ => weights.pp(format!("mm_projector.{}", 2 * i)),
        };
        let projector = (0..config.projector_depth(path)?)
            .map(|i| layer(i).linear(if i == 0 { config.mm_hidden_size } else { d }, d, true))
            .collect::<Result<Vec<_>>>()?;
        let kind = config.feed_forward(path)?;
        let shared = weights.get((config.vocab_size, d), "shared.weight")?;
        let tokenizer = load_tokenizer(&files.tokenizer)?;
        let vocabulary = tokenizer.get_vocab_size(true);
        if vocabulary > config.vocab_size {
            return Err(ClipT5Config::bad(
                path,
                "vocab_size",
                format!(
                    "{} is smaller than the tokenizer's {vocabulary} tokens ({})",
                    config.vocab_size,
                    files.tokenizer.display()
                ),
            ));
        }
        let (head, head_scale) = if config.tie_word_embeddings {
            (shared.clone(), (d as f64).powf(-0.5))
        } else {
            (weights.get((config.vocab_size, d), "lm_head.weight")?, 1.0)
        };
        let lm_head = head.narrow(0, 0, vocabulary).map_err(|e| Error::compute("cut the head to the tokenizer", e))?;
        let encoder = Stack::load(&weights.pp("encoder"), &config, kind, false)?;
        let decoder = Stack::load(&weights.pp("decoder"), &config, kind, true)?;
        weights.check_every_tensor_used(
            "clip_t5",
            &[
                "vision_tower.vision_tower.vision_model.post_layernorm.",
                "embed_tokens.weight",
                "encoder.embed_tokens.weight",
                "decoder.embed_tokens.weight",
            ],
        )?;
        let preprocessor = preprocessor(&vision_config, settings.as_deref())?;
        let prompt = Prompt::new(tokenizer)?;
        Ok(Self {
            vision,
            vision_layer,
            patches_only,
            projector,
            shared,
            encoder,
            decoder,
            lm_head,
            head_scale,
            decoder_start: config.decoder_start_token_id,
            prompt,
            preprocessor,
            d_model: d,
            device: device.clone(),
            replying: None,
        })
    }

    /// The prompt's ids after the image for `caption` (ending in `</s>`), and the answer's.
    pub fn caption_ids(&self, caption: &str) -> Result<(Vec<u32>, Vec<u32>)> {
        self.prompt.caption_ids(caption)
    }

    /// The whole prompt's ids for `caption`, the image as `t2v_metrics`' placeholder `-200`.
    pub fn prompt_ids(&self, caption: &str) -> Result<Vec<i64>> {
        let (after, _) = self.caption_ids(caption)?;
        let ids = self.prompt.before_image.iter().map(|&i| i64::from(i));
        Ok(ids.chain(std::iter::once(-200)).chain(after.iter().map(|&i| i64::from(i))).collect())
    }

    fn embed(&self, rows: &[Vec<u32>]) -> candle_core::Result<Tensor> {
        let (b, s) = (rows.len(), rows.first().map_or(0, Vec::len));
        let ids = Tensor::from_vec(rows.concat(), b * s, &self.device)?;
        self.shared.index_select(&ids, 0)?.reshape((b, s, self.d_model))
    }

    /// The encoder's output `(b, t, d)` for prompts of one length: each row's ids before the
    /// image, its features `images` row, then `after` (its ids after the image).
    fn encode_prompts(&self, images: &Tensor, after: &[Vec<u32>]) -> candle_core::Result<Tensor> {
        let before = self.embed(&vec![self.prompt.before_image.clone(); after.len()])?;
        let after = self.embed(after)?;
        self.encoder.forward(&Tensor::cat(&[&before, &images.to_dtype(before.dtype())?, &after], 1)?, None)
    }

    /// The head's logits at the decoder's final hidden states `(…, d)`, in f32.
    fn logits(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        (hidden * self.head_scale)?.broadcast_matmul(&self.lm_head.t()?)?.to_dtype(DType::F32)
    }

    /// Pairs of one prompt and answer length: each row's mean log-probability of its answer.
    fn score_group(&self, images: &Tensor, ids: &[&(Vec<u32>, Vec<u32>)]) -> candle_core::Result<Vec<f32>> {
        let encoded = self.encode_prompts(images, &ids.iter().map(|(after, _)| after.clone()).collect::<Vec<_>>())?;
        // Teacher forcing: the decoder starts from its start token and reads the answer but its
        // last token.
        let inputs: Vec<Vec<u32>> = ids
            .iter()
            .map(|(_, answer)| {
                std::iter::once(self.decoder_start).chain(answer[..answer.len() - 1].iter().copied()).collect()
            })
            .collect();
        let hidden = self.decoder.forward(&self.embed(&inputs)?, Some(&encoded))?;
        let log_probs = candle_nn::ops::log_softmax(&self.logits(&hidden)?, candle_core::D::Minus1)?;
        let answers: Vec<&[u32]> = ids.iter().map(|(_, answer)| answer.as_slice()).collect();
        mean_answer_log_ps(&log_probs, &answers)
    }
}

/// The CLIP tower's trunk: from the checkpoint where it holds it, else from the tower
/// `mm_vision_tower` names (fetched beside the checkpoint, or a directory beside it), as
/// `t2v_metrics` builds the tower from there before loading the checkpoint over it.
fn load_tower(
    files: &ModelFiles,
    config: &ClipT5Config,
    vision_config: &VisionConfig,
    tower_weights: Option<&Path>,
    weights: &Weights,
    dtype: DType,
    device: &Device,
) -> Result<VisionTrunk> {
    // The fetched companion is OpenAI's ViT-L/14-336: only for the checkpoints naming it.
    let companion = files.companion.as_deref().filter(|_| config.mm_vision_tower == CLIP_L14_336.file.repo);
    let tower = match companion.or(tower_weights) {
        _ if weights.has(TOWER_PROBE) => {
            VisionTrunk::load(&weights.pp("vision_tower.vision_tower.vision_model"), vision_config)?
        }
        Some(tower) => {
            let tower = Weights::open(tower, dtype, device)?;
            VisionTrunk::load(&tower.pp("vision_model"), vision_config)?
        }
        None => {
            return Err(Error::new(
                ErrorKind::BadWeights,
                format!(
                    "load weights {}: it holds no vision tower (`vision_tower.vision_tower.vision_model.*`) and `mm_vision_tower` {:?} brought none: put the tower's model.safetensors in that directory beside the config, or run from the hub id, which fetches {}'s {}",
                    files.weights.display(),
                    config.mm_vision_tower,
                    CLIP_L14_336.file.repo,
                    CLIP_L14_336.file.file
                ),
            ));
        }
    };
    Ok(tower)
}

/// `text`'s ids as `tokenizer(text).input_ids` gives them: `</s>` appended by the tokenizer's
/// template.
fn encode_with_end(tokenizer: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>> {
    let ids = tokenizer
        .encode(text, true)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| Error::new(ErrorKind::Tokenizer, format!("tokenize {text:?}: {e}")))?;
    if ids.is_empty() {
        return Err(Error::new(ErrorKind::Tokenizer, format!("tokenize {text:?}: it has no tokens")));
    }
    Ok(ids)
}

/// CLIP's image processor (the tower directory's settings where it has them, else OpenAI's)
/// after `convert("RGB")` and a square canvas of the mean colour, `int(mean · 255)`.
fn preprocessor(vision: &VisionConfig, settings: Option<&Path>) -> Result<Preprocessor> {
    let defaults = Preprocessor::hf_clip(vision.image_size);
    let mut preprocessor = match settings {
        Some(file) => Preprocessor::from_hf_config(file, &defaults)?,
        None => defaults,
    };
    if preprocessor.size != vision.image_size {
        return Err(Error::new(
            ErrorKind::BadConfig,
            format!(
                "use the vision tower's image settings: they make {0}×{0} inputs for a {1} px tower",
                preprocessor.size, vision.image_size
            ),
        ));
    }
    preprocessor.modes = ModeRule::ConvertFirst { colour_key: ColourKey::Kept };
    preprocessor.square_canvas = Some(preprocessor.mean.map(|m| (f64::from(m) * 255.0) as u8));
    Ok(preprocessor)
}

impl FusionEncoder for ClipT5Vqa {
    fn device(&self) -> &Device {
        &self.device
    }

    fn preprocessor(&self) -> &Preprocessor {
        &self.preprocessor
    }

    /// `(b, 3, s, s)` → `(b, tokens · d_model)`: each image's projected features, flat.
    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor> {
        let encode = || -> candle_core::Result<Tensor> {
            let states = self.vision.hidden_state(&pixels.to_dtype(self.shared.dtype())?, self.vision_layer)?;
            let tokens = states.dim(1)?;
            let mut xs = if self.patches_only { states.narrow(1, 1, tokens - 1)? } else { states };
            for (i, layer) in self.projector.iter().enumerate() {
                if i > 0 {
                    xs = xs.gelu_erf()?;
                }
                xs = layer.forward(&xs)?;
            }
            xs.flatten_from(1)
        };
        encode().map_err(|e| Error::compute("encode images", e))
    }

    fn score_pairs(&self, image_states: &Tensor, texts: &[&str]) -> Result<Tensor> {
        if self.replying.is_some() {
            return Ok(self.score_pairs_with_replies(image_states, texts)?.0);
        }
        let ids: Vec<(Vec<u32>, Vec<u32>)> = texts.iter().map(|t| self.caption_ids(t)).collect::<Result<_>>()?;
        let keys: Vec<(usize, usize)> = ids.iter().map(|(p, a)| (p.len(), a.len())).collect();
        let mut scores = vec![0.0f32; texts.len()];
        let compute = |e| Error::compute("score captions", e);
        let b = image_states.dim(0).map_err(compute)?;
        let images = image_states.reshape((b, (), self.d_model)).map_err(compute)?;
        for group in groups_of(&keys) {
            let rows =
                Tensor::new(group.iter().map(|&i| i as u32).collect::<Vec<_>>(), &self.device).map_err(compute)?;
            let members: Vec<&(Vec<u32>, Vec<u32>)> = group.iter().map(|&i| &ids[i]).collect();
            let got = images.index_select(&rows, 0).and_then(|images| self.score_group(&images, &members));
            group.iter().zip(got.map_err(compute)?).for_each(|(&i, score)| scores[i] = score);
        }
        Tensor::from_vec(scores, texts.len(), &self.device).map_err(compute)
    }

    /// Where replies are generated: each pair's reply and its score read from it.
    fn score_pairs_with_replies(&self, image_states: &Tensor, texts: &[&str]) -> Result<(Tensor, Option<Vec<String>>)> {
        match &self.replying {
            Some(replying) => self.read_replies(replying, image_states, texts).map(|(s, r)| (s, Some(r))),
            None => Ok((self.score_pairs(image_states, texts)?, None)),
        }
    }

    fn score_kind(&self) -> ScoreKind {
        ScoreKind::LogProbability
    }

    fn shortlister(&self) -> Option<&dyn crate::DualEncoder> {
        None
    }
}

/// Where `t2v_metrics` splits its prompt to place the image.
const IMAGE_MARKER: &str = "<image>";

/// `t2v_metrics`' `t5_chat` prompt around the image, `{system} USER: <image>\n{question}
/// ASSISTANT: `, each side of the image tokenised on its own (each ending in `</s>`).
struct Prompt {
    tokenizer: tokenizers::Tokenizer,
    template: Template,
    /// The ids before the image: the system message and ` USER: `, then `</s>`.
    before_image: Vec<u32>,
}

impl Prompt {
    fn new(tokenizer: tokenizers::Tokenizer) -> Result<Self> {
        let before_image = encode_with_end(&tokenizer, &format!("{SYSTEM} USER: "))?;
        Ok(Self { tokenizer, template: Template::new(TEMPLATE.0, TEMPLATE.1)?, before_image })
    }

    /// The ids after the image for `caption`, as tokenised, before any cut. A caption holding
    /// `<image>` is refused: `t2v_metrics` splits the whole prompt there
    /// (`t5_tokenizer_image_token`), putting a second image's placeholder in the caption, so no
    /// score would be its.
    fn after_image(&self, caption: &str) -> Result<Vec<u32>> {
        if caption.contains(IMAGE_MARKER) {
            return Err(image_marker_in_caption(caption, IMAGE_MARKER));
        }
        encode_with_end(&self.tokenizer, &format!("\n{} ASSISTANT: ", self.template.question_for(caption)))
    }

    /// The ids `t2v_metrics` drops from `caption`'s prompt (the image one id of it) to fit
    /// [`CONTEXT`].
    fn tokens_cut(&self, caption: &str) -> Result<usize> {
        Ok((self.before_image.len() + 1 + self.after_image(caption)?.len()).saturating_sub(CONTEXT))
    }

    /// The ids after the image, cut to the context as `t2v_metrics` cuts the prompt, and the
    /// answer's.
    fn caption_ids(&self, caption: &str) -> Result<(Vec<u32>, Vec<u32>)> {
        let mut after = self.after_image(caption)?;
        after.truncate(CONTEXT.saturating_sub(self.before_image.len() + 1));
        let mut answer = encode_with_end(&self.tokenizer, &self.template.answer_for(caption))?;
        answer.truncate(CONTEXT);
        Ok((after, answer))
    }
}

/// CLIP-FlanT5 scored by VQAScore, as [`crate::registry::ARCHITECTURES`] lists it; its
/// preprocessing comes from its vision tower.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "clip_t5",
    model_types: &["clip_t5"],
    layout: LAYOUT,
    timm_towers: &[],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Vqa],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |_| None,
    caption_limit: |files, _| {
        let prompt = Prompt::new(load_tokenizer(&files.tokenizer)?)?;
        Ok(CaptionLimit::new(CONTEXT, move |caption| prompt.tokens_cut(caption)))
    },
    load: |choice, files, dtype, device| {
        // Replies read before the weights: a checkpoint that cannot give them fails at once.
        let replying = match choice.answer_rule {
            crate::vqascore::AnswerRule::Generate => Some(replies::Replying::of(files, choice.reply_reading)?),
            crate::vqascore::AnswerRule::Logprobs => None,
        };
        let model = ClipT5Vqa { replying, ..ClipT5Vqa::load(files, dtype, device)? };
        Ok(crate::Model::Fusion(Box::new(model)))
    },
    bench_towers: BenchTowers::None,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: false,
    images_together: false,
    generates_replies: true,
});
