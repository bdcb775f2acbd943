//! Qwen3-VL (Qwen Team, 2025, <https://github.com/QwenLM/Qwen3-VL>) as a VQAScore model: the
//! probability that it answers "Yes" when asked whether an image shows a caption
//! ([`crate::vqascore`]), e.g. <https://huggingface.co/Qwen/Qwen3-VL-2B-Instruct>.
//!
//! The prompt and the image are what `t2v_metrics`' Qwen3-VL model builds: one user turn of the
//! image and then the question in the Instruct checkpoints' chat format,
//! `<|im_start|>user\n<|vision_start|>` + one `<|image_pad|>` per merged patch +
//! `<|vision_end|>` + question + `<|im_end|>\n<|im_start|>assistant\n`; the image resized by
//! `qwen_vl_utils` (each at about its own size, see [`crate::preprocess::Resize::Native`]), not by the
//! checkpoint's processor. The score is the log-softmax of the next token's logits at the
//! answer's token (the mean over the answer's tokens, teacher-forced, for a longer answer).
//!
//! What sets Qwen3-VL apart, and is easy to get silently wrong:
//! - the vision tower sees 16-pixel patches of two identical frames (a video's temporal patch),
//!   in 2 × 2 blocks (the order the merger concatenates them in), with a learned 48 × 48
//!   position table resampled bilinearly (corners aligned) to each image's grid and a 2-D
//!   rotary embedding of (row, column);
//! - DeepStack (Meng et al., 2024, <https://arxiv.org/abs/2406.04334>): the outputs of some
//!   vision blocks, merged on their own, are added to the image tokens' hidden states after
//!   the first decoder layers;
//! - the decoder's rotary positions are three-dimensional (time, row, column), their
//!   frequencies interleaved per `mrope_section`: text tokens have three equal positions, an
//!   image's tokens share the time position and count rows and columns from it, and the text
//!   after the image resumes at the larger side;
//! - RMS norms scale by `w` (not Gemma's `1 + w`), and the queries and keys are RMS-normed.
//!
//! The mixture-of-experts checkpoints (`qwen3_vl_moe`, e.g.
//! <https://huggingface.co/Qwen/Qwen3-VL-30B-A3B-Instruct>) are the same model with a mixture
//! of SwiGLU experts in the decoder's sparse layers (`experts::Mixture::Qwen3VlMoe`).
//!
//! Attention is causal throughout, so the keys and values of the prompt up to
//! `<|vision_end|>` are each image's state ([`crate::FusionEncoder::encode_images`]), computed
//! once, and each caption runs only its own tokens over them. Several images shown together
//! ([`crate::FusionEncoder::encode_shown_together`]) follow one another as the chat template
//! writes them, each `<|vision_start|>` + pads + `<|vision_end|>`, each image's positions
//! starting where the text before it leaves off.

mod config;
pub(crate) mod experts;
pub(crate) mod text;
pub(crate) mod vision;

pub(crate) use config::qwen_vl_utils_preprocessor;
pub use config::{ImageTokenIds, Qwen3VlConfig, Qwen3VlTextConfig, Qwen3VlVisionConfig, TextRope};

use candle_core::{DType, Device, Tensor};

use super::weights::Weights;
use crate::architecture::{Architecture, ArchitectureSpec, BenchTowers, CaptionLimit, ScoreHead, TextPrep};
use crate::hub::ModelFiles;
use crate::hub::HF_LAYOUT;
use crate::preprocess::{ImageSettings, PixelBounds, Preprocessor, Resize};
use crate::vqascore::local::{
    answer_ids, each_image, encode, encode_caption_prompt, load_tokenizer, LocalVqa, ReplyState, TowerMemo,
};
use crate::vqascore::Template;
use crate::{Error, ErrorKind, Result};
use experts::Mixture;
use text::{Decoder, Positions};
use vision::{QwenVision, VisionOutput, VisionTower};

/// The softmax attention of `(b, heads, s, d)` queries over `(b, heads, t, d)` keys and values,
/// `mask` `(s, t)` additive if any; weights in f32, the output `(b, s, heads · d)`.
pub(crate) fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    mask: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let dtype = q.dtype();
    let logits = (q.contiguous()? * scale)?.matmul(&k.t()?.contiguous()?)?.to_dtype(DType::F32)?;
    let logits = match mask {
        Some(mask) => logits.broadcast_add(mask)?,
        None => logits,
    };
    let weights = candle_nn::ops::softmax_last_dim(&logits)?.to_dtype(dtype)?;
    let (b, _, s, _) = q.dims4()?;
    weights.matmul(&v.contiguous()?)?.transpose(1, 2)?.reshape((b, s, ()))
}

/// Qwen3-VL scored by VQAScore (and Qwen2.5-VL, as [`super::qwen25vl::load`] assembles it).
pub struct Qwen3VlVqa {
    vision: Box<dyn QwenVision>,
    /// The tower's last outputs: an image shown with others has just been encoded alone.
    towered: TowerMemo<VisionOutput>,
    decoder: Decoder,
    tokenizer: tokenizers::Tokenizer,
    template: Template,
    preprocessor: Preprocessor,
    /// The default system turn where the family has one, then `<|im_start|>user\n<|vision_start|>`.
    before_image: Vec<u32>,
    image_token: u32,
    vision_start: u32,
    vision_end: u32,
    dtype: DType,
    device: Device,
}

impl Qwen3VlVqa {
    /// The model with its image processor resizing again to `bounds` after `qwen_vl_utils`
    /// (where given), as [`Resize::Native`]'s `processor` says.
    pub fn with_processor_pixels(mut self, bounds: Option<PixelBounds>) -> Self {
        if let Resize::Native { processor, .. } = &mut self.preprocessor.resize {
            *processor = bounds;
        }
        self
    }

    /// The prompt's ids before the image, the image's (`tokens` image pads), and after it up
    /// to `<|vision_end|>`.
    fn image_prompt(&self, tokens: usize) -> Vec<u32> {
        let mut ids = self.before_image.clone();
        ids.extend(std::iter::repeat_n(self.image_token, tokens));
        ids.push(self.vision_end);
        ids
    }

    /// How many images its vision tower has run on (an image shown with others, just encoded
    /// alone, reuses that run).
    pub fn tower_runs(&self) -> usize {
        self.towered.runs()
    }

    /// The whole prompt's ids for an image of `tokens` merged patches and `caption`.
    pub fn prompt_ids(&self, tokens: usize, caption: &str) -> Result<Vec<u32>> {
        Ok([self.image_prompt(tokens), self.caption_ids(caption)?.0].concat())
    }

    /// One image's state: the prompt's keys and values up to `<|vision_end|>`, flattened in
    /// f32 (layer by layer, keys then values), then the position the caption starts at.
    fn image_state(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        self.state_of(std::slice::from_ref(pixels))
    }

    /// The state of `images` `(3, height, width)` each, shown together in one user turn as the
    /// chat template lays them out: `<|vision_start|>` + its pads + `<|vision_end|>` per image,
    /// one after another.
    fn state_of(&self, images: &[Tensor]) -> candle_core::Result<Tensor> {
        let mut ids = self.before_image.clone();
        // Text counts 0, 1, …; an image's tokens share the time position its first token takes
        // and count rows and columns from it; the text after it resumes past its larger side.
        let mut positions: Positions = std::array::from_fn(|_| (0..ids.len() as u32).collect());
        let mut next = ids.len();
        let (mut rows_of, mut tokens, mut deepstack) = (Vec::new(), Vec::new(), Vec::<Vec<Tensor>>::new());
        for (n, pixels) in images.iter().enumerate() {
            if n > 0 {
                ids.push(self.vision_start);
                positions.iter_mut().for_each(|axis| axis.push(next as u32));
                next += 1;
            }
            let image = self.towered.get_or(pixels, || self.vision.forward(pixels))?;
            let (rows, cols) = image.grid;
            rows_of.push(ids.len()..ids.len() + rows * cols);
            ids.extend(std::iter::repeat_n(self.image_token, rows * cols));
            for r in 0..rows {
                for c in 0..cols {
                    let at = [next, next + r, next + c];
                    positions.iter_mut().zip(at).for_each(|(axis, p)| axis.push(p as u32));
                }
            }
            next += rows.max(cols);
            ids.push(self.vision_end);
            positions.iter_mut().for_each(|axis| axis.push(next as u32));
            next += 1;
            tokens.push(image.tokens);
            deepstack.resize_with(image.deepstack.len(), Vec::new);
            deepstack.iter_mut().zip(image.deepstack).for_each(|(layer, f)| layer.push(f));
        }
        let xs = self.decoder.embed(std::slice::from_ref(&ids))?;
        // The text's embeddings, each image's tokens in place of its pads.
        let embedded = text::with_image_rows(&xs, &tokens, &rows_of)?;
        let deepstack: Vec<Tensor> = (deepstack.iter())
            .map(|layer| Tensor::cat(layer, 0)?.to_dtype(xs.dtype()))
            .collect::<candle_core::Result<_>>()?;
        let (_, caches) = self.decoder.decode(embedded, &positions, None, Some((&deepstack, &rows_of)))?;
        self.decoder.kv_layout().flatten(&caches, next as u32)
    }

    /// A Qwen-VL family's model from its parts: the tokenizer checked against the config's
    /// special tokens, the checkpoint's image settings over the family's preprocessing.
    pub(crate) fn assemble(
        files: &ModelFiles,
        parts: Parts,
        template: Template,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let Parts { vision, decoder, ids, preprocessor, system } = parts;
        let tokenizer = load_tokenizer(&files.tokenizer)?;
        let system = system.map(|message| format!("<|im_start|>system\n{message}<|im_end|>\n")).unwrap_or_default();
        let before_image = encode(&tokenizer, &format!("{system}<|im_start|>user\n<|vision_start|>"))?;
        let reads = |name: &str, id: u32| tokenizer.token_to_id(name) == Some(id);
        if !(reads("<|image_pad|>", ids.image)
            && reads("<|vision_end|>", ids.vision_end)
            && before_image.last() == Some(&ids.vision_start))
        {
            return Err(Error::new(
                ErrorKind::Tokenizer,
                format!(
                    "use the tokenizer {}: it does not read Qwen-VL's special tokens (<|vision_start|>, <|image_pad|> as id {})",
                    files.tokenizer.display(),
                    ids.image
                ),
            ));
        }
        // `qwen_vl_utils` resizes (its own pixel bounds, not the processor's); the checkpoint's
        // image settings give the normalisation and whether a transparent colour turns white.
        let mut preprocessor = preprocessor;
        if let Some(settings) = ImageSettings::of(files)? {
            preprocessor.mean = settings.triple("image_mean", preprocessor.mean)?;
            preprocessor.std = settings.triple("image_std", preprocessor.std)?;
            preprocessor.modes = settings.mode_rule(preprocessor.modes)?;
        }
        Ok(Self {
            vision,
            towered: TowerMemo::default(),
            decoder,
            tokenizer,
            template,
            preprocessor,
            before_image,
            image_token: ids.image,
            vision_start: ids.vision_start,
            vision_end: ids.vision_end,
            dtype,
            device: device.clone(),
        })
    }
}

impl LocalVqa for Qwen3VlVqa {
    fn with_template(files: &ModelFiles, dtype: DType, device: &Device, template: Template) -> Result<Self> {
        let weights = Weights::open(&files.weights, dtype, device)?;
        let config = Qwen3VlConfig::from_file(&files.config)?;
        let vision = Box::new(VisionTower::load(&weights.pp("model.visual"), &config.vision_config)?);
        let lm_head = lm_head(&weights, &config.text_config)?;
        let decoder = Decoder::load(&weights.pp("model.language_model"), lm_head, &text_spec(&config))?;
        weights.check_every_tensor_used(config.model_type(), &[])?;
        let parts = Parts { vision, decoder, ids: config.ids(), preprocessor: config.preprocessor(), system: None };
        Self::assemble(files, parts, template, dtype, device)
    }
    fn weights_device(&self) -> &Device {
        &self.device
    }

    fn image_preprocessor(&self) -> &Preprocessor {
        &self.preprocessor
    }

    /// `(b, 3, height, width)` images of one size → one state row each.
    fn image_states(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        each_image(pixels, |image| self.image_state(image))
    }

    /// Each image at its own size, in one prompt.
    fn shown_together_states(&self, images: &[Tensor]) -> Option<candle_core::Result<Tensor>> {
        let images: candle_core::Result<Vec<Tensor>> = images.iter().map(|i| i.get(0)).collect();
        Some(images.and_then(|images| self.state_of(&images)))
    }

    /// The prompt's ids after `<|vision_end|>` for `caption`, and the answer's ids.
    fn caption_ids(&self, caption: &str) -> Result<(Vec<u32>, Vec<u32>)> {
        let suffix = format!("{}<|im_end|>\n<|im_start|>assistant\n", self.template.question_for(caption));
        let prompt = encode_caption_prompt(&self.tokenizer, &suffix, caption, &[self.image_token])?;
        Ok((prompt, answer_ids(&self.tokenizer, &self.template, caption)?))
    }

    /// The caption's tokens over each image's prompt state, from the position it resumes at
    /// (the states of one batch come from images of one size).
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

    /// `<|im_start|>user\n`, then per image `<|vision_start|>`, its pads and `<|vision_end|>`:
    /// the same ids for one image or several.
    fn ids_before_caption(&self, _images: usize) -> Result<Vec<u32>> {
        Ok([self.before_image.as_slice(), &[self.vision_start, self.image_token, self.vision_end]].concat())
    }
}

/// What a Qwen-VL family's checkpoint gives [`Qwen3VlVqa::assemble`].
pub(crate) struct Parts {
    pub vision: Box<dyn QwenVision>,
    pub decoder: Decoder,
    pub ids: ImageTokenIds,
    /// The family's preprocessing, before the checkpoint's image settings.
    pub preprocessor: Preprocessor,
    /// The system message the family's chat template opens a conversation with when it is
    /// given none (Qwen2.5-VL's "You are a helpful assistant."; none for Qwen3-VL).
    pub system: Option<&'static str>,
}

/// Qwen3-VL's decoder: query/key norms, no biases, interleaved rotary sections, and where the
/// config has experts (`qwen3_vl_moe`) Qwen3-VL's own mixture.
fn text_spec(config: &Qwen3VlConfig) -> text::TextSpec<'_> {
    text::TextSpec {
        text: &config.text_config,
        head_dim: config.head_dim(),
        rope_theta: config.rope_theta(),
        mrope_section: config.mrope_section(),
        interleaved: config.interleaved(),
        qk_norms: true,
        qkv_bias: false,
        mixture: Some(Mixture::Qwen3VlMoe),
    }
}

/// The output layer where the checkpoint has its own (else the embeddings, tied).
pub(crate) fn lm_head(weights: &Weights, t: &Qwen3VlTextConfig) -> Result<Option<Tensor>> {
    if !weights.has("lm_head.weight") {
        return Ok(None);
    }
    Ok(Some(weights.get((t.vocab_size, t.hidden_size), "lm_head.weight")?))
}

/// Qwen3-VL scored by VQAScore, each image at its own size, as
/// [`crate::registry::ARCHITECTURES`] lists it; its preprocessing comes from its config.
pub const ARCHITECTURE: Architecture = Architecture::declare(&ArchitectureSpec {
    name: "qwen3_vl",
    model_types: &["qwen3_vl", "qwen3_vl_moe"],
    layout: HF_LAYOUT,
    timm_towers: &[],
    released_as_torch_checkpoint: false,
    heads: &[ScoreHead::Vqa],
    text_preps: TextPrep::AUTHORS_ONLY,
    default_preprocessor: |_| None,
    caption_limit: |files, _| {
        Ok(CaptionLimit::never_cut(Qwen3VlConfig::from_file(&files.config)?.text_config.max_position_embeddings))
    },
    load: |choice, files, dtype, device| {
        let load = || Ok(Qwen3VlVqa::load(files, dtype, device)?.with_processor_pixels(choice.processor_pixels));
        crate::vqascore::generate::load_vqa(choice, files, load)
    },
    bench_towers: BenchTowers::None,
    pre_captions: false,
    patch_budget: false,
    processor_pixels: true,
    images_together: true,
    generates_replies: true,
});
