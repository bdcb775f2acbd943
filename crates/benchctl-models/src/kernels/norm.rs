//! Layer norm over the last dimension, two passes (mean, then variance about it) as
//! PyTorch's CPU kernel.

use benchctl_cpu::{madd, per_tier, Tier};
use candle_core::{CpuStorage, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::{lanewise, F32Kernel3, F32Op3};

// One row's layer norm: the mean, then the variance about it (two passes, as PyTorch's CPU
// kernel; candle's `E[x²] − mean²` loses digits when the mean is large), each summed lane by
// lane, then `(x − mean) / √(var + eps) · weight + bias`.
#[inline(always)]
fn layer_norm_row_body<const FUSED: bool>(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    let width = x.len() as f32;
    let mean = lanewise(x, 0.0, |a, b| a + b).into_iter().sum::<f32>() / width;
    let var = lanewise(x, 0.0, |a, v| madd::<FUSED>(v - mean, v - mean, a)).into_iter().sum::<f32>() / width;
    let inv_std = 1.0 / (var + eps).sqrt();
    for (((o, &v), &w), &b) in out.iter_mut().zip(x).zip(weight).zip(bias) {
        *o = madd::<FUSED>((v - mean) * inv_std, w, b);
    }
}

per_tier!(pub(super) fn layer_norm_row = layer_norm_row_body(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]));

/// Layer norm over the last dimension of contiguous f32 rows, rows split across the pool.
struct LayerNormOp {
    eps: f32,
    tier: Tier,
}

impl F32Kernel3 for LayerNormOp {
    const NAME: &'static str = "fused-layer-norm";
    const INPUTS: &'static str = "layer norm: the input, weight and bias";

    fn run(&self, [x, w, b]: [&[f32]; 3], [x_layout, ..]: [&Layout; 3]) -> candle_core::Result<(CpuStorage, Shape)> {
        let width = x_layout.shape().dims().last().copied().unwrap_or(0);
        if width == 0 || w.len() != width || b.len() != width {
            candle_core::bail!("layer norm: a weight of {} and a bias of {} for rows of {width}", w.len(), b.len())
        }
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(width)
            .zip(x.par_chunks(width))
            .with_min_len(16)
            .for_each(|(out, x)| layer_norm_row(self.tier, x, w, b, self.eps, out));
        Ok((CpuStorage::F32(out), x_layout.shape().clone()))
    }
}

/// A layer norm with a bias (`torch.nn.LayerNorm`), as every tower loads it
/// (`Weights::layer_norm`): fused on contiguous f32 CPU tensors (candle's kernel sums each row
/// as one scalar chain, and as `E[x²] − mean²`) and on f32 copies of f16 and bf16 ones,
/// candle's otherwise.
#[derive(Debug, Clone)]
pub struct LayerNorm(candle_nn::LayerNorm);

impl LayerNorm {
    pub fn new(weight: Tensor, bias: Tensor, eps: f64) -> Self {
        Self(candle_nn::LayerNorm::new(weight, bias, eps))
    }
}

impl candle_core::Module for LayerNorm {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let norm = &self.0;
        // f16 and bf16 on the CPU: on f32 copies, rounded once (`super::half_on_cpu`).
        if let (Some(dtype), Some(bias)) = (super::half_on_cpu(xs), norm.bias()) {
            let op = LayerNormOp { eps: norm.eps() as f32, tier: Tier::current() };
            let (weight, bias) = (super::widen(norm.weight())?, super::widen(bias)?);
            return super::widen(xs)?.apply_op3_no_bwd(&weight, &bias, &F32Op3(op))?.to_dtype(dtype);
        }
        match norm.bias() {
            Some(bias)
                if xs.device().is_cpu()
                    && [xs.dtype(), norm.weight().dtype(), bias.dtype()]
                        .iter()
                        .all(|d| *d == candle_core::DType::F32)
                    && xs.is_contiguous() =>
            {
                let op = LayerNormOp { eps: norm.eps() as f32, tier: Tier::current() };
                xs.apply_op3_no_bwd(&norm.weight().contiguous()?, &bias.contiguous()?, &F32Op3(op))
            }
            _ => norm.forward(xs),
        }
    }
}
