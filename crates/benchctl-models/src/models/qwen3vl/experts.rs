//! The decoder's feed-forward: Qwen's SwiGLU MLP, or Qwen3-MoE's sparse mixture of such MLPs
//! (`Qwen3MoeSparseMoeBlock` of `transformers`; Yang et al., "Qwen3 Technical Report", 2025,
//! <https://arxiv.org/abs/2505.09388>), as InternVL3.5's mixture-of-experts checkpoints
//! (e.g. <https://huggingface.co/OpenGVLab/InternVL3_5-30B-A3B-HF>) use it.
//!
//! A mixture routes each token by a softmax over `num_experts` logits (in f32), keeps its
//! `num_experts_per_tok` largest probabilities (renormalised to sum 1 with `norm_topk_prob`),
//! and sums those experts' MLP outputs weighted by them, expert by expert in index order as
//! `transformers` adds them. Qwen3-VL's own mixture (`Qwen3VLMoeTextSparseMoeBlock`, e.g.
//! <https://huggingface.co/Qwen/Qwen3-VL-30B-A3B-Instruct>) routes the same way but always
//! renormalises, and stores its experts otherwise ([`Mixture`]).
//!
//! In half precision the router's logits are computed in f32 from the half-precision hidden
//! states (`transformers` rounds them to the model's dtype before its f32 softmax): a token
//! whose k-th and next probabilities lie closer than bf16 resolves would otherwise take another
//! expert than in f32 by that rounding alone (on the Qwen3-VL-MoE fixture in bf16, rounded logits
//! move one pair of 20 by 0.61 in log P("Yes"); f32 logits keep every pair within 0.095, beside
//! `transformers`' own 0.075: `tests/vqascore.rs`).

use candle_core::{DType, Tensor};

use super::config::Qwen3VlTextConfig;
use crate::models::transformer::Dense;
use crate::models::weights::Weights;
use crate::Result;

/// One SwiGLU MLP: `down(silu(gate(x)) · up(x))`.
#[derive(Debug, Clone)]
pub(crate) struct SwiGlu {
    gate: Dense,
    up: Dense,
    down: Dense,
}

impl SwiGlu {
    fn load(m: &Weights, hidden: usize, intermediate: usize) -> Result<Self> {
        let dense = |name: &str, i: usize, o: usize| Dense::new(m.pp(name).linear(i, o, false)?);
        Ok(Self {
            gate: dense("gate_proj", hidden, intermediate)?,
            up: dense("up_proj", hidden, intermediate)?,
            down: dense("down_proj", intermediate, hidden)?,
        })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        self.down.forward(&(self.gate.forward(xs)?.silu()? * self.up.forward(xs)?)?)
    }
}

/// Which mixture of experts a decoder's sparse layers hold: how the experts are stored and
/// how the router weighs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mixture {
    /// Qwen3-MoE (InternVL3.5's decoders): one MLP per expert (`mlp.experts.{e}.{gate,up,down}_proj`,
    /// the router `mlp.gate`), the chosen probabilities renormalised where `norm_topk_prob` says.
    Qwen3Moe,
    /// Qwen3-VL-MoE: each layer's experts in two 3-D tensors, `mlp.experts.gate_up_proj` (the
    /// gates' rows, then the ups') and `mlp.experts.down_proj`, the chosen probabilities always
    /// renormalised (`transformers` has no `norm_topk_prob` for it). The hub's files hold them as
    /// `(experts, hidden, 2 · moe_intermediate)` and `(experts, moe_intermediate, hidden)`;
    /// `transformers` 5 holds (and saves) them transposed, and reads a tensor of its own shape
    /// as it is, any other transposed: so does benchctl.
    Qwen3VlMoe,
}

/// A decoder layer's feed-forward.
#[derive(Debug, Clone)]
pub(crate) enum FeedForward {
    Dense(SwiGlu),
    Experts(Experts),
}

/// Qwen3-MoE's sparse block: the router's weights (in f32) and each expert's MLP.
#[derive(Debug, Clone)]
pub(crate) struct Experts {
    router: Tensor,
    experts: Vec<SwiGlu>,
    per_token: usize,
    renormalise: bool,
}

impl FeedForward {
    /// Layer `layer`'s feed-forward under `m`: a mixture of `mixture`'s kind where the config
    /// has experts and puts one in this layer (every `decoder_sparse_step`-th, none in
    /// `mlp_only_layers`), else the dense MLP.
    pub(crate) fn load(m: &Weights, t: &Qwen3VlTextConfig, mixture: Option<Mixture>, layer: usize) -> Result<Self> {
        let sparse = t.num_experts > 0
            && !t.mlp_only_layers.contains(&layer)
            && t.decoder_sparse_step > 0
            && (layer + 1).is_multiple_of(t.decoder_sparse_step);
        if !sparse {
            return Ok(FeedForward::Dense(SwiGlu::load(m, t.hidden_size, t.intermediate_size)?));
        }
        let Some(mixture) = mixture else {
            return Err(crate::Error::new(
                crate::ErrorKind::BadConfig,
                format!(
                    "read text_config.num_experts {}: this family's decoder has no mixture of experts",
                    t.num_experts
                ),
            ));
        };
        let (experts, renormalise) = match mixture {
            Mixture::Qwen3Moe => {
                let expert =
                    |e: usize| SwiGlu::load(&m.pp(format!("experts.{e}")), t.hidden_size, t.moe_intermediate_size);
                ((0..t.num_experts).map(expert).collect::<Result<_>>()?, t.norm_topk_prob)
            }
            Mixture::Qwen3VlMoe => (fused_experts(&m.pp("experts"), t)?, true),
        };
        Ok(FeedForward::Experts(Experts {
            router: m
                .get((t.num_experts, t.hidden_size), "gate.weight")?
                .to_dtype(DType::F32)
                .map_err(|e| crate::Error::compute("widen the router's weights", e))?,
            experts,
            per_token: t.num_experts_per_tok,
            renormalise,
        }))
    }

    pub(crate) fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            FeedForward::Dense(mlp) => mlp.forward(xs),
            FeedForward::Experts(experts) => experts.forward(xs),
        }
    }
}

/// Qwen3-VL-MoE's experts from their two 3-D tensors under `m`, each split into its MLP.
fn fused_experts(m: &Weights, t: &Qwen3VlTextConfig) -> Result<Vec<SwiGlu>> {
    let (experts, hidden, inner) = (t.num_experts, t.hidden_size, t.moe_intermediate_size);
    // `transformers`' own shape `(experts, out, in)` as it is; else the hub's `(experts, in, out)`.
    let as_transformers_holds = |name: &str, out: usize, input: usize| -> Result<Tensor> {
        let own = [experts, out, input];
        if m.dims_of(name).is_some_and(|dims| dims == own) {
            return m.get((experts, out, input), name);
        }
        let hub = m.get((experts, input, out), name)?;
        hub.transpose(1, 2).map_err(|e| crate::Error::compute("transpose the experts' weights", e))
    };
    let gate_up = as_transformers_holds("gate_up_proj", 2 * inner, hidden)?;
    let down = as_transformers_holds("down_proj", hidden, inner)?;
    // Expert `e`'s gate, up and down weights, `(out, in)` each.
    let split = |e: usize| -> candle_core::Result<[Tensor; 3]> {
        let rows = gate_up.get(e)?;
        let gate = rows.narrow(0, 0, inner)?.contiguous()?;
        Ok([gate, rows.narrow(0, inner, inner)?.contiguous()?, down.get(e)?.contiguous()?])
    };
    (0..experts)
        .map(|e| {
            let [gate, up, down] = split(e).map_err(|err| crate::Error::compute("split the experts' weights", err))?;
            Ok(SwiGlu {
                gate: Dense::from_weights(gate, None)?,
                up: Dense::from_weights(up, None)?,
                down: Dense::from_weights(down, None)?,
            })
        })
        .collect()
}

impl Experts {
    /// `xs` `(b, s, hidden)`, each token through its experts.
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let shape = xs.shape().clone();
        let flat = xs.flatten(0, xs.rank() - 2)?;
        let logits = flat.to_dtype(DType::F32)?.matmul(&self.router.t()?)?;
        let probs = candle_nn::ops::softmax_last_dim(&logits)?.to_vec2::<f32>()?;
        // Per expert: its tokens and their weights, in token order.
        let mut routed: Vec<(Vec<u32>, Vec<f32>)> = vec![(Vec::new(), Vec::new()); self.experts.len()];
        for (token, row) in probs.iter().enumerate() {
            let mut order: Vec<usize> = (0..row.len()).collect();
            // torch.topk's order: the largest first; equal probabilities by index.
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            let chosen = &order[..self.per_token.min(order.len())];
            let sum: f32 = chosen.iter().map(|&e| row[e]).sum();
            for &e in chosen {
                let weight = if self.renormalise { row[e] / sum } else { row[e] };
                routed[e].0.push(token as u32);
                routed[e].1.push(weight);
            }
        }
        let mut out = flat.zeros_like()?;
        for (expert, (tokens, weights)) in self.experts.iter().zip(routed) {
            if tokens.is_empty() {
                continue;
            }
            let n = tokens.len();
            let index = Tensor::from_vec(tokens, n, flat.device())?;
            let weights = Tensor::from_vec(weights, (n, 1), flat.device())?.to_dtype(flat.dtype())?;
            let output = expert.forward(&flat.index_select(&index, 0)?)?.broadcast_mul(&weights)?;
            out = out.index_add(&index, &output, 0)?;
        }
        out.reshape(shape)
    }
}
