//! The decoder's feed-forward: Qwen's SwiGLU MLP, or Qwen3-MoE's sparse mixture of such MLPs
//! (`Qwen3MoeSparseMoeBlock` of `transformers`; Yang et al., "Qwen3 Technical Report", 2025,
//! <https://arxiv.org/abs/2505.09388>), as InternVL3.5's mixture-of-experts checkpoints
//! (e.g. <https://huggingface.co/OpenGVLab/InternVL3_5-30B-A3B-HF>) use it.
//!
//! A mixture routes each token by a softmax over `num_experts` logits (in f32), keeps its
//! `num_experts_per_tok` largest probabilities (renormalised to sum 1 with `norm_topk_prob`),
//! and sums those experts' MLP outputs weighted by them, expert by expert in index order as
//! `transformers` adds them. The experts are read in the hub's layout, one MLP per expert
//! (`mlp.experts.{e}.{gate,up,down}_proj`, the router `mlp.gate`).

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

/// A decoder layer's feed-forward.
#[derive(Debug, Clone)]
pub(crate) enum FeedForward {
    Dense(SwiGlu),
    Experts(Experts),
}

/// Qwen3-MoE's sparse block: the router's weights and each expert's MLP.
#[derive(Debug, Clone)]
pub(crate) struct Experts {
    router: Tensor,
    experts: Vec<SwiGlu>,
    per_token: usize,
    renormalise: bool,
}

impl FeedForward {
    /// Layer `layer`'s feed-forward under `m`: a mixture where the config has experts and puts
    /// one in this layer (every `decoder_sparse_step`-th, none in `mlp_only_layers`), else the
    /// dense MLP.
    pub(crate) fn load(m: &Weights, t: &Qwen3VlTextConfig, layer: usize) -> Result<Self> {
        let sparse = t.num_experts > 0
            && !t.mlp_only_layers.contains(&layer)
            && t.decoder_sparse_step > 0
            && (layer + 1).is_multiple_of(t.decoder_sparse_step);
        if !sparse {
            return Ok(FeedForward::Dense(SwiGlu::load(m, t.hidden_size, t.intermediate_size)?));
        }
        Ok(FeedForward::Experts(Experts {
            router: m.get((t.num_experts, t.hidden_size), "gate.weight")?,
            experts: (0..t.num_experts)
                .map(|e| SwiGlu::load(&m.pp(format!("experts.{e}")), t.hidden_size, t.moe_intermediate_size))
                .collect::<Result<_>>()?,
            per_token: t.num_experts_per_tok,
            renormalise: t.norm_topk_prob,
        }))
    }

    pub(crate) fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            FeedForward::Dense(mlp) => mlp.forward(xs),
            FeedForward::Experts(experts) => experts.forward(xs),
        }
    }
}

impl Experts {
    /// `xs` `(b, s, hidden)`, each token through its experts.
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let shape = xs.shape().clone();
        let flat = xs.flatten(0, xs.rank() - 2)?;
        let logits = flat.matmul(&self.router.t()?)?;
        let probs = candle_nn::ops::softmax_last_dim(&logits.to_dtype(DType::F32)?)?.to_vec2::<f32>()?;
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
