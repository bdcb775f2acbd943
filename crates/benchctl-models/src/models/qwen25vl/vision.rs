//! Qwen2.5-VL's vision tower: 14-pixel patches of two identical frames in 2 × 2 blocks, a 2-D
//! rotary embedding and no learned positions, RMS norms, SwiGLU MLPs, and attention within
//! windows of merged tokens except in the blocks `fullatt_block_indexes` names.
//!
//! The windows: the merged grid cut into squares of `window_size / patch / merge` merged tokens
//! (the last row and column of squares partial), read square by square, row-major within each;
//! the tower runs on its patches in that order (each merged token's 2 × 2 patches together) and
//! the merged tokens are put back in grid order at the end, as `transformers`'
//! `get_window_index` and `reverse_indices` do.

use std::ops::Range;

use candle_core::{IndexOp, Tensor};

use super::Qwen25VlVisionConfig;
use crate::models::qwen3vl::attend;
use crate::models::qwen3vl::text::RmsNorm;
use crate::models::qwen3vl::vision::{
    axial_inv_freq, patch_order, patchify, rotary, summed_patch_kernel, QwenVision, VisionOutput,
};
use crate::models::transformer::{fused_self_attention, Dense};
use crate::models::weights::Weights;
use crate::Result;

/// One vision block: RMS-normed attention with a 2-D rotary embedding (within windows or over
/// the whole image), RMS-normed SwiGLU MLP; every projection biased.
struct VisionBlock {
    norm1: RmsNorm,
    norm2: RmsNorm,
    qkv: Dense,
    proj: Dense,
    gate: Dense,
    up: Dense,
    down: Dense,
    heads: usize,
    /// Attention over the whole image rather than within windows.
    full: bool,
}

impl VisionBlock {
    fn load(w: &Weights, v: &Qwen25VlVisionConfig, full: bool) -> Result<Self> {
        let (h, i) = (v.hidden_size, v.intermediate_size);
        let dense = |w: Weights, i: usize, o: usize| Dense::new(w.linear(i, o, true)?);
        Ok(Self {
            norm1: RmsNorm::load(&w.pp("norm1"), h, 1e-6)?,
            norm2: RmsNorm::load(&w.pp("norm2"), h, 1e-6)?,
            qkv: dense(w.pp("attn.qkv"), h, 3 * h)?,
            proj: dense(w.pp("attn.proj"), h, h)?,
            gate: dense(w.pp("mlp.gate_proj"), h, i)?,
            up: dense(w.pp("mlp.up_proj"), h, i)?,
            down: dense(w.pp("mlp.down_proj"), i, h)?,
            heads: v.num_heads,
            full,
        })
    }

    /// `(n, hidden)` patches in window order, `cos`/`sin` `(n, head_dim / 2)` in f32, `windows`
    /// the patch ranges each window holds, grouped by size in `plan`.
    fn forward(
        &self,
        xs: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        windows: &[Range<usize>],
        plan: &WindowPlan,
    ) -> candle_core::Result<Tensor> {
        let (n, hidden) = xs.dims2()?;
        let head_dim = hidden / self.heads;
        let qkv = self.qkv.forward(&self.norm1.forward(xs)?)?.reshape((n, 3, self.heads, head_dim))?;
        let part = |i: usize| qkv.i((.., i))?.transpose(0, 1)?.unsqueeze(0)?.contiguous();
        let dtype = xs.dtype();
        let rotate =
            |t: Tensor| candle_nn::rotary_emb::rope(&t.to_dtype(candle_core::DType::F32)?, cos, sin)?.to_dtype(dtype);
        let (q, k, v) = (rotate(part(0)?)?, rotate(part(1)?)?, part(2)?);
        // The rotated projection fused again, for the tuned kernels (the CUDA ones, the CPU
        // ones), every window of one size a row of one call; composed window by window where
        // they do not run.
        let tokens = |t: &Tensor| t.squeeze(0)?.transpose(0, 1)?.reshape((n, hidden));
        let fused = Tensor::cat(&[tokens(&q)?, tokens(&k)?, tokens(&v)?], 1)?;
        let attended = match self.full {
            true => fused_self_attention(&fused.unsqueeze(0)?.contiguous()?, self.heads, None, None)?
                .map(|t| t.squeeze(0))
                .transpose()?,
            false => plan.attend(&fused, self.heads)?,
        };
        let attended = match attended {
            Some(attended) => attended,
            None => {
                let scale = (head_dim as f64).powf(-0.5);
                let whole = std::iter::once(0..n).collect::<Vec<_>>();
                let ranges = if self.full { &whole[..] } else { windows };
                let each = ranges
                    .iter()
                    .map(|r| {
                        let cut = |t: &Tensor| t.narrow(2, r.start, r.len());
                        attend(&cut(&q)?, &cut(&k)?, &cut(&v)?, scale, None)?.squeeze(0)
                    })
                    .collect::<candle_core::Result<Vec<_>>>()?;
                Tensor::cat(&each, 0)?
            }
        };
        let xs = (xs + self.proj.forward(&attended)?)?;
        let normed = self.norm2.forward(&xs)?;
        let hidden = (self.gate.forward(&normed)?.silu()? * self.up.forward(&normed)?)?;
        &xs + self.down.forward(&hidden)?
    }
}

/// The windows of one image grouped by size: each group's patch rows gathered into `(windows,
/// size, ·)` rows of one attention call, and the groups' outputs put back in window order.
struct WindowPlan {
    /// Per size: the windows' size and their patches' rows, window by window.
    groups: Vec<(usize, Tensor)>,
    /// For each patch in window order, its row in the groups' concatenated output.
    back: Tensor,
}

impl WindowPlan {
    fn new(windows: &[Range<usize>], device: &candle_core::Device) -> candle_core::Result<Self> {
        let mut sizes: Vec<usize> = windows.iter().map(|w| w.len()).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let total = windows.iter().map(|w| w.len()).sum();
        let (mut groups, mut back, mut row) = (Vec::with_capacity(sizes.len()), vec![0u32; total], 0u32);
        for size in sizes {
            let rows: Vec<u32> =
                windows.iter().filter(|w| w.len() == size).flat_map(|w| w.clone()).map(|r| r as u32).collect();
            for &patch in &rows {
                back[patch as usize] = row;
                row += 1;
            }
            groups.push((size, Tensor::new(rows.as_slice(), device)?));
        }
        Ok(Self { groups, back: Tensor::new(back.as_slice(), device)? })
    }

    /// Attention within each window of the `(n, 3·hidden)` rotated projection: `(n, hidden)` in
    /// window order, or `None` where the fused kernels do not run.
    fn attend(&self, fused: &Tensor, heads: usize) -> candle_core::Result<Option<Tensor>> {
        let width = fused.dim(1)? / 3;
        let mut outputs = Vec::with_capacity(self.groups.len());
        for (size, rows) in &self.groups {
            let windows = rows.dim(0)? / size;
            let stacked = fused.index_select(rows, 0)?.reshape((windows, *size, 3 * width))?;
            let Some(attended) = fused_self_attention(&stacked, heads, None, None)? else { return Ok(None) };
            outputs.push(attended.reshape((windows * size, width))?);
        }
        Tensor::cat(&outputs, 0)?.index_select(&self.back, 0).map(Some)
    }
}

/// Qwen2.5-VL's vision tower.
pub(super) struct WindowVisionTower {
    /// The patch embedding with its two (identical) frames' kernels summed: `(hidden, 3·p·p)`.
    patch: Dense,
    blocks: Vec<VisionBlock>,
    /// The merger: each patch RMS-normed, 2 × 2 concatenated, a GELU MLP to the decoder's width.
    merger_norm: RmsNorm,
    merger_fc1: Dense,
    merger_fc2: Dense,
    patch_size: usize,
    merge: usize,
    /// A window's side in merged tokens.
    window: usize,
    inv_freq: Vec<f32>,
    dtype: candle_core::DType,
}

impl WindowVisionTower {
    pub(super) fn load(w: &Weights, v: &Qwen25VlVisionConfig) -> Result<Self> {
        let (h, p, t) = (v.hidden_size, v.patch_size, v.temporal_patch_size);
        let unit = v.spatial_merge_size * v.spatial_merge_size;
        let dense = |w: Weights, i: usize, o: usize| Dense::new(w.linear(i, o, true)?);
        Ok(Self {
            patch: Dense::from_weights(summed_patch_kernel(w, h, t, p)?, None)?,
            blocks: (0..v.depth)
                .map(|i| VisionBlock::load(&w.pp(format!("blocks.{i}")), v, v.fullatt_block_indexes.contains(&i)))
                .collect::<Result<_>>()?,
            merger_norm: RmsNorm::load(&w.pp("merger.ln_q"), h, 1e-6)?,
            merger_fc1: dense(w.pp("merger.mlp.0"), h * unit, h * unit)?,
            merger_fc2: dense(w.pp("merger.mlp.2"), h * unit, v.out_hidden_size)?,
            patch_size: p,
            merge: v.spatial_merge_size,
            window: v.window_size / v.spatial_merge_size / p,
            inv_freq: axial_inv_freq(h / v.num_heads, v.rope_theta()),
            dtype: w.dtype(),
        })
    }
}

/// The merged tokens of a `rows × cols` merged grid in window order, and each window's count.
fn window_order(rows: usize, cols: usize, side: usize) -> (Vec<usize>, Vec<usize>) {
    let (mut order, mut sizes) = (Vec::with_capacity(rows * cols), Vec::new());
    for top in (0..rows).step_by(side) {
        for left in (0..cols).step_by(side) {
            let before = order.len();
            for y in top..(top + side).min(rows) {
                order.extend((left..(left + side).min(cols)).map(|x| y * cols + x));
            }
            sizes.push(order.len() - before);
        }
    }
    (order, sizes)
}

impl QwenVision for WindowVisionTower {
    fn forward(&self, pixels: &Tensor) -> candle_core::Result<VisionOutput> {
        let m = self.merge;
        let unit = m * m;
        let (patches, rows, cols) = patchify(pixels, self.patch_size, m)?;
        let (merged, sizes) = window_order(rows / m, cols / m, self.window.max(1));
        // Patches in window order: each merged token's `unit` patches, window by window.
        let patch_index: Vec<u32> =
            merged.iter().flat_map(|&t| (0..unit).map(move |k| (t * unit + k) as u32)).collect();
        let index = Tensor::new(patch_index.as_slice(), pixels.device())?;
        let grid_order = patch_order(rows, cols, m);
        let order: Vec<(usize, usize)> = patch_index.iter().map(|&i| grid_order[i as usize]).collect();
        let (cos, sin) = rotary(&self.inv_freq, &order, pixels.device())?;
        let mut windows = Vec::with_capacity(sizes.len());
        let mut start = 0;
        for size in sizes {
            windows.push(start..start + size * unit);
            start += size * unit;
        }
        let plan = WindowPlan::new(&windows, pixels.device())?;
        let mut xs = self.patch.forward(&patches.to_dtype(self.dtype)?.index_select(&index, 0)?)?;
        for block in &self.blocks {
            xs = block.forward(&xs, &cos, &sin, &windows, &plan)?;
        }
        let (n, hidden) = xs.dims2()?;
        let concat = self.merger_norm.forward(&xs)?.reshape((n / unit, hidden * unit))?;
        let tokens = self.merger_fc2.forward(&self.merger_fc1.forward(&concat)?.gelu_erf()?)?;
        // Back to grid order: the merged token at window position `i` is grid token `merged[i]`.
        let mut back = vec![0u32; merged.len()];
        merged.iter().enumerate().for_each(|(i, &t)| back[t] = i as u32);
        let tokens = tokens.index_select(&Tensor::new(back.as_slice(), pixels.device())?, 0)?;
        Ok(VisionOutput { tokens, deepstack: Vec::new(), grid: (rows / m, cols / m) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cut_the_merged_grid_into_squares_read_row_major() {
        // 3 × 5 merged tokens in windows of 2: six windows, the last row and column partial.
        let (order, sizes) = window_order(3, 5, 2);
        assert_eq!(sizes, [4, 4, 2, 2, 2, 1]);
        assert_eq!(order, [0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 12, 13, 14]);
        // A grid that windows tile exactly has no empty window.
        assert_eq!(window_order(2, 2, 2).1, [4]);
    }

    #[test]
    fn windows_of_one_size_attend_together_as_each_alone_does() {
        // Windows of 5, 3, 5, 2 and 3 patches (three sizes, interleaved), 2 heads of 8.
        let device = candle_core::Device::Cpu;
        let sizes = [5, 3, 5, 2, 3];
        let mut windows = Vec::new();
        let mut start = 0;
        for size in sizes {
            windows.push(start..start + size);
            start += size;
        }
        let (n, heads, head_dim) = (start, 2, 8);
        let fused = Tensor::randn(0f32, 1.0, (n, 3 * heads * head_dim), &device).unwrap();
        let plan = WindowPlan::new(&windows, &device).unwrap();
        assert_eq!(plan.groups.iter().map(|(size, _)| *size).collect::<Vec<_>>(), [2, 3, 5]);
        let together = plan.attend(&fused, heads).unwrap().expect("f32 on the CPU takes the fused kernel");
        for window in windows {
            let part = |i: usize| {
                let t = fused.narrow(0, window.start, window.len()).unwrap();
                let t = t.narrow(1, i * heads * head_dim, heads * head_dim).unwrap();
                t.reshape((1, window.len(), heads, head_dim)).unwrap().transpose(1, 2).unwrap().contiguous().unwrap()
            };
            let alone = attend(&part(0), &part(1), &part(2), (head_dim as f64).powf(-0.5), None).unwrap();
            let alone = alone.squeeze(0).unwrap();
            let ours = together.narrow(0, window.start, window.len()).unwrap();
            let worst = (ours - alone).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(worst < 1e-5, "window {window:?}: {worst}");
        }
    }
}
