//! FIBER's text backbone: RoBERTa (Liu et al., "RoBERTa: A Robustly Optimized BERT
//! Pretraining Approach", 2019, <https://arxiv.org/abs/1907.11692>, checkpoint
//! <https://huggingface.co/FacebookAI/roberta-base>) whose top layers also attend from the
//! text to the image tokens ("text-to-image fusion"), as
//! `coarse_grained/fiber/modules/roberta.py` of microsoft/FIBER builds it.
//!
//! A layer is post-norm BERT. In a fused layer, the cross-attention's queries are the
//! self-attention's projected output `a` (before its residual), its keys and values the
//! image tokens, unmasked; its `output.dense` is applied but its `output.LayerNorm` is not,
//! and the result joins the residual as `LayerNorm(alpha_t2i · c + a + h)`. FIBER's last
//! fused layer skips the output LayerNorm (`last_norm=False`).

use crate::kernels::LayerNorm;
use candle_core::{DType, Module, Tensor};

use super::super::transformer::{attend, Activation, Dense};
use super::super::weights::Weights;
use crate::{Error, ErrorKind, Result};

/// The RoBERTa shape (`roberta-base` values by default, from its `config.json`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RobertaShape {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub pad_token_id: u32,
}

impl Default for RobertaShape {
    fn default() -> Self {
        Self {
            vocab_size: 50265,
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            max_position_embeddings: 514,
            type_vocab_size: 1,
            layer_norm_eps: 1e-5,
            pad_token_id: 1,
        }
    }
}

/// Query, key and value of one attention (self or cross), without the output projection.
#[derive(Debug, Clone)]
struct Attention {
    query: Dense,
    key: Dense,
    value: Dense,
    dense: Dense,
    heads: usize,
}

impl Attention {
    fn load(w: &Weights, width: usize, context_width: usize, heads: usize) -> Result<Self> {
        let s = w.pp("self");
        Ok(Self {
            query: Dense::new(s.pp("query").linear(width, width, true)?)?,
            key: Dense::new(s.pp("key").linear(context_width, width, true)?)?,
            value: Dense::new(s.pp("value").linear(context_width, width, true)?)?,
            dense: Dense::new(w.pp("output.dense").linear(width, width, true)?)?,
            heads,
        })
    }

    /// `output.dense(attention(xs → context))`, no residual.
    fn forward(&self, xs: &Tensor, context: &Tensor, mask: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let q = self.query.forward(xs)?;
        let (k, v) = (self.key.forward(context)?, self.value.forward(context)?);
        self.dense.forward(&attend(&q, &k, &v, self.heads, mask)?)
    }
}

#[derive(Debug, Clone)]
struct Layer {
    attention: Attention,
    attention_norm: LayerNorm,
    /// The text-to-image cross-attention and its gate, on fused layers.
    cross: Option<(Attention, f64)>,
    intermediate: Dense,
    output: Dense,
    output_norm: LayerNorm,
}

impl Layer {
    fn forward(
        &self,
        h: &Tensor,
        mask: &Tensor,
        image: Option<&Tensor>,
        last_norm: bool,
    ) -> candle_core::Result<Tensor> {
        let mut a = self.attention.forward(h, h, Some(mask))?;
        if let Some(image) = image {
            let Some((cross, alpha)) = &self.cross else {
                candle_core::bail!("a text layer without cross-attention weights cannot fuse")
            };
            a = ((cross.forward(&a, image, None)? * *alpha)? + a)?;
        }
        let a = self.attention_norm.forward(&(a + h)?)?;
        let hidden = Activation::Gelu.apply(&self.intermediate.forward(&a)?)?;
        let out = (self.output.forward(&hidden)? + a)?;
        if last_norm {
            self.output_norm.forward(&out)
        } else {
            Ok(out)
        }
    }
}

/// The RoBERTa text backbone of FIBER.
#[derive(Debug, Clone)]
pub struct Roberta {
    word_embeddings: Tensor,
    position_embeddings: Tensor,
    token_type: Tensor,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
    pad_token_id: u32,
}

impl Roberta {
    /// `text_transformer.*`; `image_width(i)` is the width of the image tokens fused layer `i`
    /// reads keys and values from, `None` for a layer without fusion.
    pub(crate) fn load(
        w: &Weights,
        shape: &RobertaShape,
        image_width: impl Fn(usize) -> Option<usize>,
    ) -> Result<Self> {
        let (width, heads, eps) = (shape.hidden_size, shape.num_attention_heads, shape.layer_norm_eps);
        if heads == 0 || !width.is_multiple_of(heads) {
            return Err(Error::new(
                ErrorKind::BadConfig,
                format!("use a text width of {width} with {heads} attention heads: the width must be a multiple"),
            ));
        }
        let e = w.pp("embeddings");
        let layers = (0..shape.num_hidden_layers)
            .map(|i| {
                let l = w.pp(format!("encoder.layer.{i}"));
                let cross = match image_width(i) {
                    Some(context) => {
                        let alpha = l.get(1, "alpha_t2i")?;
                        let alpha = alpha
                            .to_dtype(DType::F64)
                            .and_then(|t| t.to_vec1::<f64>())
                            .map_err(|e| Error::compute("read alpha_t2i", e))?[0];
                        Some((Attention::load(&l.pp("crossattention_t2i"), width, context, heads)?, alpha))
                    }
                    None => None,
                };
                Ok(Layer {
                    attention: Attention::load(&l.pp("attention"), width, width, heads)?,
                    attention_norm: l.pp("attention.output.LayerNorm").layer_norm(width, eps)?,
                    cross,
                    intermediate: Dense::new(l.pp("intermediate.dense").linear(
                        width,
                        shape.intermediate_size,
                        true,
                    )?)?,
                    output: Dense::new(l.pp("output.dense").linear(shape.intermediate_size, width, true)?)?,
                    output_norm: l.pp("output.LayerNorm").layer_norm(width, eps)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            word_embeddings: e.get((shape.vocab_size, width), "word_embeddings.weight")?,
            position_embeddings: e.get((shape.max_position_embeddings, width), "position_embeddings.weight")?,
            token_type: e
                .get((shape.type_vocab_size, width), "token_type_embeddings.weight")?
                .narrow(0, 0, 1)
                .map_err(|err| Error::compute("read the token type embedding", err))?,
            embedding_norm: e.pp("LayerNorm").layer_norm(width, eps)?,
            layers,
            pad_token_id: shape.pad_token_id,
        })
    }

    /// `LayerNorm(word + token type 0 + position)` of `(b, L)` ids, with RoBERTa's positions:
    /// `pad + 1, pad + 2, …` on real tokens and `pad` on padding (counted from the ids).
    pub fn embed(&self, ids: &[Vec<u32>]) -> candle_core::Result<Tensor> {
        let (b, len) = (ids.len(), ids.first().map_or(0, Vec::len));
        let max = self.position_embeddings.dim(0)?;
        let pad = self.pad_token_id;
        let mut positions = Vec::with_capacity(b * len);
        for row in ids {
            if row.len() != len {
                candle_core::bail!("text id rows must have one length");
            }
            let mut seen = 0;
            for &id in row {
                if id != pad {
                    seen += 1;
                    positions.push(pad + seen);
                } else {
                    positions.push(pad);
                }
            }
        }
        if positions.iter().any(|&p| p as usize >= max) {
            candle_core::bail!("a text of {len} tokens does not fit {max} position embeddings");
        }
        let device = self.word_embeddings.device();
        let flat: Vec<u32> = ids.iter().flatten().copied().collect();
        let words = self.word_embeddings.index_select(&Tensor::from_vec(flat, b * len, device)?, 0)?;
        let positions = self.position_embeddings.index_select(&Tensor::from_vec(positions, b * len, device)?, 0)?;
        let xs = (words.broadcast_add(&self.token_type)? + positions)?.reshape((b, len, ()))?;
        self.embedding_norm.forward(&xs)
    }

    /// Layers `range` on the text alone.
    pub fn run_layers(&self, range: std::ops::Range<usize>, xs: Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        self.layers[range].iter().try_fold(xs, |xs, layer| layer.forward(&xs, mask, None, true))
    }

    /// Layer `i` attending to `image` tokens.
    pub fn fused_layer(
        &self,
        i: usize,
        xs: &Tensor,
        mask: &Tensor,
        image: &Tensor,
        last_norm: bool,
    ) -> candle_core::Result<Tensor> {
        self.layers[i].forward(xs, mask, Some(image), last_norm)
    }

    pub fn depth(&self) -> usize {
        self.layers.len()
    }
}

/// `(1 − mask) · −10000` as `(b, 1, 1, L)`, `transformers` 4.6's extended attention mask.
pub(crate) fn additive_mask(
    mask: &[Vec<u8>],
    dtype: DType,
    device: &candle_core::Device,
) -> candle_core::Result<Tensor> {
    let (b, len) = (mask.len(), mask.first().map_or(0, Vec::len));
    let values: Vec<f32> = mask.iter().flatten().map(|&m| if m == 1 { 0.0 } else { -10000.0 }).collect();
    Tensor::from_vec(values, (b, 1, 1, len), device)?.to_dtype(dtype)
}
