//! The pieces every architecture here is built from: the MLP activations, multi-head
//! attention, and the pre-norm transformer block of CLIP, OpenCLIP, SigLIP and BLIP's ViT.
//!
//! The towers differ only in names (`q_proj`/`k_proj`/`v_proj` or one fused `qkv`;
//! `out_proj` or `projection`), depth, width and activation, so those are parameters here
//! rather than copies per model.

use candle_core::{Module, Tensor, D};
use candle_nn::Linear;

use super::weights::Weights;
use crate::kernels::{LayerNorm, Then};
use crate::{Error, ErrorKind, Result};

pub use crate::kernels::Activation;

/// How a checkpoint names a block's attention projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttentionNames {
    /// `q_proj`, `k_proj`, `v_proj`, `out_proj` (CLIP, SigLIP).
    Separate,
    /// One `qkv` projection and `projection` (BLIP's ViT).
    Fused,
    /// `q_proj`, `k_proj`, `v_proj` (biased where `qkv_bias`) and `projection_layer` (InternViT).
    ProjectionLayer { qkv_bias: bool },
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
        let activation = Activation::parse(act)?;
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
/// values, split into `heads`; `mask` is added to the `(b, heads, s, t)` logits. In half
/// precision on the CPU, in f32 with one rounding of the output
/// ([`crate::kernels::half_on_cpu`]).
pub(crate) fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    mask: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    if let Some(dtype) = crate::kernels::half_on_cpu(q) {
        use crate::kernels::widen;
        let mask = mask.map(widen).transpose()?;
        return attend(&widen(q)?, &widen(k)?, &widen(v)?, heads, mask.as_ref())?.to_dtype(dtype);
    }
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

/// Self-attention of a fused `(rows, seq, 3·width)` projection in one kernel: benchctl's CUDA
/// kernels on a GPU (with Swin's per-head `bias`), the CPU kernels on contiguous f32 CPU
/// tensors; `None` where neither applies (the caller composes it from candle's operations).
pub(crate) fn fused_self_attention(
    qkv: &Tensor,
    heads: usize,
    bias: Option<&Tensor>,
    mask: Option<&Tensor>,
) -> candle_core::Result<Option<Tensor>> {
    #[cfg(feature = "cuda")]
    if qkv.device().is_cuda() {
        return crate::cuda::self_attention(qkv, heads, bias, mask);
    }
    match bias {
        Some(bias) => crate::kernels::windowed_self_attention(qkv, heads, bias, mask),
        None => crate::kernels::self_attention(qkv, heads, mask),
    }
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
    #[cfg(feature = "cuda")]
    if let Some(bias) = lin.bias().filter(|bias| crate::cuda::epilogue_fits(xs, bias)) {
        return over_rows(xs, |rows| crate::cuda::dense(rows, lin.weight(), bias, Then::Nothing));
    }
    over_rows(xs, |rows| crate::kernels::dense_2d(rows, lin.weight(), lin.bias()))
}

/// `product` applied to `xs` seen as one row per vector of its last dimension, and the rows
/// it returns given `xs`'s leading dimensions back.
pub(crate) fn over_rows(
    xs: &Tensor,
    product: impl FnOnce(&Tensor) -> candle_core::Result<Tensor>,
) -> candle_core::Result<Tensor> {
    let dims = xs.dims();
    let Some((&in_dim, lead)) = dims.split_last() else { candle_core::bail!("dense: a scalar input") };
    let ys = product(&xs.reshape((lead.iter().product::<usize>(), in_dim))?)?;
    let mut out_dims = lead.to_vec();
    out_dims.push(ys.dim(1)?);
    ys.reshape(out_dims)
}

/// A linear layer as the towers run it. On a CPU tier with benchctl's own GEMM its weights
/// are packed once, here, into the micro-kernel's layout and the unpacked copy is let go (so
/// the model takes no more memory); elsewhere it is candle's `Linear`.
#[derive(Debug, Clone)]
pub enum Dense {
    Packed(std::sync::Arc<crate::gemm::PackedDense>),
    Plain(Linear),
}

impl Dense {
    pub fn new(linear: Linear) -> Result<Self> {
        Self::for_tier(linear, benchctl_cpu::Tier::current())
    }

    /// The layer `x · weightᵀ + bias`, `weight` `(out, in)` as checkpoints store it.
    pub fn from_weights(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        Self::new(Linear::new(weight, bias))
    }

    fn for_tier(linear: Linear, tier: benchctl_cpu::Tier) -> Result<Self> {
        match crate::kernels::pack_dense(tier, linear.weight(), linear.bias()) {
            Ok(Some(packed)) => Ok(Dense::Packed(std::sync::Arc::new(packed))),
            Ok(None) => Ok(Dense::Plain(linear)),
            Err(e) => Err(Error::compute("pack a dense layer's weights", e)),
        }
    }

    pub fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_then(xs, Then::Nothing)
    }

    /// The layer, then an activation or a residual sum: on packed weights as each output tile
    /// is finished, on a GPU in one pass after the product, elsewhere as a second step; the
    /// same values either way.
    pub(crate) fn forward_then(&self, xs: &Tensor, then: Then) -> candle_core::Result<Tensor> {
        let linear = match (self, then) {
            (Dense::Packed(packed), Then::Add(residual)) => {
                return over_rows(xs, |rows| {
                    let residual = residual.reshape((rows.dim(0)?, packed.out_dim()))?;
                    crate::kernels::dense_packed(rows, packed, Then::Add(&residual))
                })
            }
            (Dense::Packed(packed), then) => {
                return over_rows(xs, |rows| crate::kernels::dense_packed(rows, packed, then))
            }
            (Dense::Plain(linear), _) => linear,
        };
        #[cfg(feature = "cuda")]
        if let Some(bias) = linear.bias().filter(|bias| crate::cuda::epilogue_fits(xs, bias)) {
            return over_rows(xs, |rows| crate::cuda::dense(rows, linear.weight(), bias, then));
        }
        match then {
            Then::Nothing => dense(linear, xs),
            Then::Activate(activation) => activation.apply(&dense(linear, xs)?),
            Then::Add(residual) => dense(linear, xs)? + residual,
        }
    }
}

/// Multi-head self-attention with q, k and v fused into one projection.
#[derive(Debug, Clone)]
pub(crate) struct Attention {
    qkv: Dense,
    out: Dense,
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
            AttentionNames::ProjectionLayer { qkv_bias } => {
                let part = |name: &str| w.pp(name).linear(t.width, t.width, qkv_bias);
                let out = w.pp("projection_layer").linear(t.width, t.width, true)?;
                (fuse(&part("q_proj")?, &part("k_proj")?, &part("v_proj")?)?, out)
            }
        };
        Ok(Self { qkv: Dense::new(qkv)?, out: Dense::new(out)?, heads: t.heads })
    }

    /// The attention of `xs` plus `residual` (the block's input).
    pub fn forward_plus(&self, xs: &Tensor, mask: Option<&Tensor>, residual: &Tensor) -> candle_core::Result<Tensor> {
        self.out.forward_then(&self.attended(xs, mask)?, Then::Add(residual))
    }

    /// The attention of `xs`, projected out (a block that scales it before the residual).
    pub fn forward(&self, xs: &Tensor, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
        self.out.forward(&self.attended(xs, mask)?)
    }

    /// The attention of `xs` with `on_qkv` applied to the fused `[q | k | v]` projection before
    /// the heads attend (InternViT-6B's query and key norms), projected out.
    pub fn forward_with(
        &self,
        xs: &Tensor,
        mask: Option<&Tensor>,
        on_qkv: impl Fn(Tensor) -> candle_core::Result<Tensor>,
    ) -> candle_core::Result<Tensor> {
        self.out.forward(&self.attended_from(on_qkv(self.qkv.forward(xs)?)?, mask)?)
    }

    /// The heads' attended values of `xs`, before the output projection.
    fn attended(&self, xs: &Tensor, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
        self.attended_from(self.qkv.forward(xs)?, mask)
    }

    /// The heads' attended values of a fused `[q | k | v]` projection.
    fn attended_from(&self, qkv: Tensor, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let width = qkv.dim(D::Minus1)? / 3;
        match fused_self_attention(&qkv, self.heads, None, mask)? {
            Some(attended) => Ok(attended),
            None => {
                let q = qkv.narrow(D::Minus1, 0, width)?;
                let k = qkv.narrow(D::Minus1, width, width)?;
                let v = qkv.narrow(D::Minus1, 2 * width, width)?;
                attend(&q, &k, &v, self.heads, mask)
            }
        }
    }
}

/// Attention of other queries over a sequence (its keys and values), as in attention pooling.
#[derive(Debug, Clone)]
pub(crate) struct QueryAttention {
    q: Dense,
    k: Dense,
    v: Dense,
    out: Dense,
    heads: usize,
}

impl QueryAttention {
    /// From a fused `(3·width, width)` projection, as `nn.MultiheadAttention` stores it.
    pub fn from_fused(qkv: &Linear, out: Linear, heads: usize) -> Result<Self> {
        let width = out.weight().dim(1).map_err(|e| Error::compute("read the attention width", e))?;
        let part = |i: usize| -> Result<Dense> {
            let split = |t: &Tensor| t.narrow(0, i * width, width)?.contiguous();
            let weight = split(qkv.weight()).map_err(|e| Error::compute("split the attention projection", e))?;
            let bias = qkv.bias().map(split).transpose().map_err(|e| Error::compute("split the attention bias", e))?;
            Dense::new(Linear::new(weight, bias))
        };
        Ok(Self { q: part(0)?, k: part(1)?, v: part(2)?, out: Dense::new(out)?, heads })
    }

    pub fn forward(&self, queries: &Tensor, xs: &Tensor) -> candle_core::Result<Tensor> {
        let (q, k, v) = (self.q.forward(queries)?, self.k.forward(xs)?, self.v.forward(xs)?);
        self.out.forward(&attend(&q, &k, &v, self.heads, None)?)
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
    fc1: Dense,
    fc2: Dense,
    activation: Activation,
}

impl Mlp {
    pub fn load(w: &Weights, t: &Tower) -> Result<Self> {
        Ok(Self {
            fc1: Dense::new(w.pp("fc1").linear(t.width, t.intermediate, true)?)?,
            fc2: Dense::new(w.pp("fc2").linear(t.intermediate, t.width, true)?)?,
            activation: t.activation,
        })
    }

    /// `fc2(act(fc1(xs))) + residual`.
    pub fn forward_plus(&self, xs: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        let hidden = self.fc1.forward_then(xs, Then::Activate(self.activation))?;
        self.fc2.forward_then(&hidden, Then::Add(residual))
    }

    /// `fc2(act(fc1(xs)))`.
    pub fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        self.fc2.forward(&self.fc1.forward_then(xs, Then::Activate(self.activation))?)
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
        let xs = self.attn.forward_plus(&self.norm1.forward(xs)?, mask, xs)?;
        self.mlp.forward_plus(&self.norm2.forward(&xs)?, &xs)
    }
}

/// `t.depth` blocks under `encoder.layers.N`.
pub(crate) fn load_blocks(w: &Weights, t: &Tower) -> Result<Vec<Block>> {
    (0..t.depth).map(|i| Block::load(&w.pp(format!("encoder.layers.{i}")), t)).collect()
}

pub(crate) fn run_blocks(blocks: &[Block], xs: Tensor, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
    blocks.iter().try_fold(xs, |xs, block| block.forward(&xs, mask))
}

/// A `p×p`, stride-`p` convolution as one dense layer over flattened patches:
/// `(b, C, H, W)` → `(b, (H/p)·(W/p), width)`. Through [`Dense`], so on the AVX2 and AVX-512
/// tiers its weights are packed at load like every other layer's (the `gemm` crate's
/// broadcast product took 2.2 % of ViT-B/32's image encoder on AVX-512).
#[derive(Debug, Clone)]
pub(crate) struct PatchEmbedding {
    /// `(width, C·p·p)`, as the conv weight flattens.
    projection: Dense,
    dtype: candle_core::DType,
    patch: usize,
}

impl PatchEmbedding {
    /// The side of a patch in pixels.
    pub fn patch_size(&self) -> usize {
        self.patch
    }

    /// The conv weight `name` of shape `(width, channels, p, p)`, and its bias if `bias`.
    pub fn load(w: &Weights, width: usize, channels: usize, patch: usize, bias: bool) -> Result<Self> {
        let weight = w.get((width, channels, patch, patch), "weight")?;
        let bias = if bias { Some(w.get(width, "bias")?) } else { None };
        Self::from_conv(weight, bias)
    }

    /// From a conv weight `(width, channels, p, p)` and its bias.
    pub fn from_conv(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        let (width, channels, patch, _) = weight.dims4().map_err(|e| Error::compute("read the patch embedding", e))?;
        let weight = weight
            .reshape((width, channels * patch * patch))
            .map_err(|e| Error::compute("lay out the patch embedding", e))?;
        let dtype = weight.dtype();
        Ok(Self { projection: Dense::from_weights(weight, bias)?, dtype, patch })
    }

    pub fn forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let (b, c, h, w) = pixels.dims4()?;
        let p = self.patch;
        let (gh, gw) = (h / p, w / p);
        // A convolution of stride p without padding, as the references' patch embeddings are:
        // pixels past the last whole patch (384 px in 14 px patches: 6) are not seen.
        let pixels = if (gh * p, gw * p) == (h, w) {
            pixels.clone()
        } else {
            pixels.narrow(2, 0, gh * p)?.narrow(3, 0, gw * p)?
        };
        let patches = pixels
            .to_dtype(self.dtype)?
            .reshape((b, c, gh, p, gw, p))?
            .permute((0, 2, 4, 1, 3, 5))?
            .reshape((b, gh * gw, c * p * p))?;
        self.projection.forward(&patches)
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

/// `(b, kv_heads, len, d)` keys or values repeated for grouped-query attention:
/// `(b, kv_heads · group, len, d)`, each key-value head serving `group` query heads in turn.
pub(crate) fn repeat_kv(t: &Tensor, group: usize) -> candle_core::Result<Tensor> {
    let (b, kv, len, d) = t.dims4()?;
    t.unsqueeze(2)?.broadcast_as((b, kv, group, len, d))?.reshape((b, kv * group, len, d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// A fixture array of `scripts/fixtures/gen_dense_reference.py` and its shape.
    fn fixture<T: npyz::Deserialize>(name: &str) -> Option<(Vec<T>, Vec<usize>)> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dense").join(name);
        let bytes = std::fs::read(path).ok()?;
        let npy = npyz::NpyFile::new(&bytes[..]).ok()?;
        let shape = npy.shape().iter().map(|&d| d as usize).collect();
        Some((npy.into_vec().ok()?, shape))
    }

    /// On every tier this CPU runs, a layer packed at load gives PyTorch's
    /// `torch.nn.functional.linear` (float64, `scripts/fixtures/gen_dense_reference.py`) within 1e-6 of
    /// the products' magnitude: with and without a bias, over leading dimensions, with edge
    /// tiles in every direction of both tiles (37, 150 and 70 columns; depths 300, 64, 1 and
    /// 700, two depth blocks). So do what follows the product on each finished tile
    /// ([`Then`]): PyTorch's `quick_gelu`, `gelu` and `gelu(approximate="tanh")` of it, and
    /// it plus a residual, within twice that bound. Tiers with benchctl's GEMM pack, the
    /// others stay plain.
    #[test]
    fn packed_layers_match_pytorch_on_every_tier() -> candle_core::Result<()> {
        for case in 0..4 {
            let array = |part: &str| fixture::<f32>(&format!("case{case}-{part}.npy"));
            let (Some((xv, x_shape)), Some((wv, w_shape)), Some((y, y_shape))) =
                (array("x"), array("w"), fixture::<f64>(&format!("case{case}-y.npy")))
            else {
                panic!("fixture case {case} missing or unreadable (run scripts/fixtures/gen_dense_reference.py)")
            };
            let bv = array("b");
            let (k, n) = (w_shape[1], w_shape[0]);
            assert_eq!((x_shape[2], &y_shape[..2], y_shape[2]), (k, &x_shape[..2], n));
            for tier in benchctl_cpu::Tier::available() {
                let x = Tensor::from_vec(xv.clone(), x_shape.clone(), &Device::Cpu)?;
                let w = Tensor::from_vec(wv.clone(), (n, k), &Device::Cpu)?;
                let bias = bv.as_ref().map(|(b, _)| Tensor::from_vec(b.clone(), n, &Device::Cpu)).transpose()?;
                let Ok(layer) = Dense::for_tier(Linear::new(w, bias), tier) else { panic!("packing failed") };
                assert_eq!(
                    matches!(layer, Dense::Packed(_)),
                    crate::gemm::PackedDense::packs_on(tier),
                    "{:?}",
                    tier.isa()
                );
                let near = |out: Tensor, expected: &[f64], slack: f64, what: &str| -> candle_core::Result<()> {
                    assert_eq!(out.dims(), &y_shape[..], "{what}");
                    let out = out.flatten_all()?.to_vec1::<f32>()?;
                    for row in 0..out.len() / n {
                        for j in 0..n {
                            let magnitude: f64 = (0..k).map(|d| (xv[row * k + d] * wv[j * k + d]).abs() as f64).sum();
                            let (got, exact) = (out[row * n + j] as f64, expected[row * n + j]);
                            assert!(
                                (got - exact).abs() <= slack * 1e-6 * (1.0 + magnitude),
                                "{:?} case {case} {what} at ({row}, {j}): {got} vs PyTorch's {exact}",
                                tier.isa()
                            );
                        }
                    }
                    Ok(())
                };
                near(layer.forward(&x)?, &y, 1.0, "linear")?;
                for (name, activation) in [
                    ("quick_gelu", Activation::QuickGelu),
                    ("gelu", Activation::Gelu),
                    ("gelu_tanh", Activation::GeluTanh),
                ] {
                    let Some((expected, _)) = fixture::<f64>(&format!("case{case}-{name}.npy")) else {
                        panic!("fixture case {case} {name} missing (run scripts/fixtures/gen_dense_reference.py)")
                    };
                    near(layer.forward_then(&x, Then::Activate(activation))?, &expected, 2.0, name)?;
                }
                let (Some((rv, r_shape)), Some((expected, _))) =
                    (array("r"), fixture::<f64>(&format!("case{case}-y_plus_r.npy")))
                else {
                    panic!("fixture case {case} residual missing (run scripts/fixtures/gen_dense_reference.py)")
                };
                let residual = Tensor::from_vec(rv, r_shape, &Device::Cpu)?;
                near(layer.forward_then(&x, Then::Add(&residual))?, &expected, 2.0, "plus a residual")?;
            }
        }
        Ok(())
    }
}
