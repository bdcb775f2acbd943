//! Qwen3-VL's vision tower: 16-pixel patches of two identical frames in 2 × 2 blocks, learned
//! positions resampled to each image's grid, a 2-D rotary embedding, and DeepStack's mergers.

use candle_core::{DType, Device, IndexOp, Module, Tensor};

use super::attend;
use super::config::Qwen3VlVisionConfig;
use crate::kernels::LayerNorm;
use crate::models::transformer::{fused_self_attention, Dense};
use crate::models::weights::Weights;
use crate::{Error, Result};

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
pub(super) struct VisionTower {
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
#[derive(Debug, Clone)]
pub(crate) struct VisionOutput {
    pub tokens: Tensor,
    pub deepstack: Vec<Tensor>,
    pub grid: (usize, usize),
}

impl QwenVision for VisionTower {
    fn forward(&self, pixels: &Tensor) -> candle_core::Result<VisionOutput> {
        self.encode(pixels)
    }
}

impl VisionTower {
    pub(super) fn load(w: &Weights, v: &Qwen3VlVisionConfig) -> Result<Self> {
        let (h, p, t) = (v.hidden_size, v.patch_size, v.temporal_patch_size);
        let patch = Dense::from_weights(summed_patch_kernel(w, h, t, p)?, Some(w.get(h, "patch_embed.proj.bias")?))?;
        let side = (v.num_position_embeddings as f64).sqrt() as usize;
        let theta = v.rope_parameters.as_ref().and_then(|r| r.rope_theta).unwrap_or(10_000.0);
        let inv_freq = axial_inv_freq(h / v.num_heads, theta);
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

    /// One preprocessed image `(3, height, width)`.
    fn encode(&self, pixels: &Tensor) -> candle_core::Result<VisionOutput> {
        let (m, (patches, rows, cols)) = (self.merge, patchify(pixels, self.patch_size, self.merge)?);
        let order = patch_order(rows, cols, m);
        let xs = self.patch.forward(&patches.to_dtype(self.positions.dtype())?)?;
        let mut xs = (xs + self.positions_for(rows, cols, &order)?)?;
        let (cos, sin) = rotary(&self.inv_freq, &order, pixels.device())?;
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

/// A Qwen-VL family's vision tower: one preprocessed image `(3, height, width)` to its merged
/// tokens (Qwen3-VL's [`VisionTower`], Qwen2.5-VL's windowed one).
pub(crate) trait QwenVision: Send + Sync {
    fn forward(&self, pixels: &Tensor) -> candle_core::Result<VisionOutput>;
}

/// The patch embedding's `(hidden, 3, t, p, p)` kernel as a `(hidden, 3·p·p)` product: an image
/// is `t` copies of one frame, so the kernel's frames act as their sum.
pub(crate) fn summed_patch_kernel(w: &Weights, hidden: usize, t: usize, p: usize) -> Result<Tensor> {
    let kernel = w.get((hidden, 3, t, p, p), "patch_embed.proj.weight")?;
    kernel.sum(2).and_then(|k| k.reshape((hidden, 3 * p * p))).map_err(|e| Error::compute("sum the patch kernel", e))
}

/// `(3, H, W)` pixels as patches in `m × m` blocks, each patch's values (channel, row, column)
/// as the processor flattens them: `(rows · cols, 3 · p · p)`, and the patch grid.
pub(crate) fn patchify(pixels: &Tensor, p: usize, m: usize) -> candle_core::Result<(Tensor, usize, usize)> {
    let (_, height, width) = pixels.dims3()?;
    if height % (p * m) != 0 || width % (p * m) != 0 {
        candle_core::bail!("a {width}×{height} image does not split into {m}×{m} blocks of {p}-pixel patches");
    }
    let (rows, cols) = (height / p, width / p);
    let patches = pixels
        .reshape(vec![3, rows / m, m, p, cols / m, m, p])?
        .permute(vec![1, 4, 2, 5, 0, 3, 6])?
        .reshape((rows * cols, 3 * p * p))?;
    Ok((patches, rows, cols))
}

/// Each patch's (row, column) in the order the tower sees them: `m × m` blocks row by row.
pub(crate) fn patch_order(rows: usize, cols: usize, m: usize) -> Vec<(usize, usize)> {
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

/// transformers' axial rotary frequencies: a quarter of the head per axis, `1 / θ^(2i / (d/2))`.
pub(crate) fn axial_inv_freq(head_dim: usize, theta: f64) -> Vec<f32> {
    let spatial = head_dim / 2;
    (0..spatial).step_by(2).map(|i| 1.0 / (theta as f32).powf(i as f32 / spatial as f32)).collect()
}

/// The rotary tables `(n, head_dim / 2)` of patches at `order`: rows' frequencies, then
/// columns'.
pub(crate) fn rotary(
    inv_freq: &[f32],
    order: &[(usize, usize)],
    device: &Device,
) -> candle_core::Result<(Tensor, Tensor)> {
    let quarter = inv_freq.len();
    let mut freqs = Vec::with_capacity(order.len() * 2 * quarter);
    for &(r, c) in order {
        freqs.extend(inv_freq.iter().map(|f| r as f32 * f));
        freqs.extend(inv_freq.iter().map(|f| c as f32 * f));
    }
    let freqs = Tensor::from_vec(freqs, (order.len(), 2 * quarter), device)?;
    Ok((freqs.cos()?, freqs.sin()?))
}
