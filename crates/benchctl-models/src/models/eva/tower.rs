//! timm's `Eva` image tower (`timm/models/eva.py`) as PE-Core and EVA02-CLIP configure it: a
//! class token (or none), learned absolute positions, 2-D rotary embeddings on the patch tokens
//! in every attention layer (none in EVA02-E), pre-norm blocks (post-norm in EVA02-E), and a
//! pooled, projected output.

use candle_core::{DType, Device, Module, Tensor, D};

use super::super::transformer::{attend, fused_self_attention, token, Dense, Mlp, PatchEmbedding, Tower};
use super::super::weights::Weights;
use crate::kernels::LayerNorm;
use crate::{Error, Result};

/// What one family of `Eva` towers fixes besides the shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Family {
    pub name: &'static str,
    /// LayerNorm's ε (PE-Core 1e-5; timm's default, EVA02's, 1e-6).
    pub eps: f64,
    /// A LayerNorm before the blocks, and a patch embedding without bias (PE-Core).
    pub pre_norm: bool,
    /// How the attention's q, k and v projections are stored.
    pub qkv: QkvWeights,
    /// 2-D rotary embeddings on the patch tokens (PE-Core, EVA02; not EVA02-E).
    pub rope: bool,
    /// Residual post-norm blocks, `x + norm1(attn(x))` then `x + norm2(mlp(x))` (timm's
    /// `EvaBlockPostNorm`, EVA02-E); else pre-norm, `x + attn(norm1(x))`.
    pub post_norm: bool,
    /// A LayerNorm on the attention's output before its projection (EVA02's `scale_attn_inner`).
    pub inner_norm: bool,
    /// SwiGLU MLPs with a LayerNorm before their output (EVA02); else GELU MLPs.
    pub swiglu: bool,
    /// The pooling open_clip's config names (`timm_pool`).
    pub pool: Pool,
    /// The rotary grid's coordinate order: columns first (`xy`, PE-Core) or rows (`ij`).
    pub columns_first: bool,
}

/// How a family stores its attention's q, k and v projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkvWeights {
    /// One `qkv` projection with its bias (PE-Core).
    Fused,
    /// One `qkv` weight without bias, `q_bias` and `v_bias` beside it, k unbiased (timm's
    /// `qkv_fused` with `qkv_bias`: EVA02-E).
    FusedSplitBias,
    /// `q_proj`, `k_proj` without bias, `v_proj` (EVA02).
    Separate,
}

/// How the tower pools its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// timm's `AttentionPoolLatent` with this many heads (`map`).
    Latent { heads: usize },
    /// The class token after the final LayerNorm (`token`).
    ClassToken,
}

impl Pool {
    /// open_clip's `timm_pool` name.
    pub fn name(self) -> &'static str {
        match self {
            Pool::Latent { .. } => "map",
            Pool::ClassToken => "token",
        }
    }
}

/// One published tower: timm's name for it, its family and what timm's definition fixes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvaTower {
    pub timm_name: &'static str,
    pub family: Family,
    pub head_dim: usize,
    pub class_token: bool,
    /// Added to each patch index before the rotary coordinates are scaled.
    pub rope_offset: f32,
    /// The grid the rotary coordinates are scaled to (`ref_feat_shape`, square).
    pub rope_reference: usize,
    /// The published shape (benchmarks on random weights; a checkpoint's weights give it when
    /// one loads).
    pub width: usize,
    pub depth: usize,
    pub mlp: usize,
    pub patch: usize,
}

const ROPE_TEMPERATURE: f32 = 10_000.0;

/// The fused projection `qkv` `(b, n, 3·width)` with q and k turned by the rotary table
/// `(sin, cos)` (`(n, width)` each): each channel pair `(x0, x1)` by `x · cos + (−x1, x0) · sin`,
/// as timm's `apply_rot_embed_cat` on interleaved pairs. One fused pass in f32 on the CPU.
fn rotate_qk(qkv: &Tensor, sin: &Tensor, cos: &Tensor) -> candle_core::Result<Tensor> {
    match crate::kernels::rotate_pairs_qk(qkv, sin, cos)? {
        Some(rotated) => Ok(rotated),
        None => rotate_qk_composed(qkv, sin, cos),
    }
}

/// [`rotate_qk`] as candle's operations, rounding after each in half precision as the
/// reference does.
fn rotate_qk_composed(qkv: &Tensor, sin: &Tensor, cos: &Tensor) -> candle_core::Result<Tensor> {
    let (b, n, three_width) = qkv.dims3()?;
    let width = three_width / 3;
    let rotate = |x: Tensor| -> candle_core::Result<Tensor> {
        // Each pair (x0, x1) → (−x1, x0).
        let pairs = x.reshape((b, n, width / 2, 2))?;
        let rotated =
            Tensor::cat(&[&pairs.narrow(3, 1, 1)?.neg()?, &pairs.narrow(3, 0, 1)?], 3)?.reshape((b, n, width))?;
        x.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?
    };
    let q = rotate(qkv.narrow(D::Minus1, 0, width)?)?;
    let k = rotate(qkv.narrow(D::Minus1, width, width)?)?;
    Tensor::cat(&[&q, &k, &qkv.narrow(D::Minus1, 2 * width, width)?], D::Minus1)
}

/// The rotary embedding of a `rows × columns` patch grid for heads of `head_dim` channels, as
/// timm's `RotaryEmbeddingCat` builds it (`in_pixels=False`, f32): `(sin, cos)`, each
/// `rows · columns × head_dim` row-major, the pairs interleaved; the first half of a head's
/// channels turns with the columns (`xy`) or the rows (`ij`), by `(index + offset) / grid ·
/// reference` times `10000^(−i/(head_dim/4))`.
pub fn rotary_table(tower: &EvaTower, (rows, columns): (usize, usize)) -> (Vec<f32>, Vec<f32>) {
    let bands_len = tower.head_dim / 4;
    let bands: Vec<f32> = (0..bands_len).map(|i| 1.0 / ROPE_TEMPERATURE.powf(i as f32 / bands_len as f32)).collect();
    let reference = tower.rope_reference as f32;
    let coordinate = |i: usize, len: usize| (i as f32 + tower.rope_offset) / len as f32 * reference;
    let len = rows * columns * tower.head_dim;
    let (mut sin, mut cos) = (Vec::with_capacity(len), Vec::with_capacity(len));
    for row in 0..rows {
        for column in 0..columns {
            let (row, column) = (coordinate(row, rows), coordinate(column, columns));
            let order = if tower.family.columns_first { [column, row] } else { [row, column] };
            for position in order {
                for band in &bands {
                    let angle = position * band;
                    sin.extend([angle.sin(); 2]);
                    cos.extend([angle.cos(); 2]);
                }
            }
        }
    }
    (sin, cos)
}

/// An `Eva` MLP: GELU, or SwiGLU with a LayerNorm before its output.
#[derive(Debug, Clone)]
enum EvaMlp {
    Gelu(Mlp),
    SwiGlu { gate: Dense, up: Dense, norm: LayerNorm, down: Dense },
}

impl EvaMlp {
    fn load(w: &Weights, tower: &Tower, family: &Family) -> Result<Self> {
        if !family.swiglu {
            return Ok(EvaMlp::Gelu(Mlp::load(w, tower)?));
        }
        let (width, hidden) = (tower.width, tower.intermediate);
        Ok(EvaMlp::SwiGlu {
            gate: Dense::new(w.pp("fc1_g").linear(width, hidden, true)?)?,
            up: Dense::new(w.pp("fc1_x").linear(width, hidden, true)?)?,
            norm: w.pp("norm").layer_norm(hidden, family.eps)?,
            down: Dense::new(w.pp("fc2").linear(hidden, width, true)?)?,
        })
    }

    /// `mlp(xs)`.
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            EvaMlp::Gelu(mlp) => mlp.forward(xs),
            EvaMlp::SwiGlu { gate, up, norm, down } => {
                let hidden = (candle_nn::ops::silu(&gate.forward(xs)?)? * up.forward(xs)?)?;
                down.forward(&norm.forward(&hidden)?)
            }
        }
    }

    /// `mlp(xs) + residual`.
    fn forward_plus(&self, xs: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            EvaMlp::Gelu(mlp) => mlp.forward_plus(xs, residual),
            EvaMlp::SwiGlu { .. } => self.forward(xs)? + residual,
        }
    }
}

/// One block: `x + attn(norm1(x))`, then `x + mlp(norm2(x))` (post-norm: `x + norm1(attn(x))`,
/// then `x + norm2(mlp(x))`), q and k turned by the rotary table where the family has one.
#[derive(Debug, Clone)]
struct EvaBlock {
    norm1: LayerNorm,
    qkv: Dense,
    inner_norm: Option<LayerNorm>,
    proj: Dense,
    norm2: LayerNorm,
    mlp: EvaMlp,
    heads: usize,
    post_norm: bool,
}

impl EvaBlock {
    fn load(w: &Weights, tower: &Tower, family: &Family) -> Result<Self> {
        let (width, eps) = (tower.width, family.eps);
        let a = w.pp("attn");
        let join = |parts: &[&Tensor]| Tensor::cat(parts, 0).map_err(|e| Error::compute("join q, k and v", e));
        // q's and v's biases around k's zeros.
        let biases = |q: &Tensor, v: &Tensor| -> Result<Tensor> {
            let k = q.zeros_like().map_err(|e| Error::compute("join q, k and v", e))?;
            join(&[q, &k, v])
        };
        let qkv = match family.qkv {
            QkvWeights::Separate => {
                let q = a.pp("q_proj").linear(width, width, true)?;
                let k = a.pp("k_proj").linear(width, width, false)?;
                let v = a.pp("v_proj").linear(width, width, true)?;
                let bias = match (q.bias(), v.bias()) {
                    (Some(q), Some(v)) => Some(biases(q, v)?),
                    _ => None,
                };
                Dense::from_weights(join(&[q.weight(), k.weight(), v.weight()])?, bias)?
            }
            QkvWeights::FusedSplitBias => {
                let bias = biases(&a.get(width, "q_bias")?, &a.get(width, "v_bias")?)?;
                Dense::from_weights(a.get((3 * width, width), "qkv.weight")?, Some(bias))?
            }
            QkvWeights::Fused => Dense::new(a.pp("qkv").linear(width, 3 * width, true)?)?,
        };
        Ok(Self {
            norm1: w.pp("norm1").layer_norm(width, eps)?,
            qkv,
            inner_norm: if family.inner_norm { Some(a.pp("norm").layer_norm(width, eps)?) } else { None },
            proj: Dense::new(a.pp("proj").linear(width, width, true)?)?,
            norm2: w.pp("norm2").layer_norm(width, eps)?,
            mlp: EvaMlp::load(&w.pp("mlp"), tower, family)?,
            heads: tower.heads,
            post_norm: family.post_norm,
        })
    }

    /// `rope` is `(sin, cos)`, `(seq, width)` each (the head's table repeated per head; the
    /// identity on the class token), or none.
    fn forward(&self, xs: &Tensor, rope: Option<&(Tensor, Tensor)>) -> candle_core::Result<Tensor> {
        let width = xs.dim(D::Minus1)?;
        let qkv = self.qkv.forward(&if self.post_norm { xs.clone() } else { self.norm1.forward(xs)? })?;
        let qkv = match rope {
            None => qkv,
            Some((sin, cos)) => rotate_qk(&qkv, sin, cos)?,
        };
        let mut attended = match fused_self_attention(&qkv, self.heads, None, None)? {
            Some(attended) => attended,
            None => {
                let part = |i: usize| qkv.narrow(D::Minus1, i * width, width)?.contiguous();
                attend(&part(0)?, &part(1)?, &part(2)?, self.heads, None)?
            }
        };
        if let Some(norm) = &self.inner_norm {
            attended = norm.forward(&attended)?;
        }
        let attended = self.proj.forward(&attended)?;
        if self.post_norm {
            let xs = (xs + self.norm1.forward(&attended)?)?;
            &xs + self.norm2.forward(&self.mlp.forward(&xs)?)?
        } else {
            let xs = (attended + xs)?;
            self.mlp.forward_plus(&self.norm2.forward(&xs)?, &xs)
        }
    }
}

/// timm's `AttentionPoolLatent`: a latent query over every token, a projection, a residual MLP.
#[derive(Debug, Clone)]
struct LatentPool {
    latent: Tensor,
    q: Dense,
    kv: Dense,
    proj: Dense,
    norm: LayerNorm,
    mlp: Mlp,
    heads: usize,
}

impl LatentPool {
    fn load(w: &Weights, tower: &Tower, eps: f64) -> Result<Self> {
        let width = tower.width;
        Ok(Self {
            latent: w.get((1, 1, width), "latent")?,
            q: Dense::new(w.pp("q").linear(width, width, true)?)?,
            kv: Dense::new(w.pp("kv").linear(width, 2 * width, true)?)?,
            proj: Dense::new(w.pp("proj").linear(width, width, true)?)?,
            norm: w.pp("norm").layer_norm(width, eps)?,
            mlp: Mlp::load(&w.pp("mlp"), tower)?,
            heads: tower.heads,
        })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let (b, _, width) = xs.dims3()?;
        let q = self.q.forward(&self.latent.broadcast_as((b, 1, width))?.contiguous()?)?;
        let kv = self.kv.forward(xs)?;
        let (k, v) = (kv.narrow(D::Minus1, 0, width)?, kv.narrow(D::Minus1, width, width)?);
        let pooled = self.proj.forward(&attend(&q, &k.contiguous()?, &v.contiguous()?, self.heads, None)?)?;
        let pooled = self.mlp.forward_plus(&self.norm.forward(&pooled)?, &pooled)?;
        token(&pooled, 0)
    }
}

/// The tower's sizes, from its weights or its published shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub width: usize,
    pub patch: usize,
    pub depth: usize,
    pub mlp: usize,
    /// The latent pool's MLP width (a latent pool only).
    pub pool_mlp: usize,
    /// The head's output: the joint width.
    pub embed: usize,
}

/// An `Eva` image tower with its pooling and its head to the joint width.
#[derive(Debug, Clone)]
pub struct EvaVision {
    tower: EvaTower,
    patch_embedding: PatchEmbedding,
    class_token: Option<Tensor>,
    positions: Tensor,
    norm_pre: Option<LayerNorm>,
    blocks: Vec<EvaBlock>,
    norm: LayerNorm,
    pool: Option<LatentPool>,
    head: Dense,
    /// The rotary table of the trained grid, `(sin, cos)` at `(tokens, width)` (none in EVA02-E).
    rope: Option<(Tensor, Tensor)>,
    image_size: usize,
}

impl EvaVision {
    /// The tower under `w` (`visual.trunk.*` of open_clip's checkpoint) at `image_size` px.
    pub(crate) fn load(w: &Weights, tower: &EvaTower, image_size: usize, dims: &Dims) -> Result<Self> {
        let (family, width) = (tower.family, dims.width);
        let heads = width / tower.head_dim.max(1);
        let grid = image_size / dims.patch;
        let prefix = usize::from(tower.class_token);
        let blocks_tower = Tower::new(width, dims.mlp, dims.depth, heads, "gelu", family.eps)?;
        let (sin, cos) = rotary_table(tower, (grid, grid));
        // Per token: the identity on the class token, then the head's table once per head.
        let table = |values: Vec<f32>, identity: f32| -> Vec<f32> {
            let mut out = vec![identity; prefix * width];
            for row in values.chunks(tower.head_dim) {
                (0..heads).for_each(|_| out.extend_from_slice(row));
            }
            out
        };
        let tokens = prefix + grid * grid;
        let as_tensor = |values: Vec<f32>| {
            Tensor::from_vec(values, (tokens, width), w.device())
                .and_then(|t| t.to_dtype(w.dtype()))
                .map_err(|e| Error::compute("build the rotary table", e))
        };
        let pool = match family.pool {
            Pool::Latent { heads } => {
                let pool_tower = Tower::new(width, dims.pool_mlp, 1, heads, "gelu", family.eps)?;
                Some(LatentPool::load(&w.pp("attn_pool"), &pool_tower, family.eps)?)
            }
            Pool::ClassToken => None,
        };
        Ok(Self {
            tower: *tower,
            patch_embedding: PatchEmbedding::load(&w.pp("patch_embed.proj"), width, 3, dims.patch, !family.pre_norm)?,
            class_token: if tower.class_token { Some(w.get((1, 1, width), "cls_token")?) } else { None },
            positions: w.get((1, tokens, width), "pos_embed")?,
            norm_pre: if family.pre_norm { Some(w.pp("norm_pre").layer_norm(width, family.eps)?) } else { None },
            blocks: (0..dims.depth)
                .map(|i| EvaBlock::load(&w.pp(format!("blocks.{i}")), &blocks_tower, &family))
                .collect::<Result<_>>()?,
            norm: w.pp("norm").layer_norm(width, family.eps)?,
            pool,
            head: Dense::new(w.pp("head").linear(width, dims.embed, true)?)?,
            rope: if family.rope { Some((as_tensor(table(sin, 0.0))?, as_tensor(table(cos, 1.0))?)) } else { None },
            image_size,
        })
    }

    /// The tower of `tower`'s published shape with random weights, projecting to `embed`
    /// (benchmarks).
    pub fn random(tower: &EvaTower, image_size: usize, embed: usize, dtype: DType, device: &Device) -> Result<Self> {
        let dims = Dims {
            width: tower.width,
            patch: tower.patch,
            depth: tower.depth,
            mlp: tower.mlp,
            pool_mlp: 4 * tower.width,
            embed,
        };
        Weights::build_random(dtype, device, "random weights", |w| Self::load(w, tower, image_size, &dims))
    }

    /// `(b, 3, S, S)` → projected image features `(b, embed)`, unnormalised.
    pub fn forward(&self, pixels: &Tensor) -> candle_core::Result<Tensor> {
        let patches = self.patch_embedding.forward(pixels)?;
        let (b, _, width) = patches.dims3()?;
        let xs = match &self.class_token {
            Some(class) => Tensor::cat(&[&class.broadcast_as((b, 1, width))?.contiguous()?, &patches], 1)?,
            None => patches,
        };
        let mut xs = xs.broadcast_add(&self.positions)?;
        if let Some(norm) = &self.norm_pre {
            xs = norm.forward(&xs)?;
        }
        for block in &self.blocks {
            xs = block.forward(&xs, self.rope.as_ref())?;
        }
        let xs = self.norm.forward(&xs)?;
        let pooled = match &self.pool {
            Some(pool) => pool.forward(&xs)?,
            None => token(&xs, 0)?,
        };
        self.head.forward(&pooled)
    }

    pub fn tower(&self) -> &EvaTower {
        &self.tower
    }

    pub fn image_size(&self) -> usize {
        self.image_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The fused rotation is the composed one, bit for bit: the same products and sums, in the
    /// same order, on q and k; v untouched (the class token's row is the identity).
    #[test]
    fn the_fused_rotation_is_the_composed_one_exactly() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let (b, n, width) = (3, 7, 12);
        let qkv = Tensor::randn(0f32, 2.0, (b, n, 3 * width), &dev)?;
        let angles = Tensor::randn(0f32, 3.0, (n, width), &dev)?;
        let identity = |t: Tensor, at_class: f32| -> candle_core::Result<Tensor> {
            Tensor::cat(&[&Tensor::full(at_class, (1, width), &dev)?, &t.narrow(0, 1, n - 1)?], 0)
        };
        let (sin, cos) = (identity(angles.sin()?, 0.0)?, identity(angles.cos()?, 1.0)?);
        let fused = crate::kernels::rotate_pairs_qk(&qkv, &sin, &cos)?
            .ok_or_else(|| candle_core::Error::Msg("contiguous f32 on the CPU is fused".into()))?;
        let composed = rotate_qk_composed(&qkv, &sin, &cos)?;
        let bits = |t: &Tensor| -> candle_core::Result<Vec<u32>> {
            Ok(t.flatten_all()?.to_vec1::<f32>()?.into_iter().map(f32::to_bits).collect())
        };
        assert_eq!(bits(&fused)?, bits(&composed)?);
        assert_ne!(bits(&fused.narrow(2, 0, 2 * width)?)?, bits(&qkv.narrow(2, 0, 2 * width)?)?, "q and k turn");
        assert_eq!(bits(&fused.narrow(2, 2 * width, width)?)?, bits(&qkv.narrow(2, 2 * width, width)?)?);
        assert_eq!(bits(&fused.narrow(1, 0, 1)?)?, bits(&qkv.narrow(1, 0, 1)?)?, "the class token is kept");
        Ok(())
    }
}
