//! T5's encoder-decoder (Raffel et al., 2020, <https://arxiv.org/abs/1910.10683>) as
//! `transformers`' `T5ForConditionalGeneration` computes it, for both of its variants: T5 1.1 /
//! FlanT5 (gated GELU, an untied head) and the original T5 (ReLU, the head tied to the
//! embedding and its input scaled by `d_model^-0.5`).
//!
//! Written here rather than taken from candle-transformers' `t5`: CLIP-FlanT5 feeds the encoder
//! embeddings (the prompt's around the image's projected patches), which candle's encoder does
//! not take, and scoring needs the decoder's logits for a whole answer in one pass, without its
//! generation cache.
//!
//! What is easy to get silently wrong: attention is not scaled by `1/√d`; norms are RMS norms
//! without a bias, computed in f32; positions enter only as a learned bias per head and
//! relative-position bucket, computed by the first layer of each stack and shared by the others
//! (the encoder's buckets bidirectional, the decoder's causal, cross-attention none).

use candle_core::{DType, Device, Tensor, D};

use super::super::transformer::Dense;
use super::super::weights::Weights;
use super::ClipT5Config;
use crate::kernels::{Activation, Then};
use crate::Result;

/// The feed-forward block a config names (`feed_forward_proj`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedForward {
    /// `wo(relu(wi(x)))`: the original T5.
    Relu,
    /// `wo(gelu_tanh(wi_0(x)) · wi_1(x))`: T5 1.1 and FlanT5 (`gated-gelu`, whose activation
    /// `transformers` maps to `gelu_new`).
    GatedGelu,
}

/// A bias-free projection of `inputs` to `outputs`, packed for the CPU tier at load.
fn dense(w: Weights, inputs: usize, outputs: usize) -> Result<Dense> {
    Dense::new(w.linear(inputs, outputs, false)?)
}

/// T5's RMS norm: `w · x / √(mean(x²) + ε)`, the mean in f32, no bias.
#[derive(Debug, Clone)]
struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    fn load(w: &Weights, width: usize, eps: f64) -> Result<Self> {
        Ok(Self { weight: w.get(width, "weight")?, eps })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let x = xs.to_dtype(DType::F32)?;
        let rms = (x.sqr()?.mean_keepdim(D::Minus1)? + self.eps)?.sqrt()?;
        x.broadcast_div(&rms)?.to_dtype(self.weight.dtype())?.broadcast_mul(&self.weight)
    }
}

/// Multi-head attention without scaling or biases, `q`, `k`, `v`, `o` of `heads · d_kv`.
#[derive(Debug, Clone)]
struct Attention {
    q: Dense,
    k: Dense,
    v: Dense,
    o: Dense,
    heads: usize,
    d_kv: usize,
}

impl Attention {
    fn load(w: &Weights, c: &ClipT5Config) -> Result<Self> {
        let inner = c.num_heads * c.d_kv;
        Ok(Self {
            q: dense(w.pp("q"), c.d_model, inner)?,
            k: dense(w.pp("k"), c.d_model, inner)?,
            v: dense(w.pp("v"), c.d_model, inner)?,
            o: dense(w.pp("o"), inner, c.d_model)?,
            heads: c.num_heads,
            d_kv: c.d_kv,
        })
    }

    fn heads_of(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let (b, s, _) = xs.dims3()?;
        xs.reshape((b, s, self.heads, self.d_kv))?.transpose(1, 2)?.contiguous()
    }

    /// `memory` `(b, t, d)`'s keys and values, `(b, heads, t, d_kv)` each.
    fn keys_values(&self, memory: &Tensor) -> candle_core::Result<KeysValues> {
        Ok((self.heads_of(&self.k.forward(memory)?)?, self.heads_of(&self.v.forward(memory)?)?))
    }

    /// `residual` plus the attention of `queries` `(b, s, d)` over `memory`'s keys and values,
    /// `bias` `(1, heads, s, t)` added to the logits (positions, and the causal mask as −∞).
    fn attend_onto(
        &self,
        queries: &Tensor,
        (k, v): &KeysValues,
        bias: Option<&Tensor>,
        residual: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let dtype = queries.dtype();
        let q = self.heads_of(&self.q.forward(queries)?)?;
        let logits = q.matmul(&k.t()?)?.to_dtype(DType::F32)?;
        let logits = match bias {
            Some(bias) => logits.broadcast_add(bias)?,
            None => logits,
        };
        let weights = candle_nn::ops::softmax_last_dim(&logits)?.to_dtype(dtype)?;
        let (b, _, s, _) = q.dims4()?;
        let out = weights.matmul(v)?.transpose(1, 2)?.reshape((b, s, self.heads * self.d_kv))?;
        self.o.forward_then(&out, Then::Add(residual))
    }
}

/// An attention's keys and values over what it attends to, `(b, heads, t, d_kv)` each: the
/// decoder's over the encoder's output are made once per prompt, for every step of a reply.
pub type KeysValues = (Tensor, Tensor);

#[derive(Debug, Clone)]
struct Mlp {
    input: Dense,
    /// The gate's second input projection (`wi_1`), for [`FeedForward::GatedGelu`].
    gate: Option<Dense>,
    output: Dense,
}

impl Mlp {
    fn load(w: &Weights, c: &ClipT5Config, kind: FeedForward) -> Result<Self> {
        Ok(match kind {
            FeedForward::Relu => Self {
                input: dense(w.pp("wi"), c.d_model, c.d_ff)?,
                gate: None,
                output: dense(w.pp("wo"), c.d_ff, c.d_model)?,
            },
            FeedForward::GatedGelu => Self {
                input: dense(w.pp("wi_0"), c.d_model, c.d_ff)?,
                gate: Some(dense(w.pp("wi_1"), c.d_model, c.d_ff)?),
                output: dense(w.pp("wo"), c.d_ff, c.d_model)?,
            },
        })
    }

    /// `residual` plus the block's output (the sum taken as each output tile is finished,
    /// on packed weights; the activation too).
    fn forward_onto(&self, xs: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        let hidden = match &self.gate {
            Some(gate) => (self.input.forward_then(xs, Then::Activate(Activation::GeluTanh))? * gate.forward(xs)?)?,
            None => self.input.forward(xs)?.relu()?,
        };
        self.output.forward_then(&hidden, Then::Add(residual))
    }
}

/// One block: self-attention, cross-attention (the decoder's), the feed-forward, each
/// pre-normed and added back.
#[derive(Debug, Clone)]
struct Block {
    self_norm: RmsNorm,
    self_attention: Attention,
    cross: Option<(RmsNorm, Attention)>,
    mlp_norm: RmsNorm,
    mlp: Mlp,
}

impl Block {
    fn load(w: &Weights, c: &ClipT5Config, kind: FeedForward, decoder: bool) -> Result<Self> {
        let eps = c.layer_norm_epsilon;
        let layer = |i: usize| w.pp(format!("layer.{i}"));
        let cross = if decoder {
            Some((
                RmsNorm::load(&layer(1).pp("layer_norm"), c.d_model, eps)?,
                Attention::load(&layer(1).pp("EncDecAttention"), c)?,
            ))
        } else {
            None
        };
        let mlp_layer = layer(if decoder { 2 } else { 1 });
        Ok(Self {
            self_norm: RmsNorm::load(&layer(0).pp("layer_norm"), c.d_model, eps)?,
            self_attention: Attention::load(&layer(0).pp("SelfAttention"), c)?,
            cross,
            mlp_norm: RmsNorm::load(&mlp_layer.pp("layer_norm"), c.d_model, eps)?,
            mlp: Mlp::load(&mlp_layer.pp("DenseReluDense"), c, kind)?,
        })
    }

    /// `xs` through the block, its cross-attention (the decoder's) over `memory`.
    fn forward(&self, xs: &Tensor, bias: &Tensor, memory: Option<&KeysValues>) -> candle_core::Result<Tensor> {
        let normed = self.self_norm.forward(xs)?;
        let own = self.self_attention.keys_values(&normed)?;
        let mut xs = self.self_attention.attend_onto(&normed, &own, Some(bias), xs)?;
        if let (Some((norm, attention)), Some(memory)) = (&self.cross, memory) {
            xs = attention.attend_onto(&norm.forward(&xs)?, memory, None, &xs)?;
        }
        self.mlp.forward_onto(&self.mlp_norm.forward(&xs)?, &xs)
    }
}

/// One stack (the encoder's or the decoder's): its blocks, the relative-position bias table of
/// its first block's self-attention, and its final norm.
#[derive(Debug, Clone)]
pub struct Stack {
    blocks: Vec<Block>,
    /// `(num_buckets, heads)`.
    position_bias: Tensor,
    final_norm: RmsNorm,
    /// Whether the self-attention is causal (the decoder).
    causal: bool,
    buckets: usize,
    max_distance: usize,
}

impl Stack {
    /// The stack under `w` (`encoder.` or `decoder.`).
    pub(crate) fn load(w: &Weights, c: &ClipT5Config, kind: FeedForward, decoder: bool) -> Result<Self> {
        let depth = if decoder { c.num_decoder_layers.unwrap_or(c.num_layers) } else { c.num_layers };
        let blocks = (0..depth)
            .map(|i| Block::load(&w.pp(format!("block.{i}")), c, kind, decoder))
            .collect::<Result<Vec<_>>>()?;
        let position_bias = w.get(
            (c.relative_attention_num_buckets, c.num_heads),
            "block.0.layer.0.SelfAttention.relative_attention_bias.weight",
        )?;
        Ok(Self {
            blocks,
            position_bias,
            final_norm: RmsNorm::load(&w.pp("final_layer_norm"), c.d_model, c.layer_norm_epsilon)?,
            causal: decoder,
            buckets: c.relative_attention_num_buckets,
            max_distance: c.relative_attention_max_distance,
        })
    }

    /// `xs` `(b, s, d)` (embedded) through the stack, over `encoded` `(b, t, d)` for the decoder;
    /// the final norm applied.
    pub fn forward(&self, xs: &Tensor, encoded: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let memory = encoded.map(|encoded| self.memory(encoded)).transpose()?;
        self.forward_over(xs, memory.as_deref())
    }

    /// The decoder's keys and values over `encoded` `(b, t, d)`, block by block: what every
    /// step of a reply attends to ([`Stack::forward_over`]).
    pub fn memory(&self, encoded: &Tensor) -> candle_core::Result<Vec<KeysValues>> {
        (self.blocks.iter())
            .map(|block| match &block.cross {
                Some((_, attention)) => attention.keys_values(encoded),
                None => candle_core::bail!("t5: only the decoder attends to the encoder's output"),
            })
            .collect()
    }

    /// [`Stack::forward`] over the decoder's keys and values of the encoder's output, made
    /// once ([`Stack::memory`]).
    pub fn forward_over(&self, xs: &Tensor, memory: Option<&[KeysValues]>) -> candle_core::Result<Tensor> {
        let s = xs.dim(1)?;
        let bias = self.bias(s, xs.device())?;
        let xs = (self.blocks.iter().enumerate())
            .try_fold(xs.clone(), |xs, (i, block)| block.forward(&xs, &bias, memory.map(|m| &m[i])))?;
        self.final_norm.forward(&xs)
    }

    /// The self-attention bias `(1, heads, s, s)` in f32: each head's learned value for the
    /// bucket of `key − query`, and −∞ above the diagonal where causal.
    fn bias(&self, s: usize, device: &Device) -> candle_core::Result<Tensor> {
        let mut buckets = Vec::with_capacity(s * s);
        for query in 0..s as i64 {
            for key in 0..s as i64 {
                buckets.push(relative_bucket(key - query, !self.causal, self.buckets, self.max_distance) as u32);
            }
        }
        let buckets = Tensor::from_vec(buckets, s * s, device)?;
        let heads = self.position_bias.dim(1)?;
        let bias = self.position_bias.to_dtype(DType::F32)?.index_select(&buckets, 0)?.reshape((s, s, heads))?;
        let bias = bias.permute((2, 0, 1))?.unsqueeze(0)?;
        if !self.causal {
            return bias.contiguous();
        }
        let mask: Vec<f32> =
            (0..s).flat_map(|q| (0..s).map(move |k| if k > q { f32::NEG_INFINITY } else { 0.0 })).collect();
        bias.broadcast_add(&Tensor::from_vec(mask, (1, 1, s, s), device)?)
    }
}

/// T5's bucket of a relative position `key − query` (`T5Attention._relative_position_bucket`):
/// half the buckets per direction where bidirectional (later keys in the upper half), else
/// only earlier keys counted; distances below half of a direction's buckets exactly, longer
/// ones logarithmically up to `max_distance`, beyond it the last bucket. The logarithm is taken
/// in f32, in `transformers`' order of operations, so bucket edges fall where they fall there.
pub fn relative_bucket(relative: i64, bidirectional: bool, buckets: usize, max_distance: usize) -> usize {
    let (mut buckets, mut base) = (buckets, 0);
    let distance = if bidirectional {
        buckets /= 2;
        if relative > 0 {
            base = buckets;
        }
        relative.unsigned_abs() as usize
    } else {
        (-relative.min(0)) as usize
    };
    let exact = buckets / 2;
    if distance < exact {
        return base + distance;
    }
    let scale = (max_distance as f64 / exact as f64).ln() as f32;
    let log = ((distance as f32 / exact as f32).ln() / scale * (buckets - exact) as f32) as usize;
    base + (exact + log).min(buckets - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_exact_near_and_logarithmic_far() {
        // T5's defaults: 32 buckets, 128 positions; bidirectional, 16 per direction, 8 exact.
        // Expected values: transformers 4.46's `T5Attention._relative_position_bucket`.
        let b = |r| relative_bucket(r, true, 32, 128);
        assert_eq!((b(0), b(-1), b(1), b(-7), b(7)), (0, 1, 17, 7, 23));
        // 8 · 16^(k/8): 16 opens bucket 10 and 128 the last; beyond it stays last.
        assert_eq!((b(-15), b(-16), b(-127), b(-128), b(-5000)), (9, 10, 15, 15, 15));
        assert_eq!((b(16), b(5000)), (26, 31));
        // Causal: later keys are all bucket 0; earlier ones use all 32 buckets, 16 exact.
        let c = |r| relative_bucket(r, false, 32, 128);
        assert_eq!((c(5), c(-15), c(-16), c(-127), c(-128)), (0, 15, 16, 31, 31));
    }
}
