//! The Gemma language model as the generative VQAScore models here use it: Gemma 3
//! (<https://arxiv.org/abs/2503.19786>) inside [`super::gemma3`], and Gemma 1's layer layout
//! (Gemma Team, 2024, <https://arxiv.org/abs/2403.08295>), PaliGemma's language model. Both decoders run over token embeddings scaled by `√hidden` (image
//! features replace their tokens' rows unscaled), RMS norms that scale by `1 + w` in f32,
//! grouped-query attention with rotary positions, and a GeGLU MLP; Gemma 3 adds RMS-normed
//! queries and keys and a norm after attention and after the MLP
//! ([`DecoderSpec::sandwich_norms`]).
//!
//! A forward pass takes the keys and values of earlier positions, so a prompt prefix shared by
//! many captions runs once; which positions attend both ways (an image, or PaliGemma's whole
//! prompt) is the caller's.

use std::ops::Range;

use candle_core::{DType, Device, Tensor};

use super::transformer::{over_rows, repeat_kv, Dense};
use super::weights::Weights;
use crate::kernels::Activation;
use crate::vqascore::local::{KvLayout, LayerCache, ReplyState};
use crate::{Error, Result};

/// Gemma's RMS norm: in f32, `x / rms(x) · (1 + w)`, back to the input's dtype.
#[derive(Debug, Clone)]
pub(crate) struct RmsNorm {
    scale: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub fn load(w: &Weights, dim: usize, eps: f64) -> Result<Self> {
        let weight = w.get(dim, "weight")?;
        let scale =
            weight.to_dtype(DType::F32).and_then(|w| w + 1.0).map_err(|e| Error::compute("prepare an RMS norm", e))?;
        Ok(Self { scale, eps })
    }

    pub fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        // candle's fused RMS norm, on f32 with the `1 + w` scale.
        let dtype = xs.dtype();
        candle_nn::ops::rms_norm(&xs.to_dtype(DType::F32)?.contiguous()?, &self.scale, self.eps as f32)?.to_dtype(dtype)
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

    /// `(b, heads, s, d)` rotated for positions `first..first + s`.
    fn apply(&self, xs: &Tensor, first: usize) -> candle_core::Result<Tensor> {
        let s = xs.dim(2)?;
        if first + s > self.cos.dim(0)? {
            candle_core::bail!("position {} is past the {} the model was built for", first + s, self.cos.dim(0)?);
        }
        let dtype = xs.dtype();
        let cos = self.cos.narrow(0, first, s)?.to_dtype(dtype)?;
        let sin = self.sin.narrow(0, first, s)?.to_dtype(dtype)?;
        candle_nn::rotary_emb::rope(&xs.contiguous()?, &cos, &sin)
    }
}

/// The shape of a Gemma decoder, from a checkpoint's `text_config`.
#[derive(Debug, Clone)]
pub(crate) struct DecoderSpec {
    pub vocab: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub eps: f64,
    pub activation: String,
    /// The attention logits' scale (`query_pre_attn_scalar^−½`, or `head_dim^−½`).
    pub scale: f64,
    pub attn_softcap: Option<f64>,
    pub final_softcap: Option<f64>,
    /// Per layer: its sliding window, RoPE base and linear RoPE factor.
    pub layers: Vec<(Option<usize>, f64, f64)>,
    /// Gemma 3's layout: RMS-normed queries and keys, and norms after attention and after
    /// the MLP besides those before them (Gemma 1 has only `input_layernorm` before
    /// attention and `post_attention_layernorm` before the MLP).
    pub sandwich_norms: bool,
    /// Positions the rotary tables cover.
    pub positions: usize,
}

#[derive(Debug, Clone)]
struct DecoderLayer {
    input_norm: RmsNorm,
    q: Dense,
    k: Dense,
    v: Dense,
    o: Dense,
    /// Gemma 3's query and key norms.
    qk_norms: Option<(RmsNorm, RmsNorm)>,
    /// Gemma 3's norm of the attention output.
    post_attention_norm: Option<RmsNorm>,
    pre_feedforward_norm: RmsNorm,
    gate: Dense,
    up: Dense,
    down: Dense,
    /// Gemma 3's norm of the MLP output.
    post_feedforward_norm: Option<RmsNorm>,
    activation: Activation,
    rope: Rope,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    scale: f64,
    softcap: Option<f64>,
}

impl DecoderLayer {
    fn load(w: &Weights, t: &DecoderSpec, rope: Rope) -> Result<Self> {
        let (h, hd) = (t.hidden, t.head_dim);
        let dense = |w: Weights, i: usize, o: usize| Dense::new(w.linear(i, o, false)?);
        let (a, m) = (w.pp("self_attn"), w.pp("mlp"));
        let norm = |name: &str| RmsNorm::load(&w.pp(name), h, t.eps);
        let sandwich = t.sandwich_norms;
        Ok(Self {
            input_norm: norm("input_layernorm")?,
            q: dense(a.pp("q_proj"), h, t.heads * hd)?,
            k: dense(a.pp("k_proj"), h, t.kv_heads * hd)?,
            v: dense(a.pp("v_proj"), h, t.kv_heads * hd)?,
            o: dense(a.pp("o_proj"), t.heads * hd, h)?,
            qk_norms: if sandwich {
                Some((RmsNorm::load(&a.pp("q_norm"), hd, t.eps)?, RmsNorm::load(&a.pp("k_norm"), hd, t.eps)?))
            } else {
                None
            },
            post_attention_norm: if sandwich { Some(norm("post_attention_layernorm")?) } else { None },
            pre_feedforward_norm: norm(if sandwich {
                "pre_feedforward_layernorm"
            } else {
                "post_attention_layernorm"
            })?,
            gate: dense(m.pp("gate_proj"), h, t.intermediate)?,
            up: dense(m.pp("up_proj"), h, t.intermediate)?,
            down: dense(m.pp("down_proj"), t.intermediate, h)?,
            post_feedforward_norm: if sandwich { Some(norm("post_feedforward_layernorm")?) } else { None },
            activation: Activation::parse(&t.activation)?,
            rope,
            heads: t.heads,
            kv_heads: t.kv_heads,
            head_dim: hd,
            scale: t.scale,
            softcap: t.attn_softcap,
        })
    }

    /// `(b, s, hidden)` at positions `offset..offset + s` over `past` keys and values (the
    /// positions before `offset`), `mask` `(s, offset + s)` additive, rotary positions
    /// shifted by `shift`; the layer's output and its keys and values for all positions.
    fn forward(
        &self,
        xs: &Tensor,
        offset: usize,
        shift: usize,
        past: Option<&LayerCache>,
        mask: &Tensor,
    ) -> candle_core::Result<(Tensor, LayerCache)> {
        let (b, s, _) = xs.dims3()?;
        let normed = self.input_norm.forward(xs)?;
        let heads = |t: Tensor, n: usize| t.reshape((b, s, n, self.head_dim))?.transpose(1, 2);
        let mut q = heads(self.q.forward(&normed)?, self.heads)?;
        let mut k = heads(self.k.forward(&normed)?, self.kv_heads)?;
        if let Some((q_norm, k_norm)) = &self.qk_norms {
            (q, k) = (q_norm.forward(&q)?, k_norm.forward(&k)?);
        }
        let v = heads(self.v.forward(&normed)?, self.kv_heads)?.contiguous()?;
        let (q, k) = (self.rope.apply(&q, offset + shift)?, self.rope.apply(&k, offset + shift)?);
        let (k, v) = match past {
            Some((pk, pv)) => (Tensor::cat(&[pk, &k], 2)?, Tensor::cat(&[pv, &v], 2)?),
            None => (k, v),
        };
        let group = self.heads / self.kv_heads;
        let repeat = |t: &Tensor| repeat_kv(t, group);
        let dtype = q.dtype();
        let logits = ((q.contiguous()? * self.scale)?.matmul(&repeat(&k)?.t()?.contiguous()?)?).to_dtype(DType::F32)?;
        let logits = match self.softcap {
            Some(cap) => ((logits / cap)?.tanh()? * cap)?,
            None => logits,
        };
        let weights = candle_nn::ops::softmax_last_dim(&logits.broadcast_add(mask)?)?.to_dtype(dtype)?;
        let attended = weights.matmul(&repeat(&v)?.contiguous()?)?.transpose(1, 2)?.reshape((b, s, ()))?;
        let attended = self.o.forward(&attended)?;
        let attended = match &self.post_attention_norm {
            Some(norm) => norm.forward(&attended)?,
            None => attended,
        };
        let xs = (xs + attended)?;
        let normed = self.pre_feedforward_norm.forward(&xs)?;
        let hidden = (self.activation.apply_composed(&self.gate.forward(&normed)?)? * self.up.forward(&normed)?)?;
        let out = self.down.forward(&hidden)?;
        let out = match &self.post_feedforward_norm {
            Some(norm) => norm.forward(&out)?,
            None => out,
        };
        Ok(((&xs + out)?, (k, v)))
    }
}

/// A Gemma decoder: token embeddings, layers, final norm, and the tied output layer.
#[derive(Debug, Clone)]
pub struct Decoder {
    embed_tokens: Tensor,
    embed_scale: f64,
    layers: Vec<DecoderLayer>,
    windows: Vec<Option<usize>>,
    final_norm: RmsNorm,
    final_softcap: Option<f64>,
    kv_heads: usize,
    head_dim: usize,
    device: Device,
}

impl Decoder {
    /// The decoder under `w` (`embed_tokens`, `layers.N`, `norm`).
    pub(crate) fn load(w: &Weights, spec: &DecoderSpec) -> Result<Self> {
        // One table per kind of layer (Gemma 3 has two), shared: a table for every layer would
        // take a 4B model's 34 layers × 8192 positions × 128 × 2 floats.
        let mut tables: Vec<((u64, u64), Rope)> = Vec::new();
        let mut layers = Vec::with_capacity(spec.layers.len());
        for (i, &(_, base, factor)) in spec.layers.iter().enumerate() {
            let kind = (base.to_bits(), factor.to_bits());
            let rope = match tables.iter().find(|(k, _)| *k == kind) {
                Some((_, rope)) => rope.clone(),
                None => {
                    let rope = Rope::new(spec.head_dim, base, factor, spec.positions, w.device())?;
                    tables.push((kind, rope.clone()));
                    rope
                }
            };
            layers.push(DecoderLayer::load(&w.pp(format!("layers.{i}")), spec, rope)?);
        }
        // √hidden rounded to the weights' dtype, as transformers multiplies by it.
        let embed_scale = Tensor::new((spec.hidden as f64).sqrt() as f32, w.device())
            .and_then(|s| s.to_dtype(w.dtype())?.to_dtype(DType::F32)?.to_scalar::<f32>())
            .map_err(|e| Error::compute("round the embedding scale", e))?;
        Ok(Self {
            embed_tokens: w.get((spec.vocab, spec.hidden), "embed_tokens.weight")?,
            embed_scale: f64::from(embed_scale),
            windows: spec.layers.iter().map(|l| l.0).collect(),
            layers,
            final_norm: RmsNorm::load(&w.pp("norm"), spec.hidden, spec.eps)?,
            final_softcap: spec.final_softcap,
            kv_heads: spec.kv_heads,
            head_dim: spec.head_dim,
            device: w.device().clone(),
        })
    }

    pub(crate) fn device(&self) -> &Device {
        &self.device
    }

    /// Embeddings `(b, s, hidden)` of `ids` (b rows of s), scaled by `√hidden`, the rows of
    /// `image_token` taken in order from `images` `(b, per image, hidden)`, unscaled.
    pub(crate) fn embed(&self, ids: &[Vec<u32>], images: Option<(&Tensor, u32)>) -> candle_core::Result<Tensor> {
        let (b, s) = (ids.len(), ids.first().map_or(0, Vec::len));
        // An image token may lie outside the vocabulary (PaliGemma's, Gemma 3's): its row is
        // replaced, so any id stands in for the lookup.
        let vocab = self.embed_tokens.dim(0)? as u32;
        let lookup: Vec<u32> = ids.concat().into_iter().map(|t| if t < vocab { t } else { 0 }).collect();
        let flat = Tensor::from_vec(lookup, b * s, &self.device)?;
        let embedded = (self.embed_tokens.index_select(&flat, 0)? * self.embed_scale)?.reshape((b, s, ()))?;
        let Some((images, image_token)) = images else { return Ok(embedded) };
        let per_image = images.dim(1)?;
        let mut rows = Vec::with_capacity(b);
        for (i, row) in ids.iter().enumerate() {
            let mut parts = Vec::new();
            let (mut at, mut next_image) = (0, 0);
            while at < s {
                let is_image = row[at] == image_token;
                let run = row[at..].iter().take_while(|&&t| (t == image_token) == is_image).count();
                if is_image {
                    if next_image + run > per_image {
                        candle_core::bail!("the prompt holds more image tokens than the model makes ({per_image})");
                    }
                    parts.push(images.get(i)?.narrow(0, next_image, run)?);
                    next_image += run;
                } else {
                    parts.push(embedded.get(i)?.narrow(0, at, run)?);
                }
                at += run;
            }
            if next_image != per_image {
                candle_core::bail!("the prompt holds {next_image} image tokens, the model makes {per_image}");
            }
            rows.push(Tensor::cat(&parts, 0)?);
        }
        Tensor::stack(&rows, 0)
    }

    /// The additive attention mask of `s` queries at `offset..` over `offset + s` keys: causal
    /// (within the window), and both ways among the positions of each span of `both_ways`.
    fn mask(
        &self,
        s: usize,
        offset: usize,
        window: Option<usize>,
        both_ways: &[Range<usize>],
    ) -> candle_core::Result<Tensor> {
        let keys = offset + s;
        let mut values = vec![f32::NEG_INFINITY; s * keys];
        for qi in 0..s {
            let q = offset + qi;
            for k in 0..keys {
                let causal = k <= q && window.is_none_or(|w| q - k < w);
                let together = both_ways.iter().any(|span| span.contains(&q) && span.contains(&k));
                if causal || together {
                    values[qi * keys + k] = 0.0;
                }
            }
        }
        Tensor::from_vec(values, (s, keys), &self.device)
    }

    /// Runs `xs` `(b, s, hidden)` at positions `offset..` over `past` (one cache per layer),
    /// the rotary positions shifted by `shift` (PaliGemma counts from 1), each span of
    /// `both_ways` attending both ways within itself (an image's tokens, PaliGemma's prefix);
    /// the final hidden states and every layer's keys and values.
    pub(crate) fn decode(
        &self,
        xs: Tensor,
        offset: usize,
        shift: usize,
        past: Option<&[LayerCache]>,
        both_ways: &[Range<usize>],
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
                    let m = self.mask(s, offset, window, both_ways)?;
                    masks.push((window, m.clone()));
                    m
                }
            };
            let (out, cache) = layer.forward(&xs, offset, shift, past.map(|p| &p[i]), &mask)?;
            xs = out;
            caches.push(cache);
        }
        Ok((self.final_norm.forward(&xs)?, caches))
    }

    /// One new token per row after a reply's `state`, causal over everything before it, the
    /// rotary positions shifted by `shift`; the hidden states and the state after them.
    pub(crate) fn continue_reply(
        &self,
        state: &ReplyState,
        ids: &[u32],
        shift: usize,
    ) -> candle_core::Result<(Tensor, ReplyState)> {
        let rows: Vec<Vec<u32>> = ids.iter().map(|&id| vec![id]).collect();
        let (hidden, caches) = self.decode(self.embed(&rows, None)?, state.next, shift, Some(&state.caches), &[])?;
        Ok((hidden, ReplyState { caches, next: state.next + 1 }))
    }

    /// Logits over the vocabulary from final hidden states `(…, hidden)`, in f32, soft-capped
    /// where the config says.
    pub(crate) fn logits(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        // One 2-D product over all rows: `broadcast_matmul` would give the transposed table a
        // stride-0 batch dimension, which candle's CPU product copies out per batch entry (2.7
        // GB in f32 for Gemma 3's 262k tokens, per call).
        let table = self.embed_tokens.t()?;
        let logits = over_rows(hidden, |rows| rows.matmul(&table))?.to_dtype(DType::F32)?;
        match self.final_softcap {
            Some(cap) => (logits / cap)?.tanh()? * cap,
            None => Ok(logits),
        }
    }

    /// How this decoder's keys and values lie in a flat image state.
    pub(crate) fn kv_layout(&self) -> KvLayout {
        KvLayout { layers: self.layers.len(), kv_heads: self.kv_heads, head_dim: self.head_dim, positioned: false }
    }
}

/// Where a generative checkpoint keeps its vision tower, language model and projector: the
/// hub's names (`vision_tower.vision_model`, `language_model.model`, `multi_modal_projector`)
/// or those of `transformers` 5's own saves (`model.vision_tower`, `model.language_model`,
/// `model.multi_modal_projector`).
pub(crate) fn multimodal_parts<'a>(w: &Weights<'a>) -> (Weights<'a>, Weights<'a>, Weights<'a>) {
    let vision = ["vision_tower.vision_model", "model.vision_tower.vision_model", "model.vision_tower", "vision_tower"]
        .into_iter()
        .find(|p| w.has(&format!("{p}.post_layernorm.weight")))
        .unwrap_or("vision_tower.vision_model");
    let (language, projector) = if w.has("model.language_model.norm.weight") {
        ("model.language_model", "model.multi_modal_projector")
    } else {
        ("language_model.model", "multi_modal_projector")
    };
    (w.pp(vision), w.pp(language), w.pp(projector))
}
