//! The pieces every architecture here is built from: the MLP activations, multi-head
//! attention, and the pre-norm transformer block of CLIP, OpenCLIP, SigLIP and BLIP's ViT.
//!
//! The towers differ only in names (`q_proj`/`k_proj`/`v_proj` or one fused `qkv`;
//! `out_proj` or `projection`), depth, width and activation, so those are parameters here
//! rather than copies per model.

use candle_core::{Module, Tensor, D};
use candle_nn::{LayerNorm, Linear};

use super::weights::Weights;
use crate::{Error, ErrorKind, Result};

pub use crate::kernels::Activation;

/// How a checkpoint names a block's attention projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttentionNames {
    /// `q_proj`, `k_proj`, `v_proj`, `out_proj` (CLIP, SigLIP).
    Separate,
    /// One `qkv` projection and `projection` (BLIP's ViT).
    Fused,
}

/// Shape of one transformer tower.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tower {
    pub width: usize,
    pub intermediate: usize,
    pub depth: usize,
    pub heads: usize,
    pub activation: Activation,
    pub eps: f64,
    pub names: AttentionNames,
}

impl Tower {
    pub fn new(width: usize, intermediate: usize, depth: usize, heads: usize, act: &str, eps: f64) -> Result<Self> {
        let activation = Activation::parse(act).map_err(|e| Error::new(ErrorKind::BadConfig, e))?;
        if heads == 0 || !width.is_multiple_of(heads) {
            return Err(Error::new(
                ErrorKind::BadConfig,
                format!("use a width of {width} with {heads} attention heads: the width must be a multiple"),
            ));
        }
        Ok(Self { width, intermediate, depth, heads, activation, eps, names: AttentionNames::Separate })
    }

    pub fn with_names(self, names: AttentionNames) -> Self {
        Self { names, ..self }
    }
}

/// Scaled dot-product attention of `(b, s, width)` queries over `(b, t, width)` keys and
/// values, split into `heads`; `mask` is added to the `(b, heads, s, t)` logits.
pub(crate) fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    mask: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let (b, s, width) = q.dims3()?;
    let t = k.dim(1)?;
    let head_dim = width / heads;
    let split = |x: &Tensor, len: usize| x.reshape((b, len, heads, head_dim))?.transpose(1, 2)?.contiguous();
    let q = (split(q, s)? * (head_dim as f64).powf(-0.5))?;
    let (k, v) = (split(k, t)?, split(v, t)?);
    let mut logits = q.matmul(&k.t()?)?;
    if let Some(mask) = mask {
        logits = logits.broadcast_add(mask)?;
    }
    let weights = candle_nn::ops::softmax_last_dim(&logits)?;
    weights.matmul(&v)?.transpose(1, 2)?.reshape((b, s, width))
}

/// Token `index` of every sequence (`[batch, seq, width]` → `[batch, width]`) as a contiguous
/// tensor. The pooled token goes into a projection, and candle's CUDA matmul refuses the
/// strided view `xs.i((.., index, ..))` is (its CPU matmul takes it).
pub(crate) fn token(xs: &Tensor, index: usize) -> candle_core::Result<Tensor> {
    use candle_core::IndexOp;
    xs.i((.., index, ..))?.contiguous()
}

/// `xs · Wᵀ + b` over the last dimension, as one 2-D matrix product: candle multiplies a
/// `(batch, seq, in)` input by a broadcast weight as `batch` small products, which runs the
/// CPU kernels at two thirds of their speed.
pub(crate) fn dense(lin: &Linear, xs: &Tensor) -> candle_core::Result<Tensor> {
    let dims = xs.dims();
    let Some((&in_dim, lead)) = dims.split_last() else { return lin.forward(xs) };
    if lead.len() < 2 {
        return lin.forward(xs);
    }
    let rows = lead.iter().product::<usize>();
    let ys = crate::kernels::dense_2d(&xs.reshape((rows, in_dim))?, lin.weight(), lin.bias())?;
    let mut out_dims = lead.to_vec();
    out_dims.push(ys.dim(1)?);
    ys.reshape(out_dims)
}

/// Multi-head self-attention with q, k and v fused into one projection.
#[derive(Debug, Clone)]
pub(crate) struct Attention {
    qkv: Linear,
    out: Linear,
    heads: usize,
}

impl Attention {
    pub fn load(w: &Weights, t: &Tower) -> Result<Self> {
        let (qkv, out) = match t.names {
            AttentionNames::Separate => {
                let q = w.pp("q_proj").linear(t.width, t.width, true)?;
                let k = w.pp("k_proj").linear(t.width, t.width, true)?;
                let v = w.pp("v_proj").linear(t.width, t.width, true)?;
                (fuse(&q, &k, &v)?, w.pp("out_proj").linear(t.width, t.width, true)?)
            }
            AttentionNames::Fused => {
                (w.pp("qkv").linear(t.width, 3 * t.width, true)?, w.pp("projection").linear(t.width, t.width, true)?)
            }
        };
        Ok(Self { qkv, out, heads: t.heads })
    }

    /// From a fused `(3·width, width)` weight and bias, as `nn.MultiheadAttention` stores them.
    pub fn from_parts(qkv: Linear, out: Linear, heads: usize) -> Self {
        Self { qkv, out, heads }
    }

    pub fn forward(&self, xs: &Tensor, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let width = xs.dim(D::Minus1)?;
        let qkv = dense(&self.qkv, xs)?;
        if let Some(attended) = crate::kernels::self_attention(&qkv, self.heads, mask)? {
            return dense(&self.out, &attended);
        }
        let q = qkv.narrow(D::Minus1, 0, width)?;
        let k = qkv.narrow(D::Minus1, width, width)?;
        let v = qkv.narrow(D::Minus1, 2 * width, width)?;
        dense(&self.out, &attend(&q, &k, &v, self.heads, mask)?)
    }

    /// Attention of `queries` over `xs` (keys and values), as in attention pooling.
    pub fn forward_queries(&self, queries: &Tensor, xs: &Tensor) -> candle_core::Result<Tensor> {
        let width = xs.dim(D::Minus1)?;
        let weight = self.qkv.weight();
        let bias = self.qkv.bias();
        let part = |i: usize| -> candle_core::Result<Linear> {
            Ok(Linear::new(
                weight.narrow(0, i * width, width)?,
                bias.map(|b| b.narrow(0, i * width, width)).transpose()?,
            ))
        };
        let q = dense(&part(0)?, queries)?;
        let k = dense(&part(1)?, xs)?;
        let v = dense(&part(2)?, xs)?;
        dense(&self.out, &attend(&q, &k, &v, self.heads, None)?)
    }
}

/// One projection from three (q, k, v) of the same input.
pub(crate) fn fuse(q: &Linear, k: &Linear, v: &Linear) -> Result<Linear> {
    let cat = |parts: [Option<&Tensor>; 3]| -> Result<Option<Tensor>> {
        let parts: Vec<&Tensor> = parts.into_iter().flatten().collect();
        if parts.is_empty() {
            return Ok(None);
        }
        Tensor::cat(&parts, 0).map(Some).map_err(|e| Error::compute("fuse attention projections", e))
    };
    let weight = cat([Some(q.weight()), Some(k.weight()), Some(v.weight())])?
        .ok_or_else(|| Error::new(ErrorKind::BadWeights, "fuse attention projections: no weights"))?;
    Ok(Linear::new(weight, cat([q.bias(), k.bias(), v.bias()])?))
}

/// The two-layer MLP `fc2(act(fc1(x)))`.
#[derive(Debug, Clone)]
pub(crate) struct Mlp {
    fc1: Linear,
    fc2: Linear,
    activation: Activation,
}

impl Mlp {
    pub fn load(w: &Weights, t: &Tower) -> Result<Self> {
        Ok(Self {
            fc1: w.pp("fc1").linear(t.width, t.intermediate, true)?,
            fc2: w.pp("fc2").linear(t.intermediate, t.width, true)?,
            activation: t.activation,
        })
    }

    pub fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        dense(&self.fc2, &self.activation.apply(&dense(&self.fc1, xs)?)?)
    }
}

/// Pre-norm transformer block: `x + attn(ln1(x))`, then `x + mlp(ln2(x))`.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    norm1: LayerNorm,
    attn: Attention,
    norm2: LayerNorm,
    mlp: Mlp,
}

impl Block {
    pub fn load(w: &Weights, t: &Tower) -> Result<Self> {
        Ok(Self {
            norm1: w.pp("layer_norm1").layer_norm(t.width, t.eps)?,
            attn: Attention::load(&w.pp("self_attn"), t)?,
            norm2: w.pp("layer_norm2").layer_norm(t.width, t.eps)?,
            mlp: Mlp::load(&w.pp("mlp"), t)?,
        })
    }

    pub fn forward(&self, xs: &Tensor, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let xs = (self.attn.forward(&self.norm1.forward(xs)?, mask)? + xs)?;
        self.mlp.forward(&self.norm2.forward(&xs)?)? + xs
    }
}

/// `t.depth` blocks under `encoder.layers.N`.
pub(crate) fn load_blocks(w: &Weights, t: &Tower) -> Result<Vec<Block>> {
    (0..t.depth).map(|i| Block::load(&w.pp(format!("encoder.layers.{i}")), t)).collect()
}

pub(crate) fn run_blocks(blocks: &[Block], xs: Tensor, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
    blocks.iter().try_fold(xs, |xs, block| block.forward(&xs, mask))
}

/// A `p×p`, stride-`p` convolution as one matmul over flattened patches:
/// `(b, C, H, W)` → `(b, (H/p)·(W/p), width)`.
#[derive(Debug, Clone)]
pub(crate) struct PatchEmbedding {
    /// `(C·p·p, width)`.
    weight: Tensor,
    bias: Option<Tensor>,
    patch: usize,
}

impl PatchEmbedding {
    /// The conv weight `name` of shape `(width, channels, p, p)`, and its bias if `bias`.
    pub fn load(w: &Weights, width: usize, channels: usize, patch: usize, bias: bool) -> Result<Self> {
        let weight = w
            .get((width, channels, patch, patch), "weight")?
            .reshape((width, channels * patch * patch))
            .and_then(|p| p.t())
            .map_err(|e| Error::compute("lay out the patch embedding", e))?;
        let bias = if bias { Some(w.get(width, "bias")?) } else { None };
        Ok(Self { weight, bias, patch })
    }

    pub fn forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let (b, c, h, w) = pixels.dims4()?;
        let p = self.patch;
        let (gh, gw) = (h / p, w / p);
        let patches = pixels
            .to_dtype(self.weight.dtype())?
            .reshape((b, c, gh, p, gw, p))?
            .permute((0, 2, 4, 1, 3, 5))?
            .reshape((b, gh * gw, c * p * p))?;
        let xs = patches.broadcast_matmul(&self.weight)?;
        match &self.bias {
            Some(bias) => xs.broadcast_add(bias),
            None => Ok(xs),
        }
    }
}

/// Rows scaled to unit L2 norm, in f32.
pub fn l2_normalise(xs: &Tensor) -> candle_core::Result<Tensor> {
    let xs = xs.to_dtype(candle_core::DType::F32)?;
    xs.broadcast_div(&xs.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?)
}

/// `(n, K, d)` × `(n, L, d)` → `(n, K, L)` dot products.
pub(crate) fn pairwise_dot(images: &Tensor, texts: &Tensor) -> candle_core::Result<Tensor> {
    // A transposed view, not a copy: the matmul reads the strides (a copy of a whole
    // retrieval gallery per query block would cost more than the product).
    images.matmul(&texts.transpose(D::Minus1, D::Minus2)?)
}
