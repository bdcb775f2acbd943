//! FIBER's image backbone: a Swin Transformer (Liu et al., "Swin Transformer: Hierarchical
//! Vision Transformer using Shifted Windows", 2021, <https://arxiv.org/abs/2103.14030>) whose
//! top blocks also attend from every image token to the text ("image-to-text fusion"), as
//! `coarse_grained/fiber/modules/swin_transformer.py` of microsoft/FIBER builds it.
//!
//! A block is pre-norm: `x + W-MSA(norm1(x))`, then `x + MLP(norm2(x))`. The attention runs
//! inside non-overlapping `w×w` windows with a learned relative position bias; every second
//! block shifts the windows by `w/2` (a cyclic roll, with the −100 mask that keeps tokens
//! from the image's far side apart). A fused block adds, after the windowed attention's
//! projection and before the residual, `alpha_i2t · proj_i2t(attention(qkv_i2t(norm_i2t_i(x)),
//! text keys, text values))`, the text's padding masked with −10000 as `transformers` 4.6
//! extends masks. That cross-attention is per token, so it runs on all of an image's
//! windowed tokens at once.

use crate::kernels::LayerNorm;
use candle_core::{DType, IndexOp, Module, Tensor};

use super::super::transformer::{attend, fused_self_attention, Activation, Dense, PatchEmbedding};
use super::super::weights::Weights;
use crate::{Error, ErrorKind, Result};

/// The Swin shape FIBER builds: widths double and resolutions halve at each stage. As the
/// `swin` section of FIBER's `config.json` (Swin-B by default); the image size comes from the
/// config's top level or the checkpoint.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwinShape {
    #[serde(skip)]
    pub image_size: usize,
    pub patch_size: usize,
    pub embed_dim: usize,
    pub depths: Vec<usize>,
    pub num_heads: Vec<usize>,
    pub mlp_ratio: f64,
    pub layer_norm_eps: f64,
}

impl Default for SwinShape {
    fn default() -> Self {
        Self {
            image_size: 384,
            patch_size: 4,
            embed_dim: 128,
            depths: vec![2, 2, 18, 2],
            num_heads: vec![4, 8, 16, 32],
            mlp_ratio: 4.0,
            layer_norm_eps: 1e-5,
        }
    }
}

impl SwinShape {
    /// FIBER derives the window from the input size (`int(img_size / 32)`), whatever the
    /// factory's name says: 12 at 384 px, 18 at 576 px.
    pub fn window(&self) -> usize {
        self.image_size / 32
    }

    /// The width of stage `s`.
    pub fn stage_dim(&self, s: usize) -> usize {
        self.embed_dim << s
    }

    /// The token grid side of stage `s`.
    pub fn stage_side(&self, s: usize) -> usize {
        (self.image_size / self.patch_size) >> s
    }

    /// Every stage's grid must split into whole windows and (but the last) halve evenly.
    pub fn check(&self, source: &str) -> Result<()> {
        let bad = |why: String| Err(Error::new(ErrorKind::BadConfig, format!("use {source}: {why}")));
        if self.depths.len() != self.num_heads.len() || self.depths.is_empty() {
            return bad(format!(
                "swin depths {:?} and num_heads {:?} must list the same stages",
                self.depths, self.num_heads
            ));
        }
        if self.patch_size == 0 || self.window() == 0 || !self.image_size.is_multiple_of(self.patch_size) {
            return bad(format!(
                "an image size of {} does not fit patch size {} and a window of size/32",
                self.image_size, self.patch_size
            ));
        }
        for s in 0..self.depths.len() {
            let (side, dim, heads) = (self.stage_side(s), self.stage_dim(s), self.num_heads[s]);
            let window = self.window().min(side);
            if side == 0 || !side.is_multiple_of(window) || (s + 1 < self.depths.len() && side % 2 != 0) {
                return bad(format!("stage {s}'s {side}×{side} grid does not split into {window}×{window} windows"));
            }
            if heads == 0 || !dim.is_multiple_of(heads) {
                return bad(format!("stage {s}'s width {dim} is not a multiple of its {heads} heads"));
            }
        }
        Ok(())
    }
}

/// The image-to-text cross-attention of a fused block.
#[derive(Debug, Clone)]
struct ImageToText {
    norm: LayerNorm,
    query: Dense,
    text_key_value: Dense,
    proj: Dense,
    alpha: f64,
}

/// Windowed multi-head self-attention with a relative position bias, and the fusion.
#[derive(Debug, Clone)]
struct WindowAttention {
    qkv: Dense,
    proj: Dense,
    heads: usize,
    /// `(heads, N, N)`: the bias table gathered by relative position, `N = w²`, in f32 (what
    /// the fused kernels add, on the CPU and on a GPU, whatever the weights' dtype).
    bias: Tensor,
    fusion: Option<ImageToText>,
}

/// The text a fused block attends to: `(b, L, width)` states and the `(b, 1, 1, L)` additive mask.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextContext<'a> {
    pub states: &'a Tensor,
    pub mask: &'a Tensor,
}

impl WindowAttention {
    /// `windows` `(b·nW, N, C)`; `mask` `(nW, N, N)` for shifted windows.
    fn forward(
        &self,
        windows: &Tensor,
        mask: Option<&Tensor>,
        text: Option<TextContext>,
    ) -> candle_core::Result<Tensor> {
        let (bw, n, c) = windows.dims3()?;
        let qkv = self.qkv.forward(windows)?;
        let attended = match fused_self_attention(&qkv, self.heads, Some(&self.bias), mask)? {
            Some(attended) => attended,
            None => self.composed(&qkv, mask)?,
        };
        let xs = self.proj.forward(&attended)?;
        match (&self.fusion, text) {
            (Some(f), Some(text)) => {
                let b = text.states.dim(0)?;
                let kv = f.text_key_value.forward(text.states)?;
                let (k, v) = (kv.narrow(2, 0, c)?, kv.narrow(2, c, c)?);
                // Each image's windows are consecutive rows: one query sequence per image.
                let q = f.query.forward(&f.norm.forward(&xs)?)?.reshape((b, bw / b * n, c))?;
                let y = attend(&q, &k, &v, self.heads, Some(text.mask))?.reshape((bw, n, c))?;
                xs + (f.proj.forward(&y)? * f.alpha)?
            }
            _ => Ok(xs),
        }
    }

    /// The attention from candle's operations (devices and dtypes the fused kernel lacks).
    fn composed(&self, qkv: &Tensor, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let (bw, n, three_c) = qkv.dims3()?;
        let c = three_c / 3;
        let head_dim = c / self.heads;
        let qkv = qkv.reshape((bw, n, 3, self.heads, head_dim))?.permute((2, 0, 3, 1, 4))?;
        let q = (qkv.i(0)?.contiguous()? * (head_dim as f64).powf(-0.5))?;
        let (k, v) = (qkv.i(1)?.contiguous()?, qkv.i(2)?.contiguous()?);
        let logits = q.matmul(&k.t()?)?;
        let mut logits = logits.broadcast_add(&self.bias.to_dtype(logits.dtype())?.unsqueeze(0)?)?;
        if let Some(mask) = mask {
            let groups = mask.dim(0)?;
            logits = logits
                .reshape((bw / groups, groups, self.heads, n, n))?
                .broadcast_add(&mask.unsqueeze(1)?)?
                .reshape((bw, self.heads, n, n))?;
        }
        let weights = candle_nn::ops::softmax_last_dim(&logits)?;
        weights.matmul(&v)?.transpose(1, 2)?.reshape((bw, n, c))
    }
}

/// One Swin block.
#[derive(Debug, Clone)]
struct SwinBlock {
    norm1: LayerNorm,
    attn: WindowAttention,
    norm2: LayerNorm,
    fc1: Dense,
    fc2: Dense,
    side: usize,
    window: usize,
    shift: usize,
    /// `(nW, N, N)`, 0 within a region and −100 across, for shifted blocks.
    shift_mask: Option<Tensor>,
}

/// `torch.roll(x, shifts=(by, by), dims=(1, 2))` of a `(b, H, W, C)` tensor, `by` in `(-H, H)`.
fn roll2(xs: &Tensor, by: isize) -> candle_core::Result<Tensor> {
    let roll = |xs: &Tensor, dim: usize| -> candle_core::Result<Tensor> {
        let n = xs.dim(dim)?;
        let first = by.rem_euclid(n as isize) as usize; // out[i] = x[(i - by) mod n]
        let split = (n - first) % n;
        if split == 0 {
            return Ok(xs.clone());
        }
        Tensor::cat(&[&xs.narrow(dim, split, n - split)?, &xs.narrow(dim, 0, split)?], dim)
    };
    roll(&roll(xs, 1)?, 2)
}

impl SwinBlock {
    fn forward(&self, xs: &Tensor, text: Option<TextContext>) -> candle_core::Result<Tensor> {
        let (b, l, c) = xs.dims3()?;
        let (side, w) = (self.side, self.window);
        let mut h = self.norm1.forward(xs)?.reshape((b, side, side, c))?;
        if self.shift > 0 {
            h = roll2(&h, -(self.shift as isize))?;
        }
        let per_side = side / w;
        let windows = h
            .reshape(vec![b, per_side, w, per_side, w, c])?
            .permute(vec![0, 1, 3, 2, 4, 5])?
            .contiguous()?
            .reshape((b * per_side * per_side, w * w, c))?;
        let attended = self.attn.forward(&windows, self.shift_mask.as_ref(), text)?;
        let mut h = attended
            .reshape(vec![b, per_side, per_side, w, w, c])?
            .permute(vec![0, 1, 3, 2, 4, 5])?
            .contiguous()?
            .reshape((b, side, side, c))?;
        if self.shift > 0 {
            h = roll2(&h, self.shift as isize)?;
        }
        let xs = (xs + h.reshape((b, l, c))?)?;
        let hidden = Activation::Gelu.apply(&self.fc1.forward(&self.norm2.forward(&xs)?)?)?;
        xs.clone() + self.fc2.forward(&hidden)?
    }
}

/// Swin's patch merging: each 2×2 neighbourhood concatenated (in timm's order: (0,0),
/// (1,0), (0,1), (1,1) as (row, column)), normalised and projected to twice the width.
#[derive(Debug, Clone)]
struct PatchMerging {
    norm: LayerNorm,
    reduction: Dense,
    side: usize,
}

impl PatchMerging {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let (b, _, c) = xs.dims3()?;
        let half = self.side / 2;
        // (b, H/2, row, W/2, col, C) → (b, H/2, W/2, col, row, C): col-major over the 2×2.
        let merged = xs
            .reshape(vec![b, half, 2, half, 2, c])?
            .permute(vec![0, 1, 3, 4, 2, 5])?
            .contiguous()?
            .reshape((b, half * half, 4 * c))?;
        self.reduction.forward(&self.norm.forward(&merged)?)
    }
}

#[derive(Debug, Clone)]
struct Stage {
    blocks: Vec<SwinBlock>,
    downsample: Option<PatchMerging>,
}

/// The Swin backbone of FIBER.
#[derive(Debug, Clone)]
pub struct Swin {
    patch_embed: PatchEmbedding,
    patch_norm: LayerNorm,
    stages: Vec<Stage>,
    norm: LayerNorm,
}

/// `(N·N,)` indices into the `((2w−1)², heads)` bias table for a `w×w` window.
fn relative_position_index(w: usize) -> Vec<u32> {
    let n = w * w;
    let mut index = Vec::with_capacity(n * n);
    for a in 0..n {
        for b in 0..n {
            let (dh, dw) = (a / w + w - 1 - b / w, a % w + w - 1 - b % w);
            index.push((dh * (2 * w - 1) + dw) as u32);
        }
    }
    index
}

/// The shifted-window mask: tokens of the image's three regions per axis (the cyclic roll
/// brings far-apart regions into one window) only attend within their region.
fn shift_mask(side: usize, w: usize, shift: usize) -> Vec<f32> {
    let region = |i: usize| {
        if i < side - w {
            0
        } else if i < side - shift {
            1
        } else {
            2
        }
    };
    let per_side = side / w;
    let n = w * w;
    let mut mask = Vec::with_capacity(per_side * per_side * n * n);
    for wy in 0..per_side {
        for wx in 0..per_side {
            let label = |t: usize| region(wy * w + t / w) * 3 + region(wx * w + t % w);
            for a in 0..n {
                for b in 0..n {
                    mask.push(if label(a) == label(b) { 0.0 } else { -100.0 });
                }
            }
        }
    }
    mask
}

impl Swin {
    /// `vit_model.*`; `dim_text` is the text width fused blocks read keys and values from;
    /// `fused(stage, block)` says which blocks carry the fusion weights.
    pub(crate) fn load(
        w: &Weights,
        shape: &SwinShape,
        dim_text: usize,
        fused: impl Fn(usize, usize) -> bool,
    ) -> Result<Self> {
        let (device, dtype) = (w.device().clone(), w.dtype());
        let eps = shape.layer_norm_eps;
        let stages = (0..shape.depths.len())
            .map(|s| {
                let (dim, side, heads) = (shape.stage_dim(s), shape.stage_side(s), shape.num_heads[s]);
                let (window, can_shift) = if side <= shape.window() { (side, false) } else { (shape.window(), true) };
                let n = window * window;
                let index = Tensor::from_vec(relative_position_index(window), n * n, &device)
                    .map_err(|e| Error::compute("build the relative position index", e))?;
                let stage = w.pp(format!("layers.{s}"));
                let blocks = (0..shape.depths[s])
                    .map(|i| {
                        let bw = stage.pp(format!("blocks.{i}"));
                        let a = bw.pp("attn");
                        let table = a.get(((2 * window - 1).pow(2), heads), "relative_position_bias_table")?;
                        let bias = table
                            .index_select(&index, 0)
                            .and_then(|t| t.reshape((n, n, heads)))
                            .and_then(|t| t.permute((2, 0, 1)))
                            .and_then(|t| t.to_dtype(DType::F32)?.contiguous())
                            .map_err(|e| Error::compute("gather the relative position bias", e))?;
                        let fusion = if fused(s, i) {
                            let alpha = a.get(1, "alpha_i2t")?;
                            let alpha = alpha
                                .to_dtype(DType::F64)
                                .and_then(|t| t.to_vec1::<f64>())
                                .map_err(|e| Error::compute("read alpha_i2t", e))?[0];
                            Some(ImageToText {
                                norm: a.pp("norm_i2t_i").layer_norm(dim, eps)?,
                                query: Dense::new(a.pp("qkv_i2t").linear(dim, dim, true)?)?,
                                text_key_value: Dense::new(a.pp("qkv_text_i2t").linear(dim_text, 2 * dim, true)?)?,
                                proj: Dense::new(a.pp("proj_i2t").linear(dim, dim, true)?)?,
                                alpha,
                            })
                        } else {
                            None
                        };
                        let shift = if can_shift && i % 2 == 1 { window / 2 } else { 0 };
                        let shift_mask = if shift > 0 {
                            let per_side = side / window;
                            let mask =
                                Tensor::from_vec(shift_mask(side, window, shift), (per_side * per_side, n, n), &device)
                                    .and_then(|m| m.to_dtype(dtype))
                                    .map_err(|e| Error::compute("build the shifted-window mask", e))?;
                            Some(mask)
                        } else {
                            None
                        };
                        let hidden = (dim as f64 * shape.mlp_ratio) as usize;
                        Ok(SwinBlock {
                            norm1: bw.pp("norm1").layer_norm(dim, eps)?,
                            attn: WindowAttention {
                                qkv: Dense::new(a.pp("qkv").linear(dim, 3 * dim, true)?)?,
                                proj: Dense::new(a.pp("proj").linear(dim, dim, true)?)?,
                                heads,
                                bias,
                                fusion,
                            },
                            norm2: bw.pp("norm2").layer_norm(dim, eps)?,
                            fc1: Dense::new(bw.pp("mlp.fc1").linear(dim, hidden, true)?)?,
                            fc2: Dense::new(bw.pp("mlp.fc2").linear(hidden, dim, true)?)?,
                            side,
                            window,
                            shift,
                            shift_mask,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let downsample = if s + 1 < shape.depths.len() {
                    let d = stage.pp("downsample");
                    Some(PatchMerging {
                        norm: d.pp("norm").layer_norm(4 * dim, eps)?,
                        reduction: Dense::new(d.pp("reduction").linear(4 * dim, 2 * dim, false)?)?,
                        side,
                    })
                } else {
                    None
                };
                Ok(Stage { blocks, downsample })
            })
            .collect::<Result<Vec<_>>>()?;
        let last = shape.stage_dim(shape.depths.len() - 1);
        Ok(Self {
            patch_embed: PatchEmbedding::load(&w.pp("patch_embed.proj"), shape.embed_dim, 3, shape.patch_size, true)?,
            patch_norm: w.pp("patch_embed.norm").layer_norm(shape.embed_dim, eps)?,
            stages,
            norm: w.pp("norm").layer_norm(last, eps)?,
        })
    }

    /// The patch tokens, `(b, 3, S, S)` → `(b, (S/4)², C)`.
    pub fn embed(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        self.patch_norm.forward(&self.patch_embed.forward(pixels)?)
    }

    /// Stage `s`'s blocks `range` on the image alone (no fusion).
    pub fn run_blocks(&self, s: usize, range: std::ops::Range<usize>, xs: Tensor) -> candle_core::Result<Tensor> {
        self.stages[s].blocks[range].iter().try_fold(xs, |xs, block| block.forward(&xs, None))
    }

    /// Stage `s`'s block `i` with the image-to-text fusion.
    pub(crate) fn fused_block(
        &self,
        s: usize,
        i: usize,
        xs: &Tensor,
        text: TextContext,
    ) -> candle_core::Result<Tensor> {
        self.stages[s].blocks[i].forward(xs, Some(text))
    }

    /// Stage `s`'s patch merging, if it has one.
    pub fn downsample(&self, s: usize, xs: Tensor) -> candle_core::Result<Tensor> {
        match &self.stages[s].downsample {
            Some(merge) => merge.forward(&xs),
            None => Ok(xs),
        }
    }

    /// A whole stage on the image alone, patch merging included.
    pub fn stage(&self, s: usize, xs: Tensor) -> candle_core::Result<Tensor> {
        let xs = self.run_blocks(s, 0..self.stages[s].blocks.len(), xs)?;
        self.downsample(s, xs)
    }

    /// The unimodal path: every stage, then the final norm.
    pub fn forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let xs = (0..self.stages.len()).try_fold(self.embed(pixels)?, |xs, s| self.stage(s, xs))?;
        self.norm.forward(&xs)
    }

    /// The final norm of the unimodal path.
    pub fn forward_norm(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        self.norm.forward(xs)
    }

    pub fn stages(&self) -> usize {
        self.stages.len()
    }

    pub fn depth(&self, s: usize) -> usize {
        self.stages[s].blocks.len()
    }
}
