//! The activations (QuickGELU, GELU by `erf`, GELU by `tanh`), one fused pass each with an
//! `exp` and `erf` the compiler vectorises.

use benchctl_cpu::{per_tier, Tier};
use candle_core::{CpuStorage, Layout, Shape, Tensor};
use rayon::prelude::*;

/// The MLP activation named by `hidden_act`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `x · σ(1.702 x)`, OpenAI's original.
    QuickGelu,
    /// Exact (erf) GELU, `transformers`' `gelu`.
    Gelu,
    /// Tanh-approximated GELU (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
}

impl Activation {
    pub fn parse(name: &str) -> crate::Result<Self> {
        match name {
            "quick_gelu" => Ok(Self::QuickGelu),
            "gelu" => Ok(Self::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" => Ok(Self::GeluTanh),
            other => Err(crate::Error::new(
                crate::ErrorKind::BadConfig,
                format!("unsupported activation `{other}` (quick_gelu, gelu, gelu_new, gelu_pytorch_tanh)"),
            )),
        }
    }

    /// The name `transformers` uses in `hidden_act`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::QuickGelu => "quick_gelu",
            Self::Gelu => "gelu",
            Self::GeluTanh => "gelu_pytorch_tanh",
        }
    }

    /// The activation of `xs` (fused on CPU f32).
    pub(crate) fn apply(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        apply(*self, xs)
    }

    /// The activation from candle's elementwise ops.
    pub(crate) fn apply_composed(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::QuickGelu => xs * candle_nn::ops::sigmoid(&(xs * 1.702f64)?)?,
            Self::Gelu => xs.gelu_erf(),
            Self::GeluTanh => xs.gelu(),
        }
    }
}

/// `exp(x)` for f32: `2^n · p(r)`, `r = x − n·ln 2` in [−ln2/2, ln2/2], degree-6 polynomial;
/// +∞ above 88.37 (where `2^n` overflows; `e^x` itself does at 88.72).
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.7);
    // Round to nearest with the 1.5·2²³ trick: one add and one subtract, which vectorise
    // (f32::round is round-half-away and becomes a call).
    const MAGIC: f32 = 12_582_912.0;
    let shifted = x * std::f32::consts::LOG2_E + MAGIC;
    let n = shifted - MAGIC;
    // ln 2 split in two for an exact `n·ln 2`.
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let p = 1.0
        + r * (1.0 + r * (0.5 + r * (0.166_666_67 + r * (0.041_666_668 + r * (0.008_333_334 + r * 0.001_388_889)))));
    // `n` as an integer from the bits of `shifted` (`MAGIC + n`, whose unit is one ulp): the
    // same value as `n as i32`, but integer lanes; Rust's saturating `as` (NaN → 0) compiled to
    // a scalar compare and convert per element and made the activations 4 × slower. A NaN
    // `x` still gives NaN through `p`.
    let n = shifted.to_bits().wrapping_sub(MAGIC.to_bits()) as i32;
    f32::from_bits((n.wrapping_add(127) as u32) << 23) * p
}

/// `erf(x)`: Abramowitz & Stegun 7.1.26 refined (max abs error ≈ 1.2e-7 with this form).
#[inline(always)]
#[allow(clippy::excessive_precision)] // the published coefficients, as printed
pub(super) fn erf(x: f32) -> f32 {
    // erf(x) = sign(x) (1 − t·exp(−x² + P(t))), t = 1/(1 + x/2) (Numerical Recipes erfc).
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_9 + t * (1.488_515_9 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * exp(-z * z + poly);
    (1.0 - erfc).copysign(x)
}

#[inline(always)]
fn apply_one(activation: Activation, x: f32) -> f32 {
    match activation {
        Activation::QuickGelu => x / (1.0 + exp(-1.702 * x)),
        Activation::Gelu => 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2)),
        Activation::GeluTanh => {
            // tanh(u) = 1 − 2 / (exp(2u) + 1)
            let u = 0.797_884_6 * (x + 0.044_715 * x * x * x);
            0.5 * x * (2.0 - 2.0 / (exp(2.0 * u) + 1.0))
        }
    }
}

// Compiled per tier by `per_tier!` (the body is inlined into each copy, so its loops are
// vectorised with that tier's features).
#[inline(always)]
fn map_chunk_body<const FUSED: bool>(activation: Activation, src: &[f32], dst: &mut [f32]) {
    // One match outside the loop: each arm's loop vectorises on its own.
    match activation {
        Activation::QuickGelu => dst.iter_mut().zip(src).for_each(|(d, &x)| *d = apply_one(Activation::QuickGelu, x)),
        Activation::Gelu => dst.iter_mut().zip(src).for_each(|(d, &x)| *d = apply_one(Activation::Gelu, x)),
        Activation::GeluTanh => dst.iter_mut().zip(src).for_each(|(d, &x)| *d = apply_one(Activation::GeluTanh, x)),
    }
}

per_tier!(fn map_chunk = map_chunk_body(activation: Activation, src: &[f32], dst: &mut [f32]));

// The same per-element function as `map_chunk_body`, in place: the same results bit for bit.
#[inline(always)]
fn map_in_place_body<const FUSED: bool>(activation: Activation, xs: &mut [f32]) {
    match activation {
        Activation::QuickGelu => xs.iter_mut().for_each(|x| *x = apply_one(Activation::QuickGelu, *x)),
        Activation::Gelu => xs.iter_mut().for_each(|x| *x = apply_one(Activation::Gelu, *x)),
        Activation::GeluTanh => xs.iter_mut().for_each(|x| *x = apply_one(Activation::GeluTanh, *x)),
    }
}

per_tier!(pub(super) fn map_in_place = map_in_place_body(activation: Activation, xs: &mut [f32]));

#[inline(always)]
fn add_in_place_body<const FUSED: bool>(xs: &mut [f32], other: &[f32]) {
    xs.iter_mut().zip(other).for_each(|(x, &o)| *x += o);
}

per_tier!(pub(super) fn add_in_place = add_in_place_body(xs: &mut [f32], other: &[f32]));

/// The activation of `src` into `dst` (same length), in parallel chunks.
pub fn activate(activation: Activation, src: &[f32], dst: &mut [f32]) {
    activate_on(Tier::current(), activation, src, dst)
}

/// [`activate`] on a given tier.
pub fn activate_on(tier: Tier, activation: Activation, src: &[f32], dst: &mut [f32]) {
    const CHUNK: usize = 1 << 14;
    dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| map_chunk(tier, activation, s, d));
}

struct ActivationOp(Activation);

impl candle_core::CustomOp1 for ActivationOp {
    fn name(&self) -> &'static str {
        "fused-activation"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(data) = storage else { candle_core::bail!("fused activation: f32 only") };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("fused activation: contiguous input only")
        };
        let src = &data[start..end];
        let mut out = vec![0f32; src.len()];
        activate(self.0, src, &mut out);
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// The activation of `xs`: fused on contiguous f32 CPU tensors, and on f32 copies of f16 and
/// bf16 ones rounded once ([`super::half_on_cpu`]); candle's ops otherwise.
pub(crate) fn apply(activation: Activation, xs: &Tensor) -> candle_core::Result<Tensor> {
    if let Some(dtype) = super::half_on_cpu(xs) {
        return apply(activation, &super::widen(xs)?)?.to_dtype(dtype);
    }
    if xs.device().is_cpu() && xs.dtype() == candle_core::DType::F32 && xs.is_contiguous() {
        xs.apply_op1_no_bwd(&ActivationOp(activation))
    } else {
        activation.apply_composed(xs)
    }
}
