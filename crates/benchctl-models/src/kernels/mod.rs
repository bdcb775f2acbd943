//! Fused kernels for the encoders' hot loops on CPU: activations, layer norm, dense layers, attention.
//!
//! candle computes `x · σ(1.702 x)` as three passes with three allocations and a scalar
//! `exp`; here each activation is one pass over the buffer, split across the rayon pool, with
//! an `exp` the compiler vectorises. Each kernel is compiled per instruction-set tier
//! (AVX-512, AVX2 + FMA, generic) and runs on the tier `benchctl_cpu::Tier::current` picks. The
//! `exp` and `erf` approximations are accurate to a few ulp (relative error < 4e-7 and
//! absolute error < 2e-7 respectively), far inside the parity tolerance of 1e-4.
//!
//! One file per op family: `activation.rs` (the activations and their `exp`/`erf`), `norm.rs`
//! (layer norm), `dense.rs` (dense layers and their fused epilogues), `attention.rs` (text, ViT
//! and Swin-window self-attention), `rotary.rs` (rotary position embedding); the op adapters they share are here. This module depends on
//! candle and the tiers only; the models build on it, never the other way round.

mod activation;
mod attention;
mod dense;
mod norm;
mod rotary;

pub use activation::{activate, activate_on, Activation};
pub use attention::self_attention;
pub(crate) use attention::windowed_self_attention;
pub use dense::{dense_2d, gemm_isa};
pub(crate) use dense::{dense_packed, pack_dense, Then};
pub use norm::LayerNorm;
pub(crate) use rotary::rotate_pairs_qk;

use candle_core::{CpuStorage, DType, Layout, Shape, Tensor};

/// `Some(dtype)` for an f16 or bf16 tensor on the CPU. The dense layers, attention, layer norms
/// and activations run those as PyTorch's CPU kernels do: on f32 copies, rounding each output
/// once (oneDNN's products accumulate in f32 and add the bias there; its attention keeps the
/// scores, the softmax and the sums in f32). candle rounds after each operation, and the extra roundings
/// moved EVA02-E's bf16 image features five times as far from f32 as open_clip's, and a
/// 1,025-token InternVL tile's log P("Yes") four times as far as transformers'.
pub(crate) fn half_on_cpu(t: &Tensor) -> Option<DType> {
    (t.device().is_cpu() && matches!(t.dtype(), DType::BF16 | DType::F16)).then_some(t.dtype())
}

/// An f32, contiguous copy of `t`, for [`half_on_cpu`]'s computations.
pub(crate) fn widen(t: &Tensor) -> candle_core::Result<Tensor> {
    t.to_dtype(DType::F32)?.contiguous()
}

/// A custom op's input as an f32 slice, refused (naming the op's inputs `what`) unless it is
/// f32 and contiguous.
pub(super) fn contiguous_f32<'a>(
    what: &str,
    storage: &'a CpuStorage,
    layout: &Layout,
) -> candle_core::Result<&'a [f32]> {
    match (storage, layout.contiguous_offsets()) {
        (CpuStorage::F32(data), Some((a, b))) => Ok(&data[a..b]),
        _ => candle_core::bail!("{what} must be contiguous f32"),
    }
}

/// A fused CPU op over three contiguous f32 inputs. [`F32Op3`] adapts it to candle's
/// `CustomOp3`: one signature and one input check for every such op.
pub(super) trait F32Kernel3: Send + Sync {
    const NAME: &'static str;
    /// The op's inputs as errors name them.
    const INPUTS: &'static str;
    fn run(&self, inputs: [&[f32]; 3], layouts: [&Layout; 3]) -> candle_core::Result<(CpuStorage, Shape)>;
}

/// A [`F32Kernel3`] as a candle `CustomOp3`: its inputs refused unless f32 and contiguous.
pub(super) struct F32Op3<K>(pub K);

impl<K: F32Kernel3> candle_core::CustomOp3 for F32Op3<K> {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_layout: &Layout,
        w: &CpuStorage,
        w_layout: &Layout,
        b: &CpuStorage,
        b_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let inputs = [
            contiguous_f32(K::INPUTS, x, x_layout)?,
            contiguous_f32(K::INPUTS, w, w_layout)?,
            contiguous_f32(K::INPUTS, b, b_layout)?,
        ];
        self.0.run(inputs, [x_layout, w_layout, b_layout])
    }
}

/// `values` folded into 16 lanes (lane `l` takes values `l`, `l + 16`, …), each from `init`.
#[inline(always)]
pub(super) fn lanewise(values: &[f32], init: f32, fold: impl Fn(f32, f32) -> f32) -> [f32; 16] {
    let mut lanes = [init; 16];
    let chunks = values.chunks_exact(16);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = fold(*lane, v);
        }
    }
    for (lane, &v) in lanes.iter_mut().zip(rest) {
        *lane = fold(*lane, v);
    }
    lanes
}

#[cfg(test)]
mod tests {
    use super::activation::{apply, erf, exp};
    use super::attention::{self_attention_on, windowed_self_attention_on, LONG_SEQUENCE, TILE};
    use super::norm::layer_norm_row;
    use super::*;
    use benchctl_cpu::Tier;
    use candle_core::{DType, Tensor};

    #[test]
    fn exp_and_erf_are_accurate() {
        // The whole range before the clamps (the results stay normal floats), where the
        // exponent is taken from the bits of `MAGIC + n`.
        for i in -8700..=8830 {
            let x = i as f32 * 0.01;
            let (ours, std) = (exp(x), x.exp());
            assert!(((ours - std) / std).abs() < 4e-7, "exp({x}): {ours} vs {std}");
        }
        // Past 88.37 the power of two overflows: +∞, where e^x itself leaves f32 at 88.72;
        // every caller wants only the limit there (σ → 0, tanh → 1).
        assert!(exp(f32::NAN).is_nan() && exp(88.4) == f32::INFINITY && exp(f32::NEG_INFINITY) < 1e-37);
        for i in -600..=600 {
            let x = i as f64 * 0.01;
            let reference = libm_erf(x);
            assert!((erf(x as f32) as f64 - reference).abs() < 2e-7, "erf({x})");
        }
    }

    /// erf by its Maclaurin series (|x| ≤ 3) or continued fraction, in f64: a reference.
    fn libm_erf(x: f64) -> f64 {
        if x.abs() > 3.0 {
            let z = x.abs();
            // erfc continued fraction (Lentz), accurate to 1e-15 for z > 3.
            let mut f = z;
            for k in (1..60).rev() {
                f = z + (k as f64 / 2.0) / f;
            }
            let erfc = (-z * z).exp() / (f * std::f64::consts::PI.sqrt());
            return (1.0 - erfc).copysign(x);
        }
        let mut term = x;
        let mut sum = x;
        for n in 1..200 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn fused_dense_matches_matmul_plus_bias() -> candle_core::Result<()> {
        let dev = candle_core::Device::Cpu;
        for (m, k, n) in [(1, 3, 5), (37, 64, 24), (200, 96, 130)] {
            let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
            let w = Tensor::randn(0f32, 1.0, (n, k), &dev)?;
            let b = Tensor::randn(0f32, 1.0, n, &dev)?;
            let fused = dense_2d(&x, &w, Some(&b))?;
            let plain = x.matmul(&w.t()?)?.broadcast_add(&b)?;
            let d = (fused - plain)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
            assert!(d < 1e-4, "({m}, {k}, {n}): {d}");
        }
        Ok(())
    }

    /// f16/bf16 on the CPU: each kernel's output is its f32 result rounded once, bit for bit,
    /// where candle's own half-precision operations round after every step.
    #[test]
    fn half_precision_rounds_each_output_once() -> candle_core::Result<()> {
        let dev = candle_core::Device::Cpu;
        let (m, k, n, seq, heads) = (64, 96, 80, 40, 4);
        for dtype in [DType::BF16, DType::F16] {
            let half = |dims: &[usize]| Tensor::randn(0f32, 1.0, dims, &dev)?.to_dtype(dtype);
            let (x, w, b) = (half(&[m, k])?, half(&[n, k])?, half(&[n])?);
            let once = dense_2d(&widen(&x)?, &widen(&w)?, Some(&widen(&b)?))?.to_dtype(dtype)?;
            let ours = dense_2d(&x, &w, Some(&b))?;
            let twice = x.matmul(&w.t()?)?.broadcast_add(&b)?;
            let differ = |a: &Tensor, b: &Tensor| -> candle_core::Result<f32> {
                (a.to_dtype(DType::F32)? - b.to_dtype(DType::F32)?)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()
            };
            assert_eq!(differ(&ours, &once)?, 0.0, "{dtype:?} dense");
            assert!(differ(&twice, &once)? > 0.0, "{dtype:?}: candle's rounding twice went unseen");

            let qkv = half(&[2, seq, 3 * n])?;
            let once = self_attention(&widen(&qkv)?, heads, None)?.map(|a| a.to_dtype(dtype)).transpose()?;
            let ours = self_attention(&qkv, heads, None)?;
            let (Some(ours), Some(once)) = (ours, once) else { panic!("{dtype:?}: the fused path refused") };
            assert_eq!(differ(&ours, &once)?, 0.0, "{dtype:?} attention");
            let (q, kk, v) = (qkv.narrow(2, 0, n)?, qkv.narrow(2, n, n)?, qkv.narrow(2, 2 * n, n)?);
            let attend = crate::models::transformer::attend;
            let composed = attend(&q, &kk, &v, heads, None)?;
            let composed_once = attend(&widen(&q)?, &widen(&kk)?, &widen(&v)?, heads, None)?.to_dtype(dtype)?;
            assert_eq!(differ(&composed, &composed_once)?, 0.0, "{dtype:?} composed attention");

            let gelu = apply(Activation::QuickGelu, &x)?;
            let gelu_once = apply(Activation::QuickGelu, &widen(&x)?)?.to_dtype(dtype)?;
            assert_eq!(differ(&gelu, &gelu_once)?, 0.0, "{dtype:?} activation");

            use candle_core::Module;
            let (scale, shift) = (half(&[k])?, half(&[k])?);
            let normed = LayerNorm::new(scale.clone(), shift.clone(), 1e-5).forward(&x)?;
            let normed_once =
                LayerNorm::new(widen(&scale)?, widen(&shift)?, 1e-5).forward(&widen(&x)?)?.to_dtype(dtype)?;
            assert_eq!(differ(&normed, &normed_once)?, 0.0, "{dtype:?} layer norm");
        }
        Ok(())
    }

    #[test]
    fn fused_self_attention_matches_the_composed_one() -> candle_core::Result<()> {
        let dev = candle_core::Device::Cpu;
        // Heads of 4 to 16 values, and of 48, 64 and 80 (the wide value path, with and without a
        // 16-wide rest), over an odd number of 16-key blocks too (33, 77 keys).
        let shapes = [
            (1, 1, 8, 2),
            (3, 16, 64, 4),
            (2, 50, 96, 12),
            (2, 77, 40, 5),
            (2, 33, 48, 1),
            (2, 50, 128, 2),
            (1, 77, 80, 1),
        ];
        for (batch, seq, width, heads) in shapes {
            let qkv = Tensor::randn(0f32, 1.0, (batch, seq, 3 * width), &dev)?;
            let causal: Vec<f32> =
                (0..seq * seq).map(|n| if n % seq > n / seq { f32::NEG_INFINITY } else { 0.0 }).collect();
            let causal = Tensor::from_vec(causal, (seq, seq), &dev)?;
            for mask in [None, Some(&causal)] {
                let fused = self_attention(&qkv, heads, mask)?
                    .ok_or_else(|| candle_core::Error::Msg("the fused path refused contiguous f32".into()))?;
                let (q, k, v) =
                    (qkv.narrow(2, 0, width)?, qkv.narrow(2, width, width)?, qkv.narrow(2, 2 * width, width)?);
                let composed = crate::models::transformer::attend(&q, &k, &v, heads, mask)?;
                let d = (fused - composed)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
                assert!(d < 1e-5, "({batch}, {seq}, {width}, {heads}), mask {}: {d}", mask.is_some());
            }
        }
        Ok(())
    }

    /// Long unmasked sequences take the packed GEMM (on the tiers that have it) and the short
    /// kernel elsewhere: both equal candle's operations.
    #[test]
    fn long_self_attention_matches_the_composed_one_on_every_tier() -> candle_core::Result<()> {
        let dev = candle_core::Device::Cpu;
        let (batch, seq, width, heads) = (2, LONG_SEQUENCE + TILE / 2 + 3, 72, 4);
        let qkv = (Tensor::randn(0f32, 1.0, (batch, seq, 3 * width), &dev)? * 2.0)?;
        let (q, k, v) = (qkv.narrow(2, 0, width)?, qkv.narrow(2, width, width)?, qkv.narrow(2, 2 * width, width)?);
        let composed = crate::models::transformer::attend(&q, &k, &v, heads, None)?;
        for tier in Tier::available() {
            let fused = self_attention_on(tier, &qkv, heads, None)?
                .ok_or_else(|| candle_core::Error::Msg("the fused path refused contiguous f32".into()))?;
            let d = (fused - &composed)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
            // Sums of `seq` f32 terms in another order than candle's (measured ≤ 1.2e-5 at 1,155 terms).
            assert!(d < 3e-5, "{:?}: {d}", tier.isa());
        }
        Ok(())
    }

    /// Swin's window attention (per-head bias, per-window mask groups) on every tier against
    /// candle's operations: `softmax(q·kᵀ/√d + bias[h] + mask[r mod groups]) · v`.
    #[test]
    fn fused_window_attention_matches_the_composed_one_on_every_tier() -> candle_core::Result<()> {
        let dev = candle_core::Device::Cpu;
        let (groups, images, seq, width, heads) = (4, 2, 9, 12, 3);
        let windows = groups * images;
        let qkv = Tensor::randn(0f32, 1.0, (windows, seq, 3 * width), &dev)?;
        let bias = Tensor::randn(0f32, 1.0, (heads, seq, seq), &dev)?;
        let mask: Vec<f32> = (0..groups * seq * seq).map(|n| if (n * 7) % 5 == 0 { -100.0 } else { 0.0 }).collect();
        let mask = Tensor::from_vec(mask, (groups, seq, seq), &dev)?;
        let head = width / heads;
        let split = |i: usize| -> candle_core::Result<Tensor> {
            qkv.narrow(2, i * width, width)?.reshape((windows, seq, heads, head))?.transpose(1, 2)?.contiguous()
        };
        let (q, k, v) = (split(0)?, split(1)?, split(2)?);
        let logits = (q.matmul(&k.t()?)? * (head as f64).powf(-0.5))?.broadcast_add(&bias.unsqueeze(0)?)?;
        for with_mask in [false, true] {
            let logits = if with_mask {
                logits
                    .reshape((images, groups, heads, seq, seq))?
                    .broadcast_add(&mask.unsqueeze(1)?)?
                    .reshape((windows, heads, seq, seq))?
            } else {
                logits.clone()
            };
            let weights = candle_nn::ops::softmax_last_dim(&logits)?;
            let composed = weights.matmul(&v)?.transpose(1, 2)?.reshape((windows, seq, width))?;
            for tier in Tier::available() {
                let fused = windowed_self_attention_on(tier, &qkv, heads, &bias, with_mask.then_some(&mask))?
                    .ok_or_else(|| candle_core::Error::Msg("the fused path refused contiguous f32".into()))?;
                let d = (fused - &composed)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
                assert!(d < 1e-5, "{:?}, mask {with_mask}: {d}", tier.isa());
            }
        }
        Ok(())
    }

    /// Each tier this CPU runs (BENCHCTL_CPU aside) against the generic one: within 1e-6.
    #[test]
    fn every_tier_matches_the_generic_one() -> candle_core::Result<()> {
        let generic = Tier::generic();
        let xs: Vec<f32> = (-40_000..40_000).map(|i| i as f32 * 2e-4).collect();
        let dev = candle_core::Device::Cpu;
        let qkv = Tensor::randn(0f32, 1.0, (3, 50, 3 * 96), &dev)?;
        let causal: Vec<f32> = (0..50 * 50).map(|n| if n % 50 > n / 50 { f32::NEG_INFINITY } else { 0.0 }).collect();
        let causal = Tensor::from_vec(causal, (50, 50), &dev)?;
        for tier in Tier::available() {
            for act in [Activation::QuickGelu, Activation::Gelu, Activation::GeluTanh] {
                let (mut ours, mut reference) = (vec![0f32; xs.len()], vec![0f32; xs.len()]);
                activate_on(tier, act, &xs, &mut ours);
                activate_on(generic, act, &xs, &mut reference);
                let d = ours.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(d <= 1e-6, "{:?} {act:?}: {d}", tier.isa());
            }
            let width = 768;
            let (weight, bias): (Vec<f32>, Vec<f32>) =
                (0..width).map(|j| (1.0 + j as f32 * 1e-3, j as f32 * -2e-3)).unzip();
            for row in xs.chunks_exact(width).step_by(13) {
                let (mut ours, mut reference) = (vec![0f32; width], vec![0f32; width]);
                layer_norm_row(tier, row, &weight, &bias, 1e-5, &mut ours);
                layer_norm_row(generic, row, &weight, &bias, 1e-5, &mut reference);
                let d = ours.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(d <= 1e-6, "{:?} layer norm: {d}", tier.isa());
            }
            for mask in [None, Some(&causal)] {
                let run = |t: Tier| {
                    self_attention_on(t, &qkv, 12, mask)?.ok_or_else(|| candle_core::Error::Msg("refused".into()))
                };
                let d = (run(tier)? - run(generic)?)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
                assert!(d <= 1e-6, "{:?} attention, mask {}: {d}", tier.isa(), mask.is_some());
            }
        }
        Ok(())
    }

    /// An activation or residual sum applied to each tile as the packed product finishes it
    /// gives the values of a second pass over the output, bit for bit, on every tier with a
    /// micro-kernel, over edge tiles and several depth blocks.
    #[test]
    fn packed_dense_epilogues_equal_a_second_pass_bit_for_bit() -> candle_core::Result<()> {
        let dev = candle_core::Device::Cpu;
        for tier in Tier::available().into_iter().filter(|t| crate::gemm::PackedDense::packs_on(*t)) {
            for (m, k, n) in [(1, 3, 5), (37, 300, 70), (97, 513, 130), (4, 0, 9)] {
                let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
                let w = Tensor::randn(0f32, 0.2, (n, k), &dev)?;
                let b = Tensor::randn(0f32, 1.0, n, &dev)?;
                let residual = Tensor::randn(0f32, 1.0, (m, n), &dev)?;
                let Some(packed) = pack_dense(tier, &w, Some(&b))? else { candle_core::bail!("{tier:?} packs") };
                let plain = dense_packed(&x, &packed, Then::Nothing)?;
                let same = |a: &Tensor, b: &Tensor| -> candle_core::Result<bool> {
                    let (a, b) = (a.flatten_all()?.to_vec1::<f32>()?, b.flatten_all()?.to_vec1::<f32>()?);
                    Ok(a.len() == b.len() && a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()))
                };
                for act in [Activation::QuickGelu, Activation::Gelu, Activation::GeluTanh] {
                    let fused = dense_packed(&x, &packed, Then::Activate(act))?;
                    assert!(same(&fused, &apply(act, &plain)?)?, "{:?} ({m}, {k}, {n}) {act:?}", tier.isa());
                }
                let fused = dense_packed(&x, &packed, Then::Add(&residual))?;
                assert!(same(&fused, &(&plain + &residual)?)?, "{:?} ({m}, {k}, {n}) + residual", tier.isa());
            }
        }
        Ok(())
    }

    /// The fused layer norm against its definition (`torch.nn.LayerNorm`: biased variance,
    /// eps inside the root) in f64, rows with a large mean included, on every tier.
    #[test]
    fn fused_layer_norm_matches_its_definition_on_every_tier() -> candle_core::Result<()> {
        let dev = candle_core::Device::Cpu;
        let (rows, width, eps) = (37, 75, 1e-5);
        let xs = (Tensor::randn(0f32, 1.0, (rows, width), &dev)? + 30.0)?;
        let weight = Tensor::randn(0f32, 1.0, width, &dev)?;
        let bias = Tensor::randn(0f32, 1.0, width, &dev)?;
        let norm = LayerNorm::new(weight.clone(), bias.clone(), eps);
        let (x, w, b) = (xs.flatten_all()?.to_vec1::<f32>()?, weight.to_vec1::<f32>()?, bias.to_vec1::<f32>()?);
        for tier in Tier::available() {
            let mut ours = vec![0f32; x.len()];
            for (out, row) in ours.chunks_mut(width).zip(x.chunks(width)) {
                layer_norm_row(tier, row, &w, &b, eps as f32, out);
            }
            for (i, (out, row)) in ours.chunks(width).zip(x.chunks(width)).enumerate() {
                let mean = row.iter().map(|&v| v as f64).sum::<f64>() / width as f64;
                let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / width as f64;
                for j in 0..width {
                    let exact = (row[j] as f64 - mean) / (var + eps).sqrt() * w[j] as f64 + b[j] as f64;
                    assert!(
                        (out[j] as f64 - exact).abs() < 2e-4,
                        "{:?} row {i} col {j}: {} vs {exact}",
                        tier.isa(),
                        out[j]
                    );
                }
            }
        }
        // The op on a tensor is the current tier's rows.
        let fused = candle_core::Module::forward(&norm, &xs)?.flatten_all()?.to_vec1::<f32>()?;
        let mut rows_current = vec![0f32; x.len()];
        for (out, row) in rows_current.chunks_mut(width).zip(x.chunks(width)) {
            layer_norm_row(Tier::current(), row, &w, &b, eps as f32, out);
        }
        assert_eq!(fused, rows_current);
        Ok(())
    }

    #[test]
    fn fused_activations_match_the_composed_ones() -> candle_core::Result<()> {
        let xs = Tensor::arange(-4000f32, 4000f32, &candle_core::Device::Cpu)?.affine(0.002, 0.0)?;
        for act in [Activation::QuickGelu, Activation::Gelu, Activation::GeluTanh] {
            let d = (apply(act, &xs)? - act.apply_composed(&xs)?)?.abs()?.max(0)?.to_scalar::<f32>()?;
            assert!(d < 1e-6, "{act:?}: {d}");
        }
        Ok(())
    }
}
