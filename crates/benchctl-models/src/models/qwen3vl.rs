//! Qwen3-VL (Qwen Team, 2025, <https://github.com/QwenLM/Qwen3-VL>) as a VQAScore model: the
//! probability that it answers "Yes" when asked whether an image shows a caption
//! ([`crate::vqascore`]), e.g. <https://huggingface.co/Qwen/Qwen3-VL-2B-Instruct>.
//!
//! The prompt and the image are what `t2v_metrics`' Qwen3-VL model builds: one user turn of the
//! image and then the question in the Instruct checkpoints' chat format,
//! `<|im_start|>user\n<|vision_start|>` + one `<|image_pad|>` per merged patch +
//! `<|vision_end|>` + question + `<|im_end|>\n<|im_start|>assistant\n`; the image resized by
//! `qwen_vl_utils` (each at about its own size, see [`Resize::Native`]), not by the
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
//! Attention is causal throughout, so the keys and values of the prompt up to
//! `<|vision_end|>` are each image's state ([`crate::FusionEncoder::encode_images`]), computed
//! once, and each caption runs only its own tokens over them.

use candle_core::{DType, Device, IndexOp, Module, Tensor, D};
use serde::Deserialize;

use super::gemma::{
    answer_ids, encode, load_tokenizer, mean_answer_log_ps, repeat_kv, score_in_groups, LayerCache, LocalVqa,
};
use super::transformer::{fused_self_attention, over_rows, Dense};
use super::weights::Weights;
use crate::hub::ModelFiles;
use crate::kernels::LayerNorm;
use crate::preprocess::{Pipeline, Preprocessor, Resize, HALF, RESCALE_1_255};
use crate::vqascore::Template;
use crate::{Error, ErrorKind, Result};

/// `config.json` of a `Qwen3VLForConditionalGeneration`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Qwen3VlConfig {
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

fn default_eps() -> f64 {
    1e-6
}
fn default_text_activation() -> String {
    "silu".into()
}
fn default_vision_activation() -> String {
    "gelu_pytorch_tanh".into()
}

impl Qwen3VlConfig {
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let config: Self = super::read_config(path)?;
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
        let sections = config.mrope_section();
        if sections.len() != 3 || sections.iter().sum::<usize>() != config.head_dim() / 2 {
            return Err(bad(format!("mrope_section {sections:?} does not split head_dim / 2 in three")));
        }
        Ok(config)
    }

    fn head_dim(&self) -> usize {
        let t = &self.text_config;
        t.head_dim.unwrap_or(t.hidden_size / t.num_attention_heads)
    }

    fn text_rope(&self) -> Option<&TextRope> {
        self.text_config.rope_parameters.as_ref().or(self.text_config.rope_scaling.as_ref())
    }

    fn rope_theta(&self) -> f64 {
        self.text_rope().and_then(|r| r.rope_theta).or(self.text_config.rope_theta).unwrap_or(5_000_000.0)
    }

    fn mrope_section(&self) -> Vec<usize> {
        self.text_rope().and_then(|r| r.mrope_section.clone()).unwrap_or_else(|| vec![24, 20, 20])
    }

    fn interleaved(&self) -> bool {
        self.text_rope().and_then(|r| r.mrope_interleaved).unwrap_or(true)
    }

    /// `qwen_vl_utils`' resize (what `t2v_metrics` runs) with the checkpoint's mean and std:
    /// sides in multiples of the patch size × the merge size, 4 to 16,384 merged tokens.
    pub fn preprocessor(&self) -> Preprocessor {
        let factor = self.vision_config.patch_size * self.vision_config.spatial_merge_size;
        Preprocessor {
            size: factor,
            resize: Resize::Native { factor, min_pixels: 4 * factor * factor, max_pixels: 16_384 * factor * factor },
            mean: HALF,
            std: HALF,
            pipeline: Pipeline::Transformers { rescale_factor: RESCALE_1_255 },
            filter: crate::preprocess::Filter::Bicubic,
        }
    }
}

/// Qwen's RMS norm, `x / rms(x) · w` (not Gemma's `1 + w`), in f32 as candle's fused kernel
/// computes it, back to the input's dtype (transformers rounds before multiplying by `w`: in
/// half precision the two differ in the last bit).
#[derive(Debug, Clone)]
struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    fn load(w: &Weights, dim: usize, eps: f64) -> Result<Self> {
        let weight =
            w.get(dim, "weight")?.to_dtype(DType::F32).map_err(|e| Error::compute("prepare an RMS norm", e))?;
        Ok(Self { weight, eps })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let x = xs.to_dtype(DType::F32)?.contiguous()?;
        candle_nn::ops::rms_norm(&x, &self.weight, self.eps as f32)?.to_dtype(xs.dtype())
    }
}

/// The softmax attention of `(b, heads, s, d)` queries over `(b, heads, t, d)` keys and values,
/// `mask` `(s, t)` additive if any; weights in f32, the output `(b, s, heads · d)`.
fn attend(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
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

/// One vision block: pre-norm attention with a 2-D rotary embedding, pre-norm GELU MLP.
#[derive(Debug, Clone)]
struct VisionBlock {
    norm1: LayerNorm,
    norm2: LayerNorm,
    qkv: Dense,
    proj: Dense,
    fc1: Dense,
    fc2: Dense,
    heads: usize,
}

impl VisionBlock {
    fn load(w: &Weights, v: &Qwen3VlVisionConfig) -> Result<Self> {
        let (h, i) = (v.hidden_size, v.intermediate_size);
        let dense = |w: Weights, i: usize, o: usize| Dense::new(w.linear(i, o, true)?);
        Ok(Self {
            norm1: w.pp("norm1").layer_norm(h, 1e-6)?,
            norm2: w.pp("norm2").layer_norm(h, 1e-6)?,
            qkv: dense(w.pp("attn.qkv"), h, 3 * h)?,
            proj: dense(w.pp("attn.proj"), h, h)?,
            fc1: dense(w.pp("mlp.linear_fc1"), h, i)?,
            fc2: dense(w.pp("mlp.linear_fc2"), i, h)?,
            heads: v.num_heads,
        })
    }

    /// `(n, hidden)` patches of one image, `cos`/`sin` `(n, head_dim / 2)` in f32.
    fn forward(&self, xs: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
        let (n, hidden) = xs.dims2()?;
        let head_dim = hidden / self.heads;
        let qkv = self.qkv.forward(&self.norm1.forward(xs)?)?.reshape((n, 3, self.heads, head_dim))?;
        let part = |i: usize| qkv.i((.., i))?.transpose(0, 1)?.unsqueeze(0)?.contiguous();
        let dtype = xs.dtype();
        let rotate = |t: Tensor| candle_nn::rotary_emb::rope(&t.to_dtype(DType::F32)?, cos, sin)?.to_dtype(dtype);
        let (q, k, v) = (rotate(part(0)?)?, rotate(part(1)?)?, part(2)?);
        // The rotated projection fused again, for the tuned kernels (the CUDA ones, the CPU
        // ones with the packed GEMM over 1,024 patches or more); composed where they do not run.
        let tokens = |t: &Tensor| t.transpose(1, 2)?.reshape((1, n, hidden));
        let fused = Tensor::cat(&[tokens(&q)?, tokens(&k)?, tokens(&v)?], 2)?.contiguous()?;
        let attended = match fused_self_attention(&fused, self.heads, None, None)? {
            Some(attended) => attended.squeeze(0)?,
            None => attend(&q, &k, &v, (head_dim as f64).powf(-0.5), None)?.squeeze(0)?,
        };
        let xs = (xs + self.proj.forward(&attended)?)?;
        let hidden = self.fc1.forward(&self.norm2.forward(&xs)?)?.gelu()?;
        &xs + self.fc2.forward(&hidden)?
    }
}

/// The patch merger: 2 × 2 neighbouring patches concatenated, normed (before concatenating for
/// the final merger, after for DeepStack's) and projected to the decoder's width by a GELU MLP.
#[derive(Debug, Clone)]
struct Merger {
    norm: LayerNorm,
    norm_after_concat: bool,
    fc1: Dense,
    fc2: Dense,
    unit: usize,
}

impl Merger {
    fn load(w: &Weights, v: &Qwen3VlVisionConfig, norm_after_concat: bool) -> Result<Self> {
        let unit = v.spatial_merge_size * v.spatial_merge_size;
        let wide = v.hidden_size * unit;
        let dense = |w: Weights, i: usize, o: usize| Dense::new(w.linear(i, o, true)?);
        Ok(Self {
            norm: w.pp("norm").layer_norm(if norm_after_concat { wide } else { v.hidden_size }, 1e-6)?,
            norm_after_concat,
            fc1: dense(w.pp("linear_fc1"), wide, wide)?,
            fc2: dense(w.pp("linear_fc2"), wide, v.out_hidden_size)?,
            unit,
        })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let (n, hidden) = xs.dims2()?;
        let concat = |t: &Tensor| t.reshape((n / self.unit, hidden * self.unit));
        let xs =
            if self.norm_after_concat { self.norm.forward(&concat(xs)?)? } else { concat(&self.norm.forward(xs)?)? };
        self.fc2.forward(&self.fc1.forward(&xs)?.gelu_erf()?)
    }
}

/// The vision tower: patch embedding, resampled learned positions, blocks, the merger and
/// DeepStack's mergers.
#[derive(Debug, Clone)]
struct VisionTower {
    /// The patch embedding with its two (identical) frames' kernels summed: `(hidden, 3·p·p)`.
    patch: Dense,
    positions: Tensor,
    side: usize,
    blocks: Vec<VisionBlock>,
    merger: Merger,
    deepstack: Vec<(usize, Merger)>,
    patch_size: usize,
    merge: usize,
    inv_freq: Vec<f32>,
}

/// One image through the tower: its merged tokens `(tokens, width)`, DeepStack's features, and
/// its merged grid (rows, columns).
struct VisionOutput {
    tokens: Tensor,
    deepstack: Vec<Tensor>,
    grid: (usize, usize),
}

impl VisionTower {
    fn load(w: &Weights, v: &Qwen3VlVisionConfig) -> Result<Self> {
        let (h, p, t) = (v.hidden_size, v.patch_size, v.temporal_patch_size);
        let kernel = w.get((h, 3, t, p, p), "patch_embed.proj.weight")?;
        // An image is `t` copies of one frame: the kernel's frames act as their sum.
        let summed = kernel
            .sum(2)
            .and_then(|k| k.reshape((h, 3 * p * p)))
            .map_err(|e| Error::compute("sum the patch kernel", e))?;
        let patch = Dense::from_weights(summed, Some(w.get(h, "patch_embed.proj.bias")?))?;
        let side = (v.num_position_embeddings as f64).sqrt() as usize;
        let head_dim = h / v.num_heads;
        let theta = v.rope_parameters.as_ref().and_then(|r| r.rope_theta).unwrap_or(10_000.0);
        // transformers' axial table: a quarter of the head per axis, `1 / θ^(2i / (d/2))`.
        let spatial = head_dim / 2;
        let inv_freq = (0..spatial).step_by(2).map(|i| 1.0 / (theta as f32).powf(i as f32 / spatial as f32)).collect();
        Ok(Self {
            patch,
            positions: w.get((v.num_position_embeddings, h), "pos_embed.weight")?,
            side,
            blocks: (0..v.depth).map(|i| VisionBlock::load(&w.pp(format!("blocks.{i}")), v)).collect::<Result<_>>()?,
            merger: Merger::load(&w.pp("merger"), v, false)?,
            deepstack: v
                .deepstack_visual_indexes
                .iter()
                .enumerate()
                .map(|(i, &block)| Ok((block, Merger::load(&w.pp(format!("deepstack_merger_list.{i}")), v, true)?)))
                .collect::<Result<_>>()?,
            patch_size: p,
            merge: v.spatial_merge_size,
            inv_freq,
        })
    }

    /// Each patch's (row, column) in the order the tower sees them: 2 × 2 blocks row by row.
    fn patch_order(&self, rows: usize, cols: usize) -> Vec<(usize, usize)> {
        let m = self.merge;
        let mut order = Vec::with_capacity(rows * cols);
        for block_row in 0..rows / m {
            for block_col in 0..cols / m {
                for r in 0..m {
                    for c in 0..m {
                        order.push((block_row * m + r, block_col * m + c));
                    }
                }
            }
        }
        order
    }

    /// The learned positions resampled to a `rows × cols` grid (bilinear, corners aligned), per
    /// patch in `order`, as `transformers` gathers and weighs the table's four nearest rows.
    fn positions_for(&self, rows: usize, cols: usize, order: &[(usize, usize)]) -> candle_core::Result<Tensor> {
        let side = self.side;
        let taps = |index: usize, size: usize| -> [(usize, f32); 2] {
            let src = index as f32 * (side - 1) as f32 / (size.max(2) - 1) as f32;
            let floor = src.floor();
            let frac = src - floor;
            let at = |o: usize| (floor as usize + o).min(side - 1);
            [(at(0), 1.0 - frac), (at(1), frac)]
        };
        let (mut indices, mut weights) = (Vec::with_capacity(order.len() * 4), Vec::with_capacity(order.len() * 4));
        for &(r, c) in order {
            for (hi, hw) in taps(r, rows) {
                for (wi, ww) in taps(c, cols) {
                    indices.push((hi * side + wi) as u32);
                    weights.push(hw.max(0.0) * ww.max(0.0));
                }
            }
        }
        let device = self.positions.device();
        let n = order.len();
        let gathered = self.positions.index_select(&Tensor::from_vec(indices, n * 4, device)?, 0)?;
        // In f32, as torch promotes the table's rows times the f32 weights, then the tower's dtype.
        let weights = Tensor::from_vec(weights, (n, 4, 1), device)?;
        let summed = gathered.to_dtype(DType::F32)?.reshape((n, 4, ()))?.broadcast_mul(&weights)?.sum(1)?;
        summed.to_dtype(self.positions.dtype())
    }

    /// The rotary tables `(n, head_dim / 2)` of patches at `order`: rows' frequencies, then
    /// columns'.
    fn rotary(&self, order: &[(usize, usize)], device: &Device) -> candle_core::Result<(Tensor, Tensor)> {
        let quarter = self.inv_freq.len();
        let mut freqs = Vec::with_capacity(order.len() * 2 * quarter);
        for &(r, c) in order {
            freqs.extend(self.inv_freq.iter().map(|f| r as f32 * f));
            freqs.extend(self.inv_freq.iter().map(|f| c as f32 * f));
        }
        let freqs = Tensor::from_vec(freqs, (order.len(), 2 * quarter), device)?;
        Ok((freqs.cos()?, freqs.sin()?))
    }

    /// One preprocessed image `(3, height, width)`.
    fn forward(&self, pixels: &Tensor) -> candle_core::Result<VisionOutput> {
        let (_, height, width) = pixels.dims3()?;
        let (p, m) = (self.patch_size, self.merge);
        if height % (p * m) != 0 || width % (p * m) != 0 {
            candle_core::bail!("a {width}×{height} image does not split into {m}×{m} blocks of {p}-pixel patches");
        }
        let (rows, cols) = (height / p, width / p);
        // (3, H, W) → patches in 2 × 2 blocks, each patch's values (channel, row, column).
        let patches = pixels
            .reshape(vec![3, rows / m, m, p, cols / m, m, p])?
            .permute(vec![1, 4, 2, 5, 0, 3, 6])?
            .reshape((rows * cols, 3 * p * p))?;
        let order = self.patch_order(rows, cols);
        let xs = self.patch.forward(&patches.to_dtype(self.positions.dtype())?)?;
        let mut xs = (xs + self.positions_for(rows, cols, &order)?)?;
        let (cos, sin) = self.rotary(&order, pixels.device())?;
        let mut deepstack = Vec::with_capacity(self.deepstack.len());
        for (i, block) in self.blocks.iter().enumerate() {
            xs = block.forward(&xs, &cos, &sin)?;
            for (_, merger) in self.deepstack.iter().filter(|(at, _)| *at == i) {
                deepstack.push(merger.forward(&xs)?);
            }
        }
        Ok(VisionOutput { tokens: self.merger.forward(&xs)?, deepstack, grid: (rows / m, cols / m) })
    }
}

/// One decoder layer: RMS-normed attention with normed queries and keys and multimodal rotary
/// positions, then an RMS-normed SwiGLU MLP.
#[derive(Debug, Clone)]
struct DecoderLayer {
    input_norm: RmsNorm,
    q: Dense,
    k: Dense,
    v: Dense,
    o: Dense,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    post_norm: RmsNorm,
    gate: Dense,
    up: Dense,
    down: Dense,
}

impl DecoderLayer {
    fn load(w: &Weights, t: &Qwen3VlTextConfig, head_dim: usize) -> Result<Self> {
        let (h, i) = (t.hidden_size, t.intermediate_size);
        let dense = |w: Weights, i: usize, o: usize| Dense::new(w.linear(i, o, false)?);
        let (a, m) = (w.pp("self_attn"), w.pp("mlp"));
        Ok(Self {
            input_norm: RmsNorm::load(&w.pp("input_layernorm"), h, t.rms_norm_eps)?,
            q: dense(a.pp("q_proj"), h, t.num_attention_heads * head_dim)?,
            k: dense(a.pp("k_proj"), h, t.num_key_value_heads * head_dim)?,
            v: dense(a.pp("v_proj"), h, t.num_key_value_heads * head_dim)?,
            o: dense(a.pp("o_proj"), t.num_attention_heads * head_dim, h)?,
            q_norm: RmsNorm::load(&a.pp("q_norm"), head_dim, t.rms_norm_eps)?,
            k_norm: RmsNorm::load(&a.pp("k_norm"), head_dim, t.rms_norm_eps)?,
            post_norm: RmsNorm::load(&w.pp("post_attention_layernorm"), h, t.rms_norm_eps)?,
            gate: dense(m.pp("gate_proj"), h, i)?,
            up: dense(m.pp("up_proj"), h, i)?,
            down: dense(m.pp("down_proj"), i, h)?,
        })
    }
}

/// The decoder, its output layer (tied to the embeddings unless the checkpoint has its own),
/// and its multimodal rotary frequencies.
#[derive(Debug, Clone)]
struct Decoder {
    embed_tokens: Tensor,
    lm_head: Option<Tensor>,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    inv_freq: Vec<f32>,
    /// Which of (time, row, column) each rotary frequency reads.
    axis_of: Vec<usize>,
    max_positions: usize,
}

/// A run of tokens' positions, one (time, row, column) per token.
type Positions = [Vec<u32>; 3];

impl Decoder {
    fn load(w: &Weights, lm_head: Option<Tensor>, config: &Qwen3VlConfig) -> Result<Self> {
        let t = &config.text_config;
        let head_dim = config.head_dim();
        let half = head_dim / 2;
        let theta = config.rope_theta();
        let inv_freq = (0..half).map(|i| 1.0 / (theta as f32).powf((2 * i) as f32 / head_dim as f32)).collect();
        let sections = config.mrope_section();
        // Interleaved (Qwen3-VL): t, h, w, t, h, w, … up to each section's share, the rest t;
        // otherwise (Qwen2-VL's layout) one contiguous run per axis.
        let axis_of = (0..half)
            .map(|j| match config.interleaved() {
                true if j % 3 == 1 && j < 3 * sections[1] => 1,
                true if j % 3 == 2 && j < 3 * sections[2] => 2,
                true => 0,
                false if j < sections[0] => 0,
                false if j < sections[0] + sections[1] => 1,
                false => 2,
            })
            .collect();
        Ok(Self {
            embed_tokens: w.get((t.vocab_size, t.hidden_size), "embed_tokens.weight")?,
            lm_head,
            layers: (0..t.num_hidden_layers)
                .map(|i| DecoderLayer::load(&w.pp(format!("layers.{i}")), t, head_dim))
                .collect::<Result<_>>()?,
            norm: RmsNorm::load(&w.pp("norm"), t.hidden_size, t.rms_norm_eps)?,
            heads: t.num_attention_heads,
            kv_heads: t.num_key_value_heads,
            head_dim,
            inv_freq,
            axis_of,
            max_positions: t.max_position_embeddings,
        })
    }

    fn embed(&self, ids: &[Vec<u32>]) -> candle_core::Result<Tensor> {
        let (b, s) = (ids.len(), ids.first().map_or(0, Vec::len));
        let flat = Tensor::from_vec(ids.concat(), b * s, self.embed_tokens.device())?;
        self.embed_tokens.index_select(&flat, 0)?.reshape((b, s, ()))
    }

    /// The rotary tables `(s, head_dim / 2)` of tokens at `positions`, in `dtype`.
    fn rotary(&self, positions: &Positions, dtype: DType, device: &Device) -> candle_core::Result<(Tensor, Tensor)> {
        let s = positions[0].len();
        if let Some(&last) = positions.iter().flatten().max() {
            if last as usize >= self.max_positions {
                candle_core::bail!("position {last} is past the {} the model was built for", self.max_positions);
            }
        }
        let per_token =
            |i: usize| self.inv_freq.iter().zip(&self.axis_of).map(move |(f, &axis)| positions[axis][i] as f32 * f);
        let freqs: Vec<f32> = (0..s).flat_map(per_token).collect();
        let freqs = Tensor::from_vec(freqs, (s, self.inv_freq.len()), device)?;
        Ok((freqs.cos()?.to_dtype(dtype)?, freqs.sin()?.to_dtype(dtype)?))
    }

    /// Runs `xs` `(b, s, hidden)` at `positions` after `past` (causal, every past position
    /// visible), adding `deepstack[l]` to the rows `image_rows` after layer `l`; the final
    /// hidden states and every layer's keys and values.
    fn decode(
        &self,
        xs: Tensor,
        positions: &Positions,
        past: Option<&[LayerCache]>,
        deepstack: Option<(&[Tensor], std::ops::Range<usize>)>,
    ) -> candle_core::Result<(Tensor, Vec<LayerCache>)> {
        let (b, s, _) = xs.dims3()?;
        let (cos, sin) = self.rotary(positions, xs.dtype(), xs.device())?;
        let offset = past.map_or(Ok(0), |p| p[0].0.dim(2))?;
        let mask: Vec<f32> = (0..s)
            .flat_map(|q| (0..offset + s).map(move |k| if k <= offset + q { 0.0 } else { f32::NEG_INFINITY }))
            .collect();
        let mask = Tensor::from_vec(mask, (s, offset + s), xs.device())?;
        let group = self.heads / self.kv_heads;
        let repeat = |t: &Tensor| repeat_kv(t, group);
        let mut xs = xs;
        let mut caches = Vec::with_capacity(self.layers.len());
        for (l, layer) in self.layers.iter().enumerate() {
            let normed = layer.input_norm.forward(&xs)?;
            let heads = |t: Tensor, n: usize| t.reshape((b, s, n, self.head_dim))?.transpose(1, 2)?.contiguous();
            let q = layer.q_norm.forward(&heads(layer.q.forward(&normed)?, self.heads)?)?;
            let k = layer.k_norm.forward(&heads(layer.k.forward(&normed)?, self.kv_heads)?)?;
            let v = heads(layer.v.forward(&normed)?, self.kv_heads)?;
            let q = candle_nn::rotary_emb::rope(&q.contiguous()?, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope(&k.contiguous()?, &cos, &sin)?;
            let (k, v) = match past {
                Some(past) => (Tensor::cat(&[&past[l].0, &k], 2)?, Tensor::cat(&[&past[l].1, &v], 2)?),
                None => (k, v),
            };
            let attended = attend(&q, &repeat(&k)?, &repeat(&v)?, (self.head_dim as f64).powf(-0.5), Some(&mask))?;
            xs = (&xs + layer.o.forward(&attended)?)?;
            let normed = layer.post_norm.forward(&xs)?;
            let hidden = (layer.gate.forward(&normed)?.silu()? * layer.up.forward(&normed)?)?;
            xs = (&xs + layer.down.forward(&hidden)?)?;
            if let Some((features, rows)) = &deepstack {
                if let Some(feature) = features.get(l) {
                    let image = (xs.narrow(1, rows.start, rows.len())?
                        + feature.unsqueeze(0)?.broadcast_as((b, rows.len(), feature.dim(1)?))?)?;
                    let before = xs.narrow(1, 0, rows.start)?;
                    let after = xs.narrow(1, rows.end, s - rows.end)?;
                    xs = Tensor::cat(&[&before, &image, &after], 1)?;
                }
            }
            caches.push((k, v));
        }
        Ok((self.norm.forward(&xs)?, caches))
    }

    /// Each row's mean log-probability of its answer (one length for all rows), the first
    /// answer token predicted at position `first` of the final states `(b, s, hidden)`.
    fn answer_log_ps(&self, hidden: &Tensor, first: usize, answers: &[&[u32]]) -> candle_core::Result<Vec<f32>> {
        let n = answers.first().map_or(0, |a| a.len());
        let table = match &self.lm_head {
            Some(head) => head.t()?,
            None => self.embed_tokens.t()?,
        };
        let logits = over_rows(&hidden.narrow(1, first, n)?, |rows| rows.matmul(&table))?.to_dtype(DType::F32)?;
        mean_answer_log_ps(&candle_nn::ops::log_softmax(&logits, D::Minus1)?, answers)
    }
}

/// Qwen3-VL scored by VQAScore.
pub struct Qwen3VlVqa {
    vision: VisionTower,
    decoder: Decoder,
    tokenizer: tokenizers::Tokenizer,
    template: Template,
    preprocessor: Preprocessor,
    /// `<|im_start|>user\n<|vision_start|>`.
    before_image: Vec<u32>,
    image_token: u32,
    vision_end: u32,
    dtype: DType,
    device: Device,
}

impl Qwen3VlVqa {
    pub fn load(files: &ModelFiles, dtype: DType, device: &Device) -> Result<Self> {
        Self::with_template(files, dtype, device, Template::t2v_metrics())
    }

    pub fn with_template(files: &ModelFiles, dtype: DType, device: &Device, template: Template) -> Result<Self> {
        let config = Qwen3VlConfig::from_file(&files.config)?;
        let weights = Weights::open(&files.weights, dtype, device)?;
        let (t, v) = (&config.text_config, &config.vision_config);
        let lm_head = if weights.has("lm_head.weight") {
            Some(weights.get((t.vocab_size, t.hidden_size), "lm_head.weight")?)
        } else {
            None
        };
        let vision = VisionTower::load(&weights.pp("model.visual"), v)?;
        let decoder = Decoder::load(&weights.pp("model.language_model"), lm_head, &config)?;
        weights.check_every_tensor_used("qwen3_vl", &[])?;
        let tokenizer = load_tokenizer(&files.tokenizer)?;
        let before_image = encode(&tokenizer, "<|im_start|>user\n<|vision_start|>")?;
        let reads = |name: &str, id: u32| tokenizer.token_to_id(name) == Some(id);
        if !(reads("<|image_pad|>", config.image_token_id)
            && reads("<|vision_end|>", config.vision_end_token_id)
            && before_image.last() == Some(&config.vision_start_token_id))
        {
            return Err(Error::new(
                ErrorKind::Tokenizer,
                format!(
                    "use the tokenizer {}: it does not read Qwen3-VL's special tokens (<|vision_start|>, <|image_pad|> as id {})",
                    files.tokenizer.display(),
                    config.image_token_id
                ),
            ));
        }
        let mut preprocessor = config.preprocessor();
        if let Some(path) = &files.preprocessor {
            let value: serde_json::Value = super::read_config(path)?;
            let triple = |key: &str| value.get(key).and_then(|v| serde_json::from_value::<[f32; 3]>(v.clone()).ok());
            preprocessor.mean = triple("image_mean").unwrap_or(HALF);
            preprocessor.std = triple("image_std").unwrap_or(HALF);
        }
        Ok(Self {
            vision,
            decoder,
            tokenizer,
            template,
            preprocessor,
            before_image,
            image_token: config.image_token_id,
            vision_end: config.vision_end_token_id,
            dtype,
            device: device.clone(),
        })
    }

    /// The prompt's ids before the image, the image's (`tokens` image pads), and after it up
    /// to `<|vision_end|>`.
    fn image_prompt(&self, tokens: usize) -> Vec<u32> {
        let mut ids = self.before_image.clone();
        ids.extend(std::iter::repeat_n(self.image_token, tokens));
        ids.push(self.vision_end);
        ids
    }

    /// The prompt's ids after `<|vision_end|>` for `caption`, and the answer's ids.
    pub fn caption_ids(&self, caption: &str) -> Result<(Vec<u32>, Vec<u32>)> {
        let suffix = format!("{}<|im_end|>\n<|im_start|>assistant\n", self.template.question_for(caption));
        Ok((encode(&self.tokenizer, &suffix)?, answer_ids(&self.tokenizer, &self.template, caption)?))
    }

    /// The whole prompt's ids for an image of `tokens` merged patches and `caption`.
    pub fn prompt_ids(&self, tokens: usize, caption: &str) -> Result<Vec<u32>> {
        Ok([self.image_prompt(tokens), self.caption_ids(caption)?.0].concat())
    }

    /// One image's state: the prompt's keys and values up to `<|vision_end|>`, flattened in
    /// f32 (layer by layer, keys then values), then the position the caption starts at.
    fn image_state(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let image = self.vision.forward(pixels)?;
        let (rows, cols) = image.grid;
        let ids = self.image_prompt(rows * cols);
        let start = self.before_image.len();
        // Text before the image counts 0, 1, …; the image's tokens share time `start` and count
        // rows and columns from it; `<|vision_end|>` resumes after the larger side.
        let mut positions: Positions = std::array::from_fn(|_| (0..start as u32).collect());
        for r in 0..rows {
            for c in 0..cols {
                let at = [start, start + r, start + c];
                positions.iter_mut().zip(at).for_each(|(axis, p)| axis.push(p as u32));
            }
        }
        let after = (start + rows.max(cols)) as u32;
        positions.iter_mut().for_each(|axis| axis.push(after));
        let xs = self.decoder.embed(std::slice::from_ref(&ids))?;
        let image_rows = start..start + rows * cols;
        let embedded = Tensor::cat(
            &[
                &xs.narrow(1, 0, start)?,
                &image.tokens.to_dtype(xs.dtype())?.unsqueeze(0)?,
                &xs.narrow(1, image_rows.end, 1)?,
            ],
            1,
        )?;
        let deepstack: Vec<Tensor> =
            image.deepstack.iter().map(|f| f.to_dtype(xs.dtype())).collect::<candle_core::Result<_>>()?;
        let (_, caches) = self.decoder.decode(embedded, &positions, None, Some((&deepstack, image_rows)))?;
        let mut flat: Vec<Tensor> = Vec::with_capacity(2 * caches.len() + 1);
        for (k, v) in &caches {
            flat.push(k.flatten_from(1)?.to_dtype(DType::F32)?);
            flat.push(v.flatten_from(1)?.to_dtype(DType::F32)?);
        }
        flat.push(Tensor::new(&[[after as f32 + 1.0]], &self.device)?);
        Tensor::cat(&flat, 1)
    }

    /// Rows of image states back into per-layer caches and the caption's first position.
    fn unflatten(&self, states: &Tensor) -> candle_core::Result<(Vec<LayerCache>, u32)> {
        let (b, width) = states.dims2()?;
        let layers = self.decoder.layers.len();
        let per_position = self.decoder.kv_heads * self.decoder.head_dim;
        let cached = width.saturating_sub(1);
        if width == 0 || cached % (2 * layers * per_position) != 0 {
            candle_core::bail!("an image state of {width} values does not fit this model");
        }
        let len = cached / (2 * layers * per_position);
        let per = len * per_position;
        let caches = (0..layers)
            .map(|l| {
                let part = |i: usize| {
                    states
                        .narrow(1, (2 * l + i) * per, per)?
                        .reshape((b, self.decoder.kv_heads, len, self.decoder.head_dim))?
                        .to_dtype(self.dtype)
                };
                Ok((part(0)?, part(1)?))
            })
            .collect::<candle_core::Result<_>>()?;
        let first = states.i((0, cached))?.to_scalar::<f32>()? as u32;
        Ok((caches, first))
    }

    /// Pairs' scores, those of one caption length in one batch over their images' states
    /// (the states of one batch come from images of one size).
    fn score_captions(&self, image_states: &Tensor, texts: &[&str]) -> Result<Vec<f32>> {
        let ids: Vec<(Vec<u32>, Vec<u32>)> = texts.iter().map(|t| self.caption_ids(t)).collect::<Result<_>>()?;
        let inputs: Vec<Vec<u32>> = ids.iter().map(|(s, a)| [s.as_slice(), &a[..a.len() - 1]].concat()).collect();
        let keys: Vec<(usize, usize)> = ids.iter().map(|(s, a)| (s.len(), a.len())).collect();
        score_in_groups(&keys, |group| {
            let rows = Tensor::new(group.iter().map(|&i| i as u32).collect::<Vec<_>>(), image_states.device())?;
            let (past, first) = self.unflatten(&image_states.index_select(&rows, 0)?)?;
            let batch: Vec<Vec<u32>> = group.iter().map(|&i| inputs[i].clone()).collect();
            let s = batch[0].len() as u32;
            let positions: Positions = std::array::from_fn(|_| (first..first + s).collect());
            let xs = self.decoder.embed(&batch)?;
            let (hidden, _) = self.decoder.decode(xs, &positions, Some(&past), None)?;
            let answers: Vec<&[u32]> = group.iter().map(|&i| ids[i].1.as_slice()).collect();
            self.decoder.answer_log_ps(&hidden, ids[group[0]].0.len() - 1, &answers)
        })
    }
}

impl LocalVqa for Qwen3VlVqa {
    fn weights_device(&self) -> &Device {
        &self.device
    }

    fn image_preprocessor(&self) -> &Preprocessor {
        &self.preprocessor
    }

    /// `(b, 3, height, width)` images of one size → one state row each.
    fn image_states(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let rows =
            (0..pixels.dim(0)?).map(|i| self.image_state(&pixels.get(i)?)).collect::<candle_core::Result<Vec<_>>>()?;
        Tensor::cat(&rows, 0)
    }

    fn score_batched(&self, image_states: &Tensor, texts: &[&str]) -> Result<Vec<f32>> {
        self.score_captions(image_states, texts)
    }
}
