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
//! image's state ([`FusionEncoder::encode_images`]), computed once per image, and each
//! caption runs only its own tokens over them.

use candle_core::{DType, Device, Module, Tensor, D};
use serde::Deserialize;

use super::siglip::SiglipVisionConfig;
use super::transformer::{load_blocks, run_blocks, Block, Dense, PatchEmbedding, Tower};
use super::weights::Weights;
use crate::hub::ModelFiles;
use crate::kernels::{Activation, LayerNorm};
use crate::preprocess::{Preprocessor, HALF};
use crate::vqascore::Template;
use crate::{Error, ErrorKind, FusionEncoder, Result, ScoreKind};

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
    #[serde(default, alias = "_sliding_window_pattern")]
    pub sliding_window_pattern: Option<usize>,
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
        let sliding: Vec<bool> = match (&self.layer_types, self.sliding_window_pattern) {
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

    /// The preprocessing of `Gemma3ImageProcessor`: stretched to the tower's size, bilinear,
    /// scaled to [−1, 1].
    pub fn preprocessor(&self) -> Preprocessor {
        Preprocessor::stretch(self.vision_config.image_size, HALF, HALF).bilinear()
    }
}

/// Gemma's RMS norm: in f32, `x / rms(x) · (1 + w)`, back to the input's dtype.
#[derive(Debug, Clone)]
struct RmsNorm {
    scale: Tensor,
    eps: f64,
}

impl RmsNorm {
    fn load(w: &Weights, dim: usize, eps: f64) -> Result<Self> {
        let weight = w.get(dim, "weight")?;
        let scale =
            weight.to_dtype(DType::F32).and_then(|w| w + 1.0).map_err(|e| Error::compute("prepare an RMS norm", e))?;
        Ok(Self { scale, eps })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let dtype = xs.dtype();
        let xs = xs.to_dtype(DType::F32)?;
        let mean_square = xs.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = xs.broadcast_div(&(mean_square + self.eps)?.sqrt()?)?;
        normed.broadcast_mul(&self.scale)?.to_dtype(dtype)
    }
}

/// A layer's rotary tables, `(positions, head_dim / 2)` in f32.
#[derive(Debug, Clone)]
struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    /// `transformers`' default RoPE (`inv_freq = 1 / base^(2i/d)`, divided by a linear
    /// factor), positions times frequencies in f32.
    fn new(head_dim: usize, base: f64, factor: f64, positions: usize, device: &Device) -> Result<Self> {
        let inv_freq: Vec<f32> = (0..head_dim / 2)
            .map(|i| ((1.0 / base.powf((2 * i) as f64 / head_dim as f64)) as f32) / factor as f32)
            .collect();
        let make = || -> candle_core::Result<Rope> {
            let inv = Tensor::from_vec(inv_freq, (1, head_dim / 2), device)?;
            let pos = Tensor::arange(0u32, positions as u32, device)?.to_dtype(DType::F32)?.reshape((positions, 1))?;
            let freqs = pos.broadcast_mul(&inv)?;
            Ok(Rope { cos: freqs.cos()?, sin: freqs.sin()? })
        };
        make().map_err(|e| Error::compute("make the rotary tables", e))
    }

    /// `(b, heads, s, d)` rotated for positions `offset..offset + s`.
    fn apply(&self, xs: &Tensor, offset: usize) -> candle_core::Result<Tensor> {
        let s = xs.dim(2)?;
        let dtype = xs.dtype();
        let cos = self.cos.narrow(0, offset, s)?.to_dtype(dtype)?;
        let sin = self.sin.narrow(0, offset, s)?.to_dtype(dtype)?;
        candle_nn::rotary_emb::rope(&xs.contiguous()?, &cos, &sin)
    }
}

/// One decoder layer's keys and values, `(b, kv_heads, t, head_dim)` each.
type LayerCache = (Tensor, Tensor);

#[derive(Debug, Clone)]
struct DecoderLayer {
    input_norm: RmsNorm,
    q: Dense,
    k: Dense,
    v: Dense,
    o: Dense,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    post_attention_norm: RmsNorm,
    pre_feedforward_norm: RmsNorm,
    gate: Dense,
    up: Dense,
    down: Dense,
    post_feedforward_norm: RmsNorm,
    activation: Activation,
    rope: Rope,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    scale: f64,
    softcap: Option<f64>,
}

impl DecoderLayer {
    fn load(w: &Weights, t: &Gemma3TextConfig, rope: Rope) -> Result<Self> {
        let (h, hd) = (t.hidden_size, t.head_dim);
        let dense = |w: Weights, i: usize, o: usize| Dense::new(w.linear(i, o, false)?);
        let a = w.pp("self_attn");
        let m = w.pp("mlp");
        let norm = |name: &str, dim: usize| RmsNorm::load(&w.pp(name), dim, t.rms_norm_eps);
        Ok(Self {
            input_norm: norm("input_layernorm", h)?,
            q: dense(a.pp("q_proj"), h, t.num_attention_heads * hd)?,
            k: dense(a.pp("k_proj"), h, t.num_key_value_heads * hd)?,
            v: dense(a.pp("v_proj"), h, t.num_key_value_heads * hd)?,
            o: dense(a.pp("o_proj"), t.num_attention_heads * hd, h)?,
            q_norm: RmsNorm::load(&a.pp("q_norm"), hd, t.rms_norm_eps)?,
            k_norm: RmsNorm::load(&a.pp("k_norm"), hd, t.rms_norm_eps)?,
            post_attention_norm: norm("post_attention_layernorm", h)?,
            pre_feedforward_norm: norm("pre_feedforward_layernorm", h)?,
            gate: dense(m.pp("gate_proj"), h, t.intermediate_size)?,
            up: dense(m.pp("up_proj"), h, t.intermediate_size)?,
            down: dense(m.pp("down_proj"), t.intermediate_size, h)?,
            post_feedforward_norm: norm("post_feedforward_layernorm", h)?,
            activation: Activation::parse(&t.hidden_activation)?,
            rope,
            heads: t.num_attention_heads,
            kv_heads: t.num_key_value_heads,
            head_dim: hd,
            scale: t.query_pre_attn_scalar.powf(-0.5),
            softcap: t.attn_logit_softcapping,
        })
    }

    /// `(b, s, hidden)` at positions `offset..offset + s` over `past` keys and values (the
    /// positions before `offset`), `mask` `(s, offset + s)` additive; the layer's output and
    /// its keys and values for all `offset + s` positions.
    fn forward(
        &self,
        xs: &Tensor,
        offset: usize,
        past: Option<&LayerCache>,
        mask: &Tensor,
    ) -> candle_core::Result<(Tensor, LayerCache)> {
        let (b, s, _) = xs.dims3()?;
        let normed = self.input_norm.forward(xs)?;
        let heads = |t: Tensor, n: usize| t.reshape((b, s, n, self.head_dim))?.transpose(1, 2);
        let q = self.q_norm.forward(&heads(self.q.forward(&normed)?, self.heads)?)?;
        let k = self.k_norm.forward(&heads(self.k.forward(&normed)?, self.kv_heads)?)?;
        let v = heads(self.v.forward(&normed)?, self.kv_heads)?.contiguous()?;
        let (q, k) = (self.rope.apply(&q, offset)?, self.rope.apply(&k, offset)?);
        let (k, v) = match past {
            Some((pk, pv)) => (Tensor::cat(&[pk, &k], 2)?, Tensor::cat(&[pv, &v], 2)?),
            None => (k, v),
        };
        let group = self.heads / self.kv_heads;
        let repeat = |t: &Tensor| -> candle_core::Result<Tensor> {
            let (b, kv, len, d) = t.dims4()?;
            t.unsqueeze(2)?.broadcast_as((b, kv, group, len, d))?.reshape((b, kv * group, len, d))
        };
        let dtype = q.dtype();
        let logits = ((q.contiguous()? * self.scale)?.matmul(&repeat(&k)?.t()?.contiguous()?)?).to_dtype(DType::F32)?;
        let logits = match self.softcap {
            Some(cap) => ((logits / cap)?.tanh()? * cap)?,
            None => logits,
        };
        let weights = candle_nn::ops::softmax_last_dim(&logits.broadcast_add(mask)?)?.to_dtype(dtype)?;
        let attended = weights.matmul(&repeat(&v)?.contiguous()?)?.transpose(1, 2)?.reshape((b, s, ()))?;
        let xs = (xs + self.post_attention_norm.forward(&self.o.forward(&attended)?)?)?;
        let normed = self.pre_feedforward_norm.forward(&xs)?;
        let hidden = (self.activation.apply_composed(&self.gate.forward(&normed)?)? * self.up.forward(&normed)?)?;
        let xs = (&xs + self.post_feedforward_norm.forward(&self.down.forward(&hidden)?)?)?;
        Ok((xs, (k, v)))
    }
}

/// Gemma 3's vision tower, projector and language model.
#[derive(Debug, Clone)]
pub struct Gemma3 {
    patch_embedding: PatchEmbedding,
    vision_positions: Tensor,
    vision_blocks: Vec<Block>,
    vision_post_norm: LayerNorm,
    soft_emb_norm: RmsNorm,
    /// `(vision width, hidden)`.
    projection: Tensor,
    embed_tokens: Tensor,
    embed_scale: f64,
    layers: Vec<DecoderLayer>,
    windows: Vec<Option<usize>>,
    final_norm: RmsNorm,
    final_softcap: Option<f64>,
    pool: usize,
    image_tokens: usize,
    image_token: u32,
    device: Device,
}

impl Gemma3 {
    fn from_weights(config: &Gemma3Config, path: &std::path::Path, w: &Weights) -> Result<Self> {
        let (vc, tc) = (&config.vision_config, &config.text_config);
        let vt = Tower::new(
            vc.hidden_size,
            vc.intermediate_size,
            vc.num_hidden_layers,
            vc.num_attention_heads,
            &vc.hidden_act,
            vc.layer_norm_eps,
        )?;
        // The hub's checkpoints name the tower `vision_tower.vision_model`, transformers 5's
        // own saves `vision_tower`; the language model `language_model.model` or
        // `model.language_model`.
        let v = if w.has("vision_tower.vision_model.post_layernorm.weight") {
            w.pp("vision_tower.vision_model")
        } else if w.has("model.vision_tower.post_layernorm.weight") {
            w.pp("model.vision_tower")
        } else {
            w.pp("vision_tower")
        };
        let (t, p) = if w.has("model.language_model.norm.weight") {
            (w.pp("model.language_model"), w.pp("model.multi_modal_projector"))
        } else {
            (w.pp("language_model.model"), w.pp("multi_modal_projector"))
        };
        let patches = (vc.image_size / vc.patch_size).pow(2);
        let positions = tc.max_position_embeddings.min(8192);
        let kinds = tc.layer_kinds(path)?;
        let layers = kinds
            .iter()
            .enumerate()
            .map(|(i, &(_, base, factor))| {
                let rope = Rope::new(tc.head_dim, base, factor, positions, w.device())?;
                DecoderLayer::load(&t.pp(format!("layers.{i}")), tc, rope)
            })
            .collect::<Result<Vec<_>>>()?;
        let per_side = (config.mm_tokens_per_image as f64).sqrt() as usize;
        // √hidden rounded to the weights' dtype, as transformers multiplies by it.
        let embed_scale = Tensor::new((tc.hidden_size as f64).sqrt() as f32, w.device())
            .and_then(|s| s.to_dtype(w.dtype())?.to_dtype(DType::F32)?.to_scalar::<f32>())
            .map_err(|e| Error::compute("round the embedding scale", e))?;
        let embed_scale = f64::from(embed_scale);
        Ok(Self {
            patch_embedding: PatchEmbedding::load(
                &v.pp("embeddings.patch_embedding"),
                vc.hidden_size,
                vc.num_channels,
                vc.patch_size,
                true,
            )?,
            vision_positions: v.get((patches, vc.hidden_size), "embeddings.position_embedding.weight")?,
            vision_blocks: load_blocks(&v, &vt)?,
            vision_post_norm: v.pp("post_layernorm").layer_norm(vc.hidden_size, vc.layer_norm_eps)?,
            soft_emb_norm: RmsNorm::load(&p.pp("mm_soft_emb_norm"), vc.hidden_size, vc.layer_norm_eps)?,
            projection: p.get((vc.hidden_size, tc.hidden_size), "mm_input_projection_weight")?,
            embed_tokens: t.get((tc.vocab_size, tc.hidden_size), "embed_tokens.weight")?,
            embed_scale,
            windows: kinds.iter().map(|k| k.0).collect(),
            layers,
            final_norm: RmsNorm::load(&t.pp("norm"), tc.hidden_size, tc.rms_norm_eps)?,
            final_softcap: tc.final_logit_softcapping,
            pool: (vc.image_size / vc.patch_size) / per_side,
            image_tokens: config.mm_tokens_per_image,
            image_token: config.image_token_index,
            device: w.device().clone(),
        })
    }

    /// The image tokens' embeddings: `(b, 3, H, W)` → `(b, mm_tokens_per_image, hidden)`.
    pub fn image_embeddings(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let xs = self.patch_embedding.forward(pixels)?.broadcast_add(&self.vision_positions)?;
        let xs = self.vision_post_norm.forward(&run_blocks(&self.vision_blocks, xs, None)?)?;
        let (b, n, d) = xs.dims3()?;
        let side = (n as f64).sqrt() as usize;
        let grid = xs.transpose(1, 2)?.reshape((b, d, side, side))?;
        let pooled = grid.avg_pool2d(self.pool)?.flatten_from(2)?.transpose(1, 2)?;
        let normed = self.soft_emb_norm.forward(&pooled.contiguous()?)?;
        normed.broadcast_matmul(&self.projection.to_dtype(normed.dtype())?)
    }

    /// Token embeddings `(b, s, hidden)` of `ids` (b rows of s), scaled by `√hidden`, with the
    /// rows of image tokens taken from `images` `(b, image_tokens, hidden)` in order.
    fn embed(&self, ids: &[Vec<u32>], images: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let (b, s) = (ids.len(), ids.first().map_or(0, Vec::len));
        let flat = Tensor::from_vec(ids.concat(), b * s, &self.device)?;
        let embedded = (self.embed_tokens.index_select(&flat, 0)? * self.embed_scale)?.reshape((b, s, ()))?;
        let Some(images) = images else { return Ok(embedded) };
        let mut rows = Vec::with_capacity(b);
        for (i, row) in ids.iter().enumerate() {
            let mut parts = Vec::new();
            let (mut at, mut next_image) = (0, 0);
            while at < s {
                if row[at] == self.image_token {
                    let run = row[at..].iter().take_while(|&&t| t == self.image_token).count();
                    parts.push(images.get(i)?.narrow(0, next_image, run)?);
                    next_image += run;
                    at += run;
                } else {
                    let run = row[at..].iter().take_while(|&&t| t != self.image_token).count();
                    parts.push(embedded.get(i)?.narrow(0, at, run)?);
                    at += run;
                }
            }
            if next_image != self.image_tokens {
                candle_core::bail!("the prompt holds {next_image} image tokens, the model makes {}", self.image_tokens);
            }
            rows.push(Tensor::cat(&parts, 0)?);
        }
        Tensor::stack(&rows, 0)
    }

    /// The additive attention mask of `s` queries at `offset..` over `offset + s` keys: causal
    /// (within the window), and both ways between positions of one image (`image_span`).
    fn mask(
        &self,
        s: usize,
        offset: usize,
        window: Option<usize>,
        image_span: Option<std::ops::Range<usize>>,
    ) -> candle_core::Result<Tensor> {
        let keys = offset + s;
        let mut values = vec![f32::NEG_INFINITY; s * keys];
        for qi in 0..s {
            let q = offset + qi;
            for k in 0..keys {
                let causal = k <= q && window.is_none_or(|w| q - k < w);
                let same_image = image_span.as_ref().is_some_and(|span| span.contains(&q) && span.contains(&k));
                if causal || same_image {
                    values[qi * keys + k] = 0.0;
                }
            }
        }
        Tensor::from_vec(values, (s, keys), &self.device)
    }

    /// Runs `xs` (b, s, hidden) at `offset` over `past` (one cache per layer); the final
    /// hidden states and every layer's keys and values.
    fn decode(
        &self,
        xs: Tensor,
        offset: usize,
        past: Option<&[LayerCache]>,
        image_span: Option<std::ops::Range<usize>>,
    ) -> candle_core::Result<(Tensor, Vec<LayerCache>)> {
        let s = xs.dim(1)?;
        let mut caches = Vec::with_capacity(self.layers.len());
        let mut masks: Vec<(Option<usize>, Tensor)> = Vec::new();
        let mut xs = xs;
        for (i, layer) in self.layers.iter().enumerate() {
            let window = self.windows[i];
            let mask = match masks.iter().find(|(w, _)| *w == window) {
                Some((_, m)) => m.clone(),
                None => {
                    let m = self.mask(s, offset, window, image_span.clone())?;
                    masks.push((window, m.clone()));
                    m
                }
            };
            let (out, cache) = layer.forward(&xs, offset, past.map(|p| &p[i]), &mask)?;
            xs = out;
            caches.push(cache);
        }
        Ok((self.final_norm.forward(&xs)?, caches))
    }

    /// Log-probabilities over the vocabulary from final hidden states `(…, hidden)`, in f32.
    fn log_probs(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        let logits = hidden.broadcast_matmul(&self.embed_tokens.t()?)?.to_dtype(DType::F32)?;
        let logits = match self.final_softcap {
            Some(cap) => ((logits / cap)?.tanh()? * cap)?,
            None => logits,
        };
        candle_nn::ops::log_softmax(&logits, D::Minus1)
    }
}

/// Gemma 3 with its tokenizer, prompt and preprocessing: a [`FusionEncoder`] whose pair
/// scores are `log P(answer)` ([`ScoreKind::LogProbability`]).
pub struct Gemma3Vqa {
    model: Gemma3,
    tokenizer: tokenizers::Tokenizer,
    template: Template,
    preprocessor: Preprocessor,
    /// The prompt up to and including `<end_of_image>`: the same for every caption.
    prefix: Vec<u32>,
    /// Where the image tokens are in it.
    image_span: std::ops::Range<usize>,
    layers: usize,
    kv_heads: usize,
    head_dim: usize,
    dtype: DType,
}

impl Gemma3Vqa {
    pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Self> {
        Self::with_template(files, dtype, device, Template::t2v_metrics())
    }

    pub fn with_template(files: &ModelFiles, dtype: DType, device: &Device, template: Template) -> Result<Self> {
        let config = Gemma3Config::from_file(&files.config)?;
        let weights = Weights::open(&files.weights, dtype, device)?;
        let model = Gemma3::from_weights(&config, &files.config, &weights)?;
        let tokenizer = tokenizers::Tokenizer::from_file(&files.tokenizer).map_err(|e| {
            Error::new(ErrorKind::Tokenizer, format!("load the tokenizer {}: {e}", files.tokenizer.display()))
        })?;
        let image = (0..config.mm_tokens_per_image).map(|_| "<image_soft_token>").collect::<String>();
        let text = format!("<bos><start_of_turn>user\n\n\n<start_of_image>{image}<end_of_image>");
        let prefix = encode(&tokenizer, &text, &files.tokenizer)?;
        let first = prefix.iter().position(|&t| t == config.image_token_index);
        let count = prefix.iter().filter(|&&t| t == config.image_token_index).count();
        let (Some(first), true, Some(&2)) = (first, count == config.mm_tokens_per_image, prefix.first()) else {
            return Err(Error::new(
                ErrorKind::Tokenizer,
                format!(
                    "use the tokenizer {}: it does not read Gemma 3's special tokens (<bos>, <image_soft_token> as id {})",
                    files.tokenizer.display(),
                    config.image_token_index
                ),
            ));
        };
        let t = &config.text_config;
        let preprocessor = match &files.preprocessor {
            Some(path) => preprocessor_from_file(path, config.preprocessor())?,
            None => config.preprocessor(),
        };
        Ok(Self {
            preprocessor,
            image_span: first..first + count,
            prefix,
            model,
            tokenizer,
            template,
            layers: t.num_hidden_layers,
            kv_heads: t.num_key_value_heads,
            head_dim: t.head_dim,
            dtype,
        })
    }

    /// The prompt's token ids after the image for `caption`, and the answer's ids.
    pub fn caption_ids(&self, caption: &str) -> Result<(Vec<u32>, Vec<u32>)> {
        let question = self.template.question_for(caption);
        let suffix = format!("\n\n{}<end_of_turn>\n<start_of_turn>model\n", question.trim());
        let path = std::path::Path::new("tokenizer.json");
        let answer = encode(&self.tokenizer, &self.template.answer_for(caption), path)?;
        if answer.is_empty() {
            return Err(Error::new(ErrorKind::Tokenizer, "tokenize the answer: it has no tokens"));
        }
        Ok((encode(&self.tokenizer, &suffix, path)?, answer))
    }

    /// The whole prompt's ids for `caption` (prefix and caption part).
    pub fn prompt_ids(&self, caption: &str) -> Result<Vec<u32>> {
        Ok([self.prefix.clone(), self.caption_ids(caption)?.0].concat())
    }

    fn prefix_states(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let b = pixels.dim(0)?;
        let images = self.model.image_embeddings(&pixels.to_dtype(self.dtype)?)?;
        let ids = vec![self.prefix.clone(); b];
        let xs = self.model.embed(&ids, Some(&images))?;
        let (_, caches) = self.model.decode(xs, 0, None, Some(self.image_span.clone()))?;
        // (b, layers · 2 · kv_heads · prefix · head_dim), layer by layer, keys then values.
        let flat: Vec<Tensor> = caches
            .iter()
            .flat_map(|(k, v)| [k.flatten_from(1), v.flatten_from(1)])
            .collect::<candle_core::Result<_>>()?;
        Tensor::cat(&flat, 1)
    }

    fn score_one(&self, state: &Tensor, caption: &str) -> Result<f32> {
        let (suffix, answer) = self.caption_ids(caption)?;
        let run = || -> candle_core::Result<f32> {
            let p = self.prefix.len();
            let per = self.kv_heads * p * self.head_dim;
            let past: Vec<LayerCache> = (0..self.layers)
                .map(|l| {
                    let part = |i: usize| {
                        state.narrow(0, (2 * l + i) * per, per)?.reshape((1, self.kv_heads, p, self.head_dim))
                    };
                    Ok((part(0)?, part(1)?))
                })
                .collect::<candle_core::Result<_>>()?;
            // The answer teacher-forced: every answer token but the last is input too.
            let input = [suffix.clone(), answer[..answer.len() - 1].to_vec()].concat();
            let xs = self.model.embed(std::slice::from_ref(&input), None)?;
            let (hidden, _) = self.model.decode(xs, p, Some(&past), None)?;
            let first = suffix.len() - 1;
            let log_probs = self.model.log_probs(&hidden.narrow(1, first, answer.len())?)?.get(0)?;
            let mut total = 0.0f64;
            for (i, &token) in answer.iter().enumerate() {
                total += f64::from(log_probs.get(i)?.get(token as usize)?.to_scalar::<f32>()?);
            }
            Ok((total / answer.len() as f64) as f32)
        };
        run().map_err(|e| Error::compute("score a caption", e))
    }
}

/// The checkpoint's `preprocessor_config.json` checked against what benchctl reproduces of
/// `Gemma3ImageProcessor` (a square resize to the tower's size, bilinear, no pan-and-scan
/// crops), its mean and std taken from it.
fn preprocessor_from_file(path: &std::path::Path, default: Preprocessor) -> Result<Preprocessor> {
    let value: serde_json::Value = super::read_config(path)?;
    let refuse = |key: &str, what: String| {
        Error::new(ErrorKind::BadConfig, format!("use {} key `{key}`: {what}", path.display()))
    };
    if value.get("do_pan_and_scan").and_then(|v| v.as_bool()) == Some(true) {
        return Err(refuse("do_pan_and_scan", "pan-and-scan crops are not reproduced".into()));
    }
    if let Some(resample) = value.get("resample").and_then(|v| v.as_u64()).filter(|&r| r != 2) {
        return Err(refuse("resample", format!("{resample} is not bilinear (2), the filter benchctl reproduces here")));
    }
    if let Some(size) = value.get("size") {
        let side = |k: &str| size.get(k).and_then(|v| v.as_u64());
        if side("height") != Some(default.size as u64) || side("width") != Some(default.size as u64) {
            return Err(refuse("size", format!("{size} is not the vision tower's {0}×{0}", default.size)));
        }
    }
    let triple = |key: &str, fallback: [f32; 3]| -> Result<[f32; 3]> {
        match value.get(key) {
            None => Ok(fallback),
            Some(v) => serde_json::from_value::<[f32; 3]>(v.clone())
                .map_err(|e| refuse(key, format!("it is not three numbers: {e}"))),
        }
    };
    Ok(Preprocessor { mean: triple("image_mean", default.mean)?, std: triple("image_std", default.std)?, ..default })
}

fn encode(tokenizer: &tokenizers::Tokenizer, text: &str, path: &std::path::Path) -> Result<Vec<u32>> {
    tokenizer
        .encode(text, false)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| Error::new(ErrorKind::Tokenizer, format!("tokenize with {}: {e}", path.display())))
}

impl FusionEncoder for Gemma3Vqa {
    fn device(&self) -> &Device {
        &self.model.device
    }

    fn preprocessor(&self) -> &Preprocessor {
        &self.preprocessor
    }

    /// The keys and values of the prompt up to `<end_of_image>` for each image, flattened.
    fn encode_images(&self, pixels: &Tensor) -> Result<Tensor> {
        self.prefix_states(pixels).map_err(|e| Error::compute("encode the image prompt", e))
    }

    fn score_pairs(&self, image_states: &Tensor, texts: &[&str]) -> Result<Tensor> {
        let mut scores = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let state = image_states.get(i).map_err(|e| Error::compute("read an image state", e))?;
            scores.push(self.score_one(&state, text)?);
        }
        Tensor::from_vec(scores, texts.len(), &self.model.device).map_err(|e| Error::compute("collect scores", e))
    }

    fn score_kind(&self) -> ScoreKind {
        ScoreKind::LogProbability
    }

    fn shortlister(&self) -> Option<&dyn crate::DualEncoder> {
        None
    }
}
