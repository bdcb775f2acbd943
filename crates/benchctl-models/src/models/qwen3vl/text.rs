//! Qwen3-VL's language model: RMS norms that scale by `w`, RMS-normed queries and keys,
//! grouped-query attention with three-dimensional (time, row, column) rotary positions whose
//! frequencies interleave per `mrope_section`, and DeepStack's features added after the first
//! layers. Qwen2.5-VL's ([`super::super::qwen25vl`]) is the same decoder with biased query,
//! key and value projections, no query/key norms and contiguous rotary sections
//! ([`TextSpec`]).

use candle_core::{DType, Device, Tensor};

use super::attend;
use super::config::Qwen3VlTextConfig;
use super::experts::{FeedForward, Mixture};
use crate::models::transformer::{over_rows, repeat_kv, Dense};
use crate::models::weights::Weights;
use crate::vqascore::local::{KvLayout, LayerCache, ReplyState};
use crate::{Error, Result};

/// Qwen's RMS norm, `x / rms(x) · w` (not Gemma's `1 + w`), in f32 as candle's fused kernel
/// computes it, back to the input's dtype (transformers rounds before multiplying by `w`: in
/// half precision the two differ in the last bit).
#[derive(Debug, Clone)]
pub(crate) struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub(crate) fn load(w: &Weights, dim: usize, eps: f64) -> Result<Self> {
        let weight =
            w.get(dim, "weight")?.to_dtype(DType::F32).map_err(|e| Error::compute("prepare an RMS norm", e))?;
        Ok(Self { weight, eps })
    }

    pub(crate) fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let x = xs.to_dtype(DType::F32)?.contiguous()?;
        candle_nn::ops::rms_norm(&x, &self.weight, self.eps as f32)?.to_dtype(xs.dtype())
    }
}

/// One decoder layer: RMS-normed attention with normed queries and keys and multimodal rotary
/// positions, then an RMS-normed SwiGLU MLP (or a mixture of them, [`FeedForward`]).
#[derive(Debug, Clone)]
struct DecoderLayer {
    input_norm: RmsNorm,
    q: Dense,
    k: Dense,
    v: Dense,
    o: Dense,
    /// Qwen3's query and key norms (none in Qwen2.5).
    qk_norms: Option<(RmsNorm, RmsNorm)>,
    post_norm: RmsNorm,
    feed_forward: FeedForward,
}

impl DecoderLayer {
    fn load(w: &Weights, spec: &TextSpec, layer: usize) -> Result<Self> {
        let (t, head_dim) = (spec.text, spec.head_dim);
        let h = t.hidden_size;
        let dense = |w: Weights, i: usize, o: usize, bias: bool| Dense::new(w.linear(i, o, bias)?);
        let a = w.pp("self_attn");
        let qk_norms = if spec.qk_norms {
            Some((
                RmsNorm::load(&a.pp("q_norm"), head_dim, t.rms_norm_eps)?,
                RmsNorm::load(&a.pp("k_norm"), head_dim, t.rms_norm_eps)?,
            ))
        } else {
            None
        };
        let qkv_bias = spec.qkv_bias;
        Ok(Self {
            input_norm: RmsNorm::load(&w.pp("input_layernorm"), h, t.rms_norm_eps)?,
            q: dense(a.pp("q_proj"), h, t.num_attention_heads * head_dim, qkv_bias)?,
            k: dense(a.pp("k_proj"), h, t.num_key_value_heads * head_dim, qkv_bias)?,
            v: dense(a.pp("v_proj"), h, t.num_key_value_heads * head_dim, qkv_bias)?,
            o: dense(a.pp("o_proj"), t.num_attention_heads * head_dim, h, false)?,
            qk_norms,
            post_norm: RmsNorm::load(&w.pp("post_attention_layernorm"), h, t.rms_norm_eps)?,
            feed_forward: FeedForward::load(&w.pp("mlp"), t, spec.mixture, layer)?,
        })
    }
}

/// The decoder, its output layer (tied to the embeddings unless the checkpoint has its own),
/// and its multimodal rotary frequencies.
#[derive(Debug, Clone)]
pub(crate) struct Decoder {
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
pub(crate) type Positions = [Vec<u32>; 3];

/// What a Qwen-VL family's decoder is: its text config, head width, rotary settings and the
/// layers' variant.
pub(crate) struct TextSpec<'a> {
    pub text: &'a Qwen3VlTextConfig,
    pub head_dim: usize,
    pub rope_theta: f64,
    pub mrope_section: Vec<usize>,
    /// Qwen3-VL's interleaved sections; Qwen2-VL's and Qwen2.5-VL's are contiguous.
    pub interleaved: bool,
    /// Qwen3's RMS norms of queries and keys.
    pub qk_norms: bool,
    /// Qwen2's biases on the query, key and value projections.
    pub qkv_bias: bool,
    /// The family's mixture of experts; `None` for a family without one (a config that gives
    /// it experts is refused).
    pub mixture: Option<Mixture>,
}

impl Decoder {
    pub(crate) fn load(w: &Weights, lm_head: Option<Tensor>, spec: &TextSpec) -> Result<Self> {
        let t = spec.text;
        let head_dim = spec.head_dim;
        let half = head_dim / 2;
        let theta = spec.rope_theta;
        let inv_freq = (0..half).map(|i| 1.0 / (theta as f32).powf((2 * i) as f32 / head_dim as f32)).collect();
        let sections = &spec.mrope_section;
        // Interleaved (Qwen3-VL): t, h, w, t, h, w, … up to each section's share, the rest t;
        // otherwise (Qwen2-VL's layout) one contiguous run per axis.
        let axis_of = (0..half)
            .map(|j| match spec.interleaved {
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
                .map(|i| DecoderLayer::load(&w.pp(format!("layers.{i}")), spec, i))
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

    pub(crate) fn embed(&self, ids: &[Vec<u32>]) -> candle_core::Result<Tensor> {
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
    /// visible), adding `deepstack[l]` to the rows of `image_rows` after layer `l` (its rows
    /// the images' in order); the final hidden states and every layer's keys and values.
    pub(crate) fn decode(
        &self,
        xs: Tensor,
        positions: &Positions,
        past: Option<&[LayerCache]>,
        deepstack: Option<(&[Tensor], &[std::ops::Range<usize>])>,
    ) -> candle_core::Result<(Tensor, Vec<LayerCache>)> {
        let (b, s, _) = xs.dims3()?;
        let (cos, sin) = self.rotary(positions, xs.dtype(), xs.device())?;
        let offset = past.map_or(Ok(0), |p| p[0].0.dim(2))?;
        let causal = CausalTiles::new(s, offset, xs.device())?;
        let group = self.heads / self.kv_heads;
        let repeat = |t: &Tensor| repeat_kv(t, group);
        let mut xs = xs;
        let mut caches = Vec::with_capacity(self.layers.len());
        for (l, layer) in self.layers.iter().enumerate() {
            let normed = layer.input_norm.forward(&xs)?;
            let heads = |t: Tensor, n: usize| t.reshape((b, s, n, self.head_dim))?.transpose(1, 2)?.contiguous();
            let q = heads(layer.q.forward(&normed)?, self.heads)?;
            let k = heads(layer.k.forward(&normed)?, self.kv_heads)?;
            let (q, k) = match &layer.qk_norms {
                Some((q_norm, k_norm)) => (q_norm.forward(&q)?, k_norm.forward(&k)?),
                None => (q, k),
            };
            let v = heads(layer.v.forward(&normed)?, self.kv_heads)?;
            let q = candle_nn::rotary_emb::rope(&q.contiguous()?, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope(&k.contiguous()?, &cos, &sin)?;
            let (k, v) = match past {
                Some(past) => (Tensor::cat(&[&past[l].0, &k], 2)?, Tensor::cat(&[&past[l].1, &v], 2)?),
                None => (k, v),
            };
            let attended = causal.attend(&q, &repeat(&k)?, &repeat(&v)?, (self.head_dim as f64).powf(-0.5))?;
            xs = (&xs + layer.o.forward(&attended)?)?;
            let normed = layer.post_norm.forward(&xs)?;
            xs = (&xs + layer.feed_forward.forward(&normed)?)?;
            if let Some((features, images)) = &deepstack {
                if let Some(feature) = features.get(l) {
                    xs = add_to_rows(&xs, feature, images)?;
                }
            }
            caches.push((k, v));
        }
        Ok((self.norm.forward(&xs)?, caches))
    }

    /// The final hidden states of `inputs` (rows of one length, text positions), row `i` after
    /// the prompt state `image_states[i]` (rows of [`Decoder::kv_layout`]), from the position
    /// each state's caption starts at, the caches in `dtype`; and the state after them, which a
    /// reply continues ([`Decoder::continue_reply`]).
    pub(crate) fn start_reply(
        &self,
        image_states: &Tensor,
        inputs: &[Vec<u32>],
        dtype: DType,
    ) -> candle_core::Result<(Tensor, ReplyState)> {
        let (past, _, first) = self.kv_layout().unflatten(image_states, dtype)?;
        let s = inputs[0].len() as u32;
        let positions: Positions = std::array::from_fn(|_| (first..first + s).collect());
        let (hidden, caches) = self.decode(self.embed(inputs)?, &positions, Some(&past), None)?;
        Ok((hidden, ReplyState { caches, next: (first + s) as usize }))
    }

    /// One new token per row after a reply's `state` (text positions, one past the last).
    pub(crate) fn continue_reply(&self, state: &ReplyState, ids: &[u32]) -> candle_core::Result<(Tensor, ReplyState)> {
        let rows: Vec<Vec<u32>> = ids.iter().map(|&id| vec![id]).collect();
        let positions: Positions = std::array::from_fn(|_| vec![state.next as u32]);
        let (hidden, caches) = self.decode(self.embed(&rows)?, &positions, Some(&state.caches), None)?;
        Ok((hidden, ReplyState { caches, next: state.next + 1 }))
    }

    /// Logits over the vocabulary at final hidden states `(…, hidden)`, in f32.
    pub(crate) fn logits(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        let table = match &self.lm_head {
            Some(head) => head.t()?,
            None => self.embed_tokens.t()?,
        };
        over_rows(hidden, |rows| rows.matmul(&table))?.to_dtype(DType::F32)
    }

    /// How the keys and values of a prompt lie in an image state: f32, with the caption's
    /// start position (text after an image resumes past the image's larger side, a position
    /// half precision could not hold exactly).
    pub(crate) fn kv_layout(&self) -> KvLayout {
        KvLayout { layers: self.layers.len(), kv_heads: self.kv_heads, head_dim: self.head_dim, positioned: true }
    }
}

/// A prompt's embeddings `(1, s, hidden)` with the rows of each of `ranges` replaced by the
/// image features of the same place in `features` (each `(rows, hidden)`), in order.
pub(crate) fn with_image_rows(
    xs: &Tensor,
    features: &[Tensor],
    ranges: &[std::ops::Range<usize>],
) -> candle_core::Result<Tensor> {
    let mut pieces = Vec::with_capacity(2 * ranges.len() + 1);
    let mut at = 0;
    for (rows, image) in ranges.iter().zip(features) {
        pieces.push(xs.narrow(1, at, rows.start - at)?);
        pieces.push(image.to_dtype(xs.dtype())?.unsqueeze(0)?);
        at = rows.end;
    }
    pieces.push(xs.narrow(1, at, xs.dim(1)? - at)?);
    Tensor::cat(&pieces, 1)
}

/// `xs` `(b, s, hidden)` with `feature`'s rows `(Σ rows, hidden)` added to the rows of `ranges`,
/// in order (DeepStack's features of images one after another).
fn add_to_rows(xs: &Tensor, feature: &Tensor, ranges: &[std::ops::Range<usize>]) -> candle_core::Result<Tensor> {
    let (b, s, hidden) = xs.dims3()?;
    let mut pieces = Vec::with_capacity(2 * ranges.len() + 1);
    let (mut at, mut used) = (0, 0);
    for rows in ranges {
        if rows.start > at {
            pieces.push(xs.narrow(1, at, rows.start - at)?);
        }
        let added = feature.narrow(0, used, rows.len())?.unsqueeze(0)?.broadcast_as((b, rows.len(), hidden))?;
        pieces.push((xs.narrow(1, rows.start, rows.len())? + added)?);
        (at, used) = (rows.end, used + rows.len());
    }
    if s > at {
        pieces.push(xs.narrow(1, at, s - at)?);
    }
    Tensor::cat(&pieces, 1)
}

/// Queries of a long prompt attended at once by [`CausalTiles`]: their logits over a few
/// thousand keys stay a few tens of MB.
const QUERY_TILE: usize = 256;

/// Causal attention of `s` queries at positions `offset..offset + s` over `offset + s` keys,
/// as tiles of queries: a long prompt (an image of 13 tiles is 3,328 tokens) goes
/// [`QUERY_TILE`] queries at a time over only the keys they see, so its logits are never held
/// whole and the masked half is never computed. The tiles' masks are made once per decode and
/// serve every layer.
pub(crate) struct CausalTiles {
    /// Each tile's first query, its number of queries, and its mask `(n, offset + start + n)`.
    tiles: Vec<(usize, usize, Tensor)>,
}

impl CausalTiles {
    pub(crate) fn new(s: usize, offset: usize, device: &Device) -> candle_core::Result<Self> {
        let tiles = (0..s)
            .step_by(QUERY_TILE)
            .map(|start| {
                let (n, keys) = (QUERY_TILE.min(s - start), offset + start + QUERY_TILE.min(s - start));
                let mask: Vec<f32> = (start..start + n)
                    .flat_map(|i| (0..keys).map(move |j| if j <= offset + i { 0.0 } else { f32::NEG_INFINITY }))
                    .collect();
                Ok((start, n, Tensor::from_vec(mask, (n, keys), device)?))
            })
            .collect::<candle_core::Result<_>>()?;
        Ok(Self { tiles })
    }

    /// `q` `(b, heads, s, head_dim)` over keys and values `(b, heads, offset + s, head_dim)`;
    /// `(b, s, heads × head_dim)`.
    pub(crate) fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> candle_core::Result<Tensor> {
        let (s, all_keys) = (q.dim(2)?, k.dim(2)?);
        let tile = |&(start, n, ref mask): &(usize, usize, Tensor)| -> candle_core::Result<Tensor> {
            let keys = mask.dim(1)?;
            let (k, v) =
                if keys == all_keys { (k.clone(), v.clone()) } else { (k.narrow(2, 0, keys)?, v.narrow(2, 0, keys)?) };
            let q = if n == s { q.clone() } else { q.narrow(2, start, n)? };
            attend(&q, &k, &v, scale, Some(mask))
        };
        match self.tiles.as_slice() {
            [one] => tile(one),
            tiles => Tensor::cat(&tiles.iter().map(tile).collect::<candle_core::Result<Vec<_>>>()?, 1),
        }
    }
}
