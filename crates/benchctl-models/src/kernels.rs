//! Fused kernels for the encoders' hot loops on CPU: activations, layer norm, dense layers, attention.
//!
//! candle computes `x · σ(1.702 x)` as three passes with three allocations and a scalar
//! `exp`; here each activation is one pass over the buffer, split across the rayon pool, with
//! an `exp` the compiler vectorises. Each kernel is compiled per instruction-set tier
//! (AVX-512, AVX2 + FMA, generic) and runs on the tier `benchctl_cpu::Tier::current` picks. The
//! `exp` and `erf` approximations are accurate to a few ulp (relative error < 4e-7 and
//! absolute error < 2e-7 respectively), far inside the parity tolerance of 1e-4.
//!
//! This module depends on candle and the tiers only; the models build on it, never the
//! other way round.

use benchctl_cpu::{madd, per_tier, Tier};
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
fn exp(x: f32) -> f32 {
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
fn erf(x: f32) -> f32 {
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

per_tier!(fn map_in_place = map_in_place_body(activation: Activation, xs: &mut [f32]));

#[inline(always)]
fn add_in_place_body<const FUSED: bool>(xs: &mut [f32], other: &[f32]) {
    xs.iter_mut().zip(other).for_each(|(x, &o)| *x += o);
}

per_tier!(fn add_in_place = add_in_place_body(xs: &mut [f32], other: &[f32]));

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

/// The activation of `xs`: fused on contiguous f32 CPU tensors, candle's ops otherwise.
pub(crate) fn apply(activation: Activation, xs: &Tensor) -> candle_core::Result<Tensor> {
    if xs.device().is_cpu() && xs.dtype() == candle_core::DType::F32 && xs.is_contiguous() {
        xs.apply_op1_no_bwd(&ActivationOp(activation))
    } else {
        activation.apply_composed(xs)
    }
}

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

per_tier!(fn layer_norm_row = layer_norm_row_body(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]));

/// A custom op's input as an f32 slice, refused (naming the op's inputs `what`) unless it is
/// f32 and contiguous.
fn contiguous_f32<'a>(what: &str, storage: &'a CpuStorage, layout: &Layout) -> candle_core::Result<&'a [f32]> {
    match (storage, layout.contiguous_offsets()) {
        (CpuStorage::F32(data), Some((a, b))) => Ok(&data[a..b]),
        _ => candle_core::bail!("{what} must be contiguous f32"),
    }
}

/// A fused CPU op over three contiguous f32 inputs. [`F32Op3`] adapts it to candle's
/// `CustomOp3`: one signature and one input check for every such op.
trait F32Kernel3: Send + Sync {
    const NAME: &'static str;
    /// The op's inputs as errors name them.
    const INPUTS: &'static str;
    fn run(&self, inputs: [&[f32]; 3], layouts: [&Layout; 3]) -> candle_core::Result<(CpuStorage, Shape)>;
}

/// A [`F32Kernel3`] as a candle `CustomOp3`: its inputs refused unless f32 and contiguous.
struct F32Op3<K>(K);

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
/// as one scalar chain, and as `E[x²] − mean²`), candle's otherwise.
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

/// The instruction set of the matrix products: the `gemm` crate picks it at run time (its
/// AVX-512 kernels only with the `gemm-avx512` feature), not `BENCHCTL_CPU`.
pub fn gemm_isa() -> benchctl_cpu::Isa {
    use benchctl_cpu::Isa;
    #[cfg(target_arch = "x86_64")]
    {
        if cfg!(feature = "gemm-avx512") && std::arch::is_x86_feature_detected!("avx512f") {
            return Isa::Avx512;
        }
        if std::arch::is_x86_feature_detected!("fma") {
            return Isa::Avx2;
        }
    }
    Isa::Generic
}

/// `x · Wᵀ + b` for a 2-D `x` `(m, k)`, `W` `(n, k)` and `b` `(n)`, all contiguous f32 on
/// the CPU: benchctl's blocked GEMM on the AVX2 and AVX-512 tiers ([`crate::gemm`]), one
/// `gemm` crate call elsewhere; either way the output starts as the bias rows (no separate
/// pass to add it, which costs as much as a fifth of the product on wide layers).
struct DenseOp {
    tier: Tier,
}

impl F32Kernel3 for DenseOp {
    const NAME: &'static str = "dense-with-bias";
    const INPUTS: &'static str = "dense: the input, weights and bias";

    fn run(
        &self,
        [x, w, b]: [&[f32]; 3],
        [x_layout, w_layout, _]: [&Layout; 3],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (m, k) = x_layout.shape().dims2()?;
        let (n, k2) = w_layout.shape().dims2()?;
        if k != k2 || b.len() != n {
            candle_core::bail!("dense: shapes ({m}, {k}) · ({n}, {k2})ᵀ + ({}) disagree", b.len());
        }
        if let Some(out) = crate::gemm::dense(self.tier, x, w, b, m, k, n) {
            return Ok((CpuStorage::F32(out), Shape::from((m, n))));
        }
        let mut out: Vec<f32> = Vec::with_capacity(m * n);
        for _ in 0..m {
            out.extend_from_slice(b);
        }
        // SAFETY: the pointers cover (m, n), (m, k) and (k, n) elements with the strides given;
        // `W` is read as its transpose (column stride k, row stride 1).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                out.as_mut_ptr(),
                1,
                n as isize,
                true,
                x.as_ptr(),
                1,
                k as isize,
                w.as_ptr(),
                k as isize,
                1,
                1.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(0),
            );
        }
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

/// `x · Wᵀ + b` for 2-D `x`: one fused gemm on contiguous CPU f32, candle's ops otherwise.
pub fn dense_2d(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> candle_core::Result<Tensor> {
    match bias {
        Some(b)
            if x.device().is_cpu()
                && [x.dtype(), weight.dtype(), b.dtype()].iter().all(|d| *d == candle_core::DType::F32)
                && x.is_contiguous()
                && weight.is_contiguous()
                && b.is_contiguous() =>
        {
            x.apply_op3_no_bwd(weight, b, &F32Op3(DenseOp { tier: Tier::current() }))
        }
        // On a GPU, candle's broadcast add computes every element's bias index with a
        // division per dimension, and took 37 % of ViT-B/16's bf16 forward pass on an H100.
        // The bias rows as a rank-one product (ones · b, cuBLAS) and a contiguous add cost
        // two passes over memory instead.
        Some(b) if !x.device().is_cpu() => {
            let ones = Tensor::ones((x.dim(0)?, 1), b.dtype(), b.device())?;
            x.matmul(&weight.t()?)? + ones.matmul(&b.reshape((1, ()))?)?
        }
        Some(b) => x.matmul(&weight.t()?)?.broadcast_add(b),
        None => x.matmul(&weight.t()?),
    }
}

/// A dense layer's weights packed once at load for `tier`'s GEMM (see
/// [`crate::gemm::PackedDense`]); `None` where the layer runs unpacked: off the CPU, not f32,
/// or on a tier whose products the `gemm` crate computes.
pub(crate) fn pack_dense(
    tier: Tier,
    weight: &Tensor,
    bias: Option<&Tensor>,
) -> candle_core::Result<Option<crate::gemm::PackedDense>> {
    let f32_cpu = |t: &Tensor| t.device().is_cpu() && t.dtype() == candle_core::DType::F32;
    if !f32_cpu(weight) || !bias.is_none_or(f32_cpu) || !crate::gemm::PackedDense::packs_on(tier) {
        return Ok(None);
    }
    let (n, k) = weight.dims2()?;
    let w = weight.flatten_all()?.to_vec1::<f32>()?;
    let b = bias.map(|b| b.flatten_all()?.to_vec1::<f32>()).transpose()?;
    if b.as_ref().is_some_and(|b| b.len() != n) {
        candle_core::bail!("dense: a bias of {} values for {n} outputs", b.as_ref().map_or(0, Vec::len))
    }
    Ok(crate::gemm::PackedDense::pack(tier, &w, b.as_deref(), n, k))
}

/// What a dense layer does to its outputs besides adding the bias; through packed weights,
/// on each tile as it is finished ([`crate::gemm::PackedDense::forward_then`]), with the same
/// results bit for bit as a separate pass.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Then<'a> {
    Nothing,
    /// The MLP's activation.
    Activate(Activation),
    /// A residual sum: `x · Wᵀ + b + residual`, `residual` shaped as the output.
    Add(&'a Tensor),
}

/// `x · Wᵀ + b`, then an activation or nothing, with `W` and `b` packed ([`pack_dense`]): `x`
/// 2-D, f32 on the CPU.
struct PackedDenseOp<'a> {
    packed: &'a crate::gemm::PackedDense,
    activation: Option<Activation>,
}

/// The `(m, k)` input rows of a packed dense layer, checked against its width.
fn packed_input<'x>(
    packed: &crate::gemm::PackedDense,
    x: &'x CpuStorage,
    layout: &Layout,
) -> candle_core::Result<(&'x [f32], usize)> {
    let CpuStorage::F32(x) = x else { candle_core::bail!("packed dense: f32 only") };
    let Some((from, to)) = layout.contiguous_offsets() else {
        candle_core::bail!("packed dense: contiguous input only")
    };
    let (m, k) = layout.shape().dims2()?;
    if k != packed.in_dim() {
        candle_core::bail!("packed dense: an input of width {k} for a layer of width {}", packed.in_dim())
    }
    Ok((&x[from..to], m))
}

impl candle_core::CustomOp1 for PackedDenseOp<'_> {
    fn name(&self) -> &'static str {
        "packed-dense"
    }

    fn cpu_fwd(&self, x: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, m) = packed_input(self.packed, x, layout)?;
        let out = match self.activation {
            None => self.packed.forward(x, m),
            Some(activation) => {
                let tier = Tier::current();
                self.packed.forward_then(x, m, Some(&|_, _, values: &mut [f32]| map_in_place(tier, activation, values)))
            }
        };
        Ok((CpuStorage::F32(out), Shape::from((m, self.packed.out_dim()))))
    }
}

/// `x · Wᵀ + b + residual` with `W` and `b` packed.
struct PackedDenseAddOp<'a>(&'a crate::gemm::PackedDense);

impl candle_core::CustomOp2 for PackedDenseAddOp<'_> {
    fn name(&self) -> &'static str {
        "packed-dense-add"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_layout: &Layout,
        residual: &CpuStorage,
        residual_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, m) = packed_input(self.0, x, x_layout)?;
        let n = self.0.out_dim();
        let CpuStorage::F32(residual) = residual else { candle_core::bail!("packed dense: an f32 residual only") };
        let (Some((from, to)), true) = (residual_layout.contiguous_offsets(), residual_layout.shape().dims() == [m, n])
        else {
            candle_core::bail!(
                "packed dense: a residual of shape {:?} for an output of ({m}, {n})",
                residual_layout.shape()
            )
        };
        let residual = &residual[from..to];
        // `out + residual` in that order, as candle's `+` adds them (and IEEE addition commutes).
        let tier = Tier::current();
        let out = self.0.forward_then(
            x,
            m,
            Some(&|row, column, values: &mut [f32]| add_in_place(tier, values, &residual[row * n + column..])),
        );
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

/// `x · Wᵀ + b` for a 2-D `x` through weights packed at load, then `then`.
pub(crate) fn dense_packed(x: &Tensor, packed: &crate::gemm::PackedDense, then: Then) -> candle_core::Result<Tensor> {
    let x = x.contiguous()?;
    match then {
        Then::Nothing => x.apply_op1_no_bwd(&PackedDenseOp { packed, activation: None }),
        Then::Activate(activation) => x.apply_op1_no_bwd(&PackedDenseOp { packed, activation: Some(activation) }),
        Then::Add(residual) => x.apply_op2_no_bwd(&residual.contiguous()?, &PackedDenseAddOp(packed)),
    }
}

/// Queries attended together: their logits and outputs are independent sums, so four chains
/// of fused multiply-adds overlap instead of waiting on one another, and each key and value
/// vector loaded serves four queries.
const QUERIES: usize = 4;

/// From this many keys on, an unmasked self-attention runs through the packed GEMM
/// ([`attend_long`]): SigLIP so400m at 896 px has 4,096 patches, and [`attend_row`]'s groups
/// of [`QUERIES`] queries would each stream a head's 4,096 keys and values again (measured in
/// docs/performance.md, "VQAScore"). CLIP's 50 to 577 tokens stay on [`attend_row`].
const LONG_SEQUENCE: usize = 1024;

/// Queries whose logits [`attend_long`] holds at once: `TILE × seq` floats (4 MB at 4,096
/// keys), in cache between the two products and the softmax.
const TILE: usize = 256;

/// Self-attention of one batch row straight from its fused projection `rows` (`seq` rows of
/// `[q | k | v]`, each `width` wide) into `out` (`seq` rows of `width`): per head and query,
/// logits `q·k / √d` (+ the bias and mask terms), a softmax, and the weighted sum of the
/// values. A masked (−∞) logit weighs exactly 0. `scratch` holds one head's keys transposed
/// (and padded to whole vectors), so 16 logits at a time are sums of broadcast query values
/// times key rows, kept in registers: no horizontal sums. Queries go [`QUERIES`] at a time;
/// each query's sums run in the same order as one at a time, so results do not depend on
/// the grouping.
#[inline(always)]
fn attend_row_body<const FUSED: bool>(
    rows: &[f32],
    out: &mut [f32],
    seq: usize,
    width: usize,
    heads: usize,
    logit_terms: LogitTerms,
    scratch: &mut Scratch,
) {
    const LANES: usize = 16;
    let LogitTerms { bias, mask } = logit_terms;
    let head = width / heads;
    let scale = (head as f32).powf(-0.5);
    let padded = seq.div_ceil(LANES) * LANES;
    let Scratch { keys, weights, by_key } = scratch;
    for h in 0..heads {
        let part = |r: usize, which: usize| &rows[r * 3 * width + which * width + h * head..][..head];
        for j in 0..seq {
            for (d, &k) in part(j, 1).iter().enumerate() {
                keys[d * padded + j] = k;
            }
        }
        for first in (0..seq).step_by(QUERIES) {
            // A short last group repeats its last query; only real queries are written.
            let query = |r: usize| part((first + r).min(seq - 1), 0);
            let qs: [&[f32]; QUERIES] = std::array::from_fn(query);
            for block in 0..padded / LANES {
                let mut acc = [[0f32; LANES]; QUERIES];
                for d in 0..head {
                    let k = &keys[d * padded + block * LANES..][..LANES];
                    for (acc, q) in acc.iter_mut().zip(&qs) {
                        let qd = q[d];
                        for l in 0..LANES {
                            acc[l] = madd::<FUSED>(qd, k[l], acc[l]);
                        }
                    }
                }
                for (r, acc) in acc.iter().enumerate() {
                    weights[r * padded + block * LANES..][..LANES].copy_from_slice(acc);
                }
            }
            let count = QUERIES.min(seq - first);
            for r in 0..count {
                let i = first + r;
                let logits = &mut weights[r * padded..][..seq];
                let bias_row = bias.map(|b| &b[(h * seq + i) * seq..][..seq]);
                let mask_row = mask.map(|m| &m[i * seq..][..seq]);
                match (bias_row, mask_row) {
                    (Some(b), Some(m)) => logits
                        .iter_mut()
                        .zip(b.iter().zip(m))
                        .for_each(|(w, (&b, &m))| *w = madd::<FUSED>(*w, scale, b) + m),
                    (Some(t), None) | (None, Some(t)) => {
                        logits.iter_mut().zip(t).for_each(|(w, &t)| *w = madd::<FUSED>(*w, scale, t))
                    }
                    (None, None) => logits.iter_mut().for_each(|w| *w *= scale),
                }
                softmax_in_place(logits);
            }
            // The group's weights key by key (`seq × QUERIES`), so each value row meets its
            // QUERIES weights side by side: the loop below then indexes nothing (checked
            // indexing into four weight rows spilled registers, a third of the attention's
            // time).
            for (j, by_key) in by_key[..seq * QUERIES].chunks_exact_mut(QUERIES).enumerate() {
                for (r, w) in by_key.iter_mut().enumerate() {
                    *w = weights[r * padded + j];
                }
            }
            let by_key = &by_key[..seq * QUERIES];
            // 16 output values of each query at a time, summed over the values in registers.
            for c in (0..head).step_by(LANES) {
                let lanes = LANES.min(head - c);
                let mut acc = [[0f32; LANES]; QUERIES];
                let values = (0..seq).map(|j| &part(j, 2)[c..][..lanes]);
                if lanes == LANES {
                    for (v, w) in values.zip(by_key.chunks_exact(QUERIES)) {
                        for (acc, &w) in acc.iter_mut().zip(w) {
                            for (a, &v) in acc.iter_mut().zip(&v[..LANES]) {
                                *a = madd::<FUSED>(w, v, *a);
                            }
                        }
                    }
                } else {
                    for (v, w) in values.zip(by_key.chunks_exact(QUERIES)) {
                        for (acc, &w) in acc.iter_mut().zip(w) {
                            for (a, &v) in acc.iter_mut().zip(v) {
                                *a = madd::<FUSED>(w, v, *a);
                            }
                        }
                    }
                }
                for (r, acc) in acc.iter().enumerate().take(count) {
                    out[(first + r) * width + h * head + c..][..lanes].copy_from_slice(&acc[..lanes]);
                }
            }
        }
    }
}

/// One row of logits turned into softmax weights in place; a masked (−∞) logit weighs exactly
/// 0. The maximum and the sum go lane by lane, then across the lanes: a vector op per 16
/// logits instead of a chain of scalar ones (the two chains were a third of the attention's
/// time on ViT-B/32).
#[inline(always)]
fn softmax_in_place(logits: &mut [f32]) {
    let max = lanewise(logits, f32::NEG_INFINITY, f32::max).into_iter().fold(f32::NEG_INFINITY, f32::max);
    logits.iter_mut().for_each(|w| *w = if *w > f32::NEG_INFINITY { exp(*w - max) } else { 0.0 });
    let inv = 1.0 / lanewise(logits, 0.0, |a, b| a + b).into_iter().sum::<f32>();
    logits.iter_mut().for_each(|w| *w *= inv);
}

/// Rows of `logits` (`seq` each) scaled by `scale` and turned into softmax weights in place.
#[inline(always)]
fn softmax_rows_body<const FUSED: bool>(logits: &mut [f32], seq: usize, scale: f32) {
    for row in logits.chunks_exact_mut(seq) {
        row.iter_mut().for_each(|w| *w *= scale);
        softmax_in_place(row);
    }
}

per_tier!(fn softmax_rows = softmax_rows_body(logits: &mut [f32], seq: usize, scale: f32));

/// Unmasked self-attention of one batch row over a long sequence, head by head, through the
/// packed GEMM on all cores: the head's keys packed as a `(seq, head)` layer and its values
/// (transposed) as a `(head, seq)` one, then per [`TILE`] queries `logits = q · Kᵀ`, a row
/// softmax of `logits / √d`, `out = weights · V`. The same sums as [`attend_row`], in the
/// GEMM's order. `None` on a tier without a packed GEMM.
fn attend_long(tier: Tier, rows: &[f32], out: &mut [f32], seq: usize, width: usize, heads: usize) -> Option<()> {
    let head = width / heads;
    let scale = (head as f32).powf(-0.5);
    for h in 0..heads {
        let part = |r: usize, which: usize| &rows[r * 3 * width + which * width + h * head..][..head];
        let gather = |which: usize| -> Vec<f32> { (0..seq).flat_map(|r| part(r, which).iter().copied()).collect() };
        let keys = crate::gemm::PackedDense::pack(tier, &gather(1), None, seq, head)?;
        let transposed: Vec<f32> = (0..head).flat_map(|d| (0..seq).map(move |r| part(r, 2)[d])).collect();
        let values = crate::gemm::PackedDense::pack(tier, &transposed, None, head, seq)?;
        let queries = gather(0);
        for first in (0..seq).step_by(TILE) {
            let m = TILE.min(seq - first);
            let mut logits = keys.forward(&queries[first * head..][..m * head], m);
            logits.par_chunks_mut(seq * 16).for_each(|rows| softmax_rows(tier, rows, seq, scale));
            let attended = values.forward(&logits, m);
            for (i, row) in attended.chunks_exact(head).enumerate() {
                out[(first + i) * width + h * head..][..head].copy_from_slice(row);
            }
        }
    }
    Some(())
}

/// `values` folded into 16 lanes (lane `l` takes values `l`, `l + 16`, …), each from `init`.
#[inline(always)]
fn lanewise(values: &[f32], init: f32, fold: impl Fn(f32, f32) -> f32) -> [f32; 16] {
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

/// What is added to one batch row's scaled logits: a per-head `(heads, seq, seq)` bias (a
/// Swin window's relative positions) and a `(seq, seq)` mask shared by the heads.
#[derive(Debug, Clone, Copy, Default)]
struct LogitTerms<'a> {
    bias: Option<&'a [f32]>,
    mask: Option<&'a [f32]>,
}

/// Per-task buffers of [`attend_row_body`].
struct Scratch {
    /// One head's keys, `(head, seq)` padded with zero columns to whole vectors of 16.
    keys: Vec<f32>,
    /// [`QUERIES`] queries' logits, then weights, `(seq)` each, padded the same way.
    weights: Vec<f32>,
    /// The same weights key by key: `(seq, QUERIES)`.
    by_key: Vec<f32>,
}

per_tier!(
    #[allow(clippy::too_many_arguments)] // the tier, then the body's own seven
    fn attend_row = attend_row_body(
    rows: &[f32],
    out: &mut [f32],
    seq: usize,
    width: usize,
    heads: usize,
    logit_terms: LogitTerms,
    scratch: &mut Scratch,
));

/// Multi-head self-attention from the fused `(batch, seq, 3·width)` projection, one batch row
/// per task: no split of q, k and v into heads, no merge back, no separate softmax pass, and
/// none of the `batch × heads` tiny matrix products candle would run (for a 16-token text
/// the latter cost more in dispatch than in arithmetic).
struct SelfAttentionOp {
    heads: usize,
    tier: Tier,
}

impl SelfAttentionOp {
    fn run(&self, qkv: &CpuStorage, layout: &Layout, mask: Option<&[f32]>) -> candle_core::Result<(CpuStorage, Shape)> {
        self.run_with(qkv, layout, None, mask, 1)
    }

    /// Row `r` adds `bias` (per head) and mask group `r % groups` of `masks`.
    fn run_with(
        &self,
        qkv: &CpuStorage,
        layout: &Layout,
        bias: Option<&[f32]>,
        masks: Option<&[f32]>,
        groups: usize,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(data) = qkv else { candle_core::bail!("fused attention: f32 only") };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("fused attention: contiguous input only")
        };
        let (batch, seq, three_width) = layout.shape().dims3()?;
        let width = three_width / 3;
        if three_width % 3 != 0 || self.heads == 0 || width % self.heads != 0 {
            candle_core::bail!(
                "fused attention: a projection of {three_width} does not split into q, k, v of {} heads",
                self.heads
            );
        }
        let square = seq * seq;
        if bias.is_some_and(|b| b.len() != self.heads * square)
            || masks.is_some_and(|m| groups == 0 || m.len() != groups * square || batch % groups != 0)
        {
            candle_core::bail!("fused attention: the bias or mask does not fit {batch} rows of {seq} tokens");
        }
        let qkv = &data[start..end];
        let mut out = vec![0f32; batch * seq * width];
        if seq >= LONG_SEQUENCE && bias.is_none() && masks.is_none() && crate::gemm::PackedDense::packs_on(self.tier) {
            for (out, rows) in out.chunks_mut(seq * width).zip(qkv.chunks(seq * three_width)) {
                attend_long(self.tier, rows, out, seq, width, self.heads)
                    .ok_or_else(|| candle_core::Error::Msg("fused attention: no packed GEMM on this tier".into()))?;
            }
            return Ok((CpuStorage::F32(out), Shape::from((batch, seq, width))));
        }
        out.par_chunks_mut(seq * width).zip(qkv.par_chunks(seq * three_width)).enumerate().for_each_init(
            || {
                let padded = seq.div_ceil(16) * 16;
                Scratch {
                    keys: vec![0f32; width / self.heads * padded],
                    weights: vec![0f32; QUERIES * padded],
                    by_key: vec![0f32; QUERIES * padded],
                }
            },
            |scratch, (r, (out, rows))| {
                let mask = masks.map(|m| &m[(r % groups) * square..][..square]);
                attend_row(self.tier, rows, out, seq, width, self.heads, LogitTerms { bias, mask }, scratch)
            },
        );
        Ok((CpuStorage::F32(out), Shape::from((batch, seq, width))))
    }
}

impl candle_core::CustomOp1 for SelfAttentionOp {
    fn name(&self) -> &'static str {
        "fused-self-attention"
    }

    fn cpu_fwd(&self, qkv: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.run(qkv, layout, None)
    }
}

impl candle_core::CustomOp2 for SelfAttentionOp {
    fn name(&self) -> &'static str {
        "fused-masked-self-attention"
    }

    fn cpu_fwd(
        &self,
        qkv: &CpuStorage,
        layout: &Layout,
        mask: &CpuStorage,
        mask_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(mask), Some((m0, m1))) = (mask, mask_layout.contiguous_offsets()) else {
            candle_core::bail!("fused attention: the mask must be contiguous f32")
        };
        self.run(qkv, layout, Some(&mask[m0..m1]))
    }
}

/// Windowed self-attention (Swin) of a fused `(windows, seq, 3·width)` projection: a
/// per-head `(heads, seq, seq)` bias on every window, and for shifted windows a `(groups,
/// seq, seq)` mask, window `r` taking group `r % groups` (windows are image-major).
struct WindowAttentionOp {
    attention: SelfAttentionOp,
    groups: usize,
}

const BIAS_AND_MASK: &str = "fused attention: biases and masks";

impl candle_core::CustomOp2 for WindowAttentionOp {
    fn name(&self) -> &'static str {
        "fused-window-attention"
    }

    fn cpu_fwd(
        &self,
        qkv: &CpuStorage,
        layout: &Layout,
        bias: &CpuStorage,
        bias_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.attention.run_with(qkv, layout, Some(contiguous_f32(BIAS_AND_MASK, bias, bias_layout)?), None, 1)
    }
}

impl candle_core::CustomOp3 for WindowAttentionOp {
    fn name(&self) -> &'static str {
        "fused-shifted-window-attention"
    }

    fn cpu_fwd(
        &self,
        qkv: &CpuStorage,
        layout: &Layout,
        bias: &CpuStorage,
        bias_layout: &Layout,
        mask: &CpuStorage,
        mask_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (bias, mask) =
            (contiguous_f32(BIAS_AND_MASK, bias, bias_layout)?, contiguous_f32(BIAS_AND_MASK, mask, mask_layout)?);
        self.attention.run_with(qkv, layout, Some(bias), Some(mask), self.groups)
    }
}

/// [`windowed_self_attention_on`] on the tier `BENCHCTL_CPU` picks.
pub(crate) fn windowed_self_attention(
    qkv: &Tensor,
    heads: usize,
    bias: &Tensor,
    mask: Option<&Tensor>,
) -> candle_core::Result<Option<Tensor>> {
    windowed_self_attention_on(Tier::current(), qkv, heads, bias, mask)
}

/// Swin's window attention from the fused `(windows, seq, 3·width)` projection, adding the
/// `(heads, seq, seq)` relative position bias and, when given, the `(groups, seq, seq)`
/// shifted-window mask: the fused kernel on contiguous f32 CPU tensors, `None` (use the
/// composed path) for anything else.
pub(crate) fn windowed_self_attention_on(
    tier: Tier,
    qkv: &Tensor,
    heads: usize,
    bias: &Tensor,
    mask: Option<&Tensor>,
) -> candle_core::Result<Option<Tensor>> {
    let f32_cpu = |t: &Tensor| t.device().is_cpu() && t.dtype() == candle_core::DType::F32 && t.is_contiguous();
    if !f32_cpu(qkv) || !f32_cpu(bias) || qkv.rank() != 3 || mask.is_some_and(|m| !f32_cpu(m) || m.rank() != 3) {
        return Ok(None);
    }
    let op = |groups| WindowAttentionOp { attention: SelfAttentionOp { heads, tier }, groups };
    match mask {
        None => Ok(Some(qkv.apply_op2_no_bwd(bias, &op(1))?)),
        Some(m) => Ok(Some(qkv.apply_op3_no_bwd(bias, m, &op(m.dim(0)?))?)),
    }
}

/// Self-attention of a fused `(batch, seq, 3·width)` q/k/v projection, with an optional
/// additive `(seq, seq)` mask: the fused kernel on contiguous f32 CPU tensors, `None` (use
/// the composed path) for anything else.
pub(crate) fn self_attention(qkv: &Tensor, heads: usize, mask: Option<&Tensor>) -> candle_core::Result<Option<Tensor>> {
    self_attention_on(Tier::current(), qkv, heads, mask)
}

/// [`self_attention`] on a given tier.
pub(crate) fn self_attention_on(
    tier: Tier,
    qkv: &Tensor,
    heads: usize,
    mask: Option<&Tensor>,
) -> candle_core::Result<Option<Tensor>> {
    let f32_cpu = |t: &Tensor| t.device().is_cpu() && t.dtype() == candle_core::DType::F32 && t.is_contiguous();
    if !f32_cpu(qkv) || qkv.rank() != 3 {
        return Ok(None);
    }
    let seq = qkv.dim(1)?;
    let op = SelfAttentionOp { heads, tier };
    match mask {
        None => Ok(Some(qkv.apply_op1_no_bwd(&op)?)),
        Some(m) if f32_cpu(m) && m.dims() == [seq, seq] => Ok(Some(qkv.apply_op2_no_bwd(m, &op)?)),
        Some(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn fused_self_attention_matches_the_composed_one() -> candle_core::Result<()> {
        let dev = candle_core::Device::Cpu;
        for (batch, seq, width, heads) in [(1, 1, 8, 2), (3, 16, 64, 4), (2, 50, 96, 12), (2, 77, 40, 5)] {
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
            // Sums of 1,155 f32 terms in another order than candle's (measured ≤ 1.2e-5).
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
