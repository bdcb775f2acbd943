//! InternViT (`InternVLVisionModel`: InternViT-300M's layer norms, or InternViT-6B's RMS norms
//! with RMS-normed queries and keys) and the projector into the decoder: each 448-pixel tile
//! is 14-pixel patches after a class token, with learned positions (one table, no resampling:
//! every tile is the table's size); pre-norm blocks whose attention and MLP outputs are scaled
//! per channel (`lambda_1`, `lambda_2`) before their residuals; the class token dropped, the
//! patch grid pixel-shuffled by 0.5 (each 2 × 2 block of patches one token of 4 × the width,
//! top-left, top-right, bottom-left, bottom-right) and projected by LayerNorm, linear, GELU,
//! linear.

use candle_core::{Module, Tensor, D};

use super::InternVisionConfig;
use crate::kernels::LayerNorm;
use crate::models::qwen3vl::text::RmsNorm;
use crate::models::transformer::{Activation, Attention, AttentionNames, Dense, Mlp, PatchEmbedding, Tower};
use crate::models::weights::Weights;
use crate::{Error, ErrorKind, Result};

/// A block's norm: InternViT-300M's layer norm, InternViT-6B's RMS norm (`norm_type`).
#[derive(Debug, Clone)]
enum Norm {
    Layer(LayerNorm),
    Rms(RmsNorm),
}

impl Norm {
    fn load(w: &Weights, width: usize, eps: f64, rms: bool) -> Result<Self> {
        Ok(match rms {
            true => Norm::Rms(RmsNorm::load(w, width, eps)?),
            false => Norm::Layer(w.layer_norm(width, eps)?),
        })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Norm::Layer(norm) => norm.forward(xs),
            Norm::Rms(norm) => norm.forward(xs),
        }
    }
}

/// One block: `x + λ₁ · attn(norm(x))`, then `x + λ₂ · mlp(norm(x))`; with InternViT-6B's
/// query and key norms, `q` and `k` RMS-normed over the whole width before the heads split.
#[derive(Debug, Clone)]
struct Layer {
    norm_before: Norm,
    attention: Attention,
    qk_norms: Option<(RmsNorm, RmsNorm)>,
    lambda_1: Tensor,
    norm_after: Norm,
    mlp: Mlp,
    lambda_2: Tensor,
}

impl Layer {
    fn load(w: &Weights, tower: &Tower, v: &InternVisionConfig) -> Result<Self> {
        let rms = v.norm_type == "rms_norm";
        let norm = |name: &str| Norm::load(&w.pp(name), tower.width, tower.eps, rms);
        let a = w.pp("attention");
        // transformers builds these with its RMS norm's own ε, not the config's.
        let qk_norm = |name: &str| RmsNorm::load(&a.pp(name), tower.width, 1e-6);
        Ok(Self {
            norm_before: norm("layernorm_before")?,
            attention: Attention::load(&a, tower)?,
            qk_norms: v.use_qk_norm.then(|| Ok::<_, Error>((qk_norm("q_norm")?, qk_norm("k_norm")?))).transpose()?,
            lambda_1: w.get(tower.width, "lambda_1")?,
            norm_after: norm("layernorm_after")?,
            mlp: Mlp::load(&w.pp("mlp"), tower)?,
            lambda_2: w.get(tower.width, "lambda_2")?,
        })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let normed = self.norm_before.forward(xs)?;
        let attended = match &self.qk_norms {
            None => self.attention.forward(&normed, None)?,
            Some((q_norm, k_norm)) => self.attention.forward_with(&normed, None, |qkv| {
                let width = qkv.dim(D::Minus1)? / 3;
                let part = |i: usize| qkv.narrow(D::Minus1, i * width, width);
                Tensor::cat(&[q_norm.forward(&part(0)?)?, k_norm.forward(&part(1)?)?, part(2)?], D::Minus1)
            })?,
        };
        let xs = (xs + attended.broadcast_mul(&self.lambda_1)?)?;
        let mlp = self.mlp.forward(&self.norm_after.forward(&xs)?)?;
        &xs + mlp.broadcast_mul(&self.lambda_2)?
    }
}

/// `multi_modal_projector`: LayerNorm, linear, activation, linear.
#[derive(Debug, Clone)]
struct Projector {
    norm: LayerNorm,
    linear_1: Dense,
    activation: Activation,
    linear_2: Dense,
}

/// The vision tower and projector: `(n, 3, tile, tile)` tiles → `(n · tokens_per_tile, hidden)`.
#[derive(Debug, Clone)]
pub(crate) struct InternVision {
    patches: PatchEmbedding,
    class_token: Tensor,
    positions: Tensor,
    layers: Vec<Layer>,
    projector: Projector,
    /// Patches along a tile's side.
    grid: usize,
}

impl InternVision {
    /// The tower under `vision` and the projector under `projector` (activation
    /// `projector_act`), feeding a decoder of width `hidden`.
    pub(crate) fn load(
        vision: &Weights,
        projector: &Weights,
        v: &InternVisionConfig,
        projector_act: &str,
        hidden: usize,
    ) -> Result<Self> {
        let tower = Tower::new(
            v.hidden_size,
            v.intermediate_size,
            v.num_hidden_layers,
            v.num_attention_heads,
            &v.hidden_act,
            v.layer_norm_eps,
        )?
        .with_names(AttentionNames::ProjectionLayer { qkv_bias: v.attention_bias });
        let (width, patch) = (v.hidden_size, v.patch_size.side()?);
        let grid = v.image_size.side()? / patch;
        let e = vision.pp("embeddings");
        let shuffled = 4 * width;
        let activation = Activation::parse(projector_act)?;
        Ok(Self {
            patches: PatchEmbedding::load(&e.pp("patch_embeddings.projection"), width, 3, patch, true)?,
            class_token: e.get((1, 1, width), "cls_token")?,
            positions: e.get((1, grid * grid + 1, width), "position_embeddings")?,
            layers: (0..v.num_hidden_layers)
                .map(|i| Layer::load(&vision.pp(format!("encoder.layer.{i}")), &tower, v))
                .collect::<Result<_>>()?,
            projector: Projector {
                norm: projector.pp("layer_norm").layer_norm(shuffled, 1e-5)?,
                linear_1: Dense::new(projector.pp("linear_1").linear(shuffled, hidden, true)?)?,
                activation,
                linear_2: Dense::new(projector.pp("linear_2").linear(hidden, hidden, true)?)?,
            },
            grid,
        })
    }

    /// Tokens each tile becomes: its patches, four to a token.
    pub(crate) fn tokens_per_tile(&self) -> usize {
        self.grid * self.grid / 4
    }

    /// `(n, 3, tile, tile)` tiles → `(n · tokens_per_tile, hidden)`, tile by tile in order.
    pub(crate) fn forward(&self, tiles: &Tensor) -> candle_core::Result<Tensor> {
        let n = tiles.dim(0)?;
        let patches = self.patches.forward(tiles)?;
        let width = patches.dim(2)?;
        let class = self.class_token.broadcast_as((n, 1, width))?.to_dtype(patches.dtype())?;
        let xs = Tensor::cat(&[&class, &patches], 1)?.broadcast_add(&self.positions)?;
        let xs = self.layers.iter().try_fold(xs, |xs, layer| layer.forward(&xs))?;
        let half = self.grid / 2;
        let shuffled = xs
            .narrow(1, 1, self.grid * self.grid)?
            .reshape((n, half, 2, half, 2, width))?
            .permute((0, 1, 3, 2, 4, 5))?
            .reshape((n * half * half, 4 * width))?;
        let p = &self.projector;
        let hidden = p.linear_1.forward(&p.norm.forward(&shuffled)?)?;
        p.linear_2.forward(&p.activation.apply(&hidden)?)
    }
}

/// A tile side that splits into an even number of patches a side (the pixel shuffle's 2 × 2).
pub(crate) fn check_grid(v: &InternVisionConfig) -> Result<()> {
    let (side, patch) = (v.image_size.side()?, v.patch_size.side()?);
    if patch == 0 || side % patch != 0 || (side / patch) % 2 != 0 {
        return Err(Error::new(
            ErrorKind::BadConfig,
            format!("use an InternViT of {side}-pixel images and {patch}-pixel patches: the pixel shuffle needs an even grid"),
        ));
    }
    Ok(())
}
