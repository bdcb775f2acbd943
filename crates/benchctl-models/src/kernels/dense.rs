//! Dense layers: `x · Wᵀ + b` through benchctl's packed GEMM ([`crate::gemm`]) or the `gemm`
//! crate, with an activation or a residual sum applied to each finished tile.

use benchctl_cpu::Tier;
use candle_core::{CpuStorage, Layout, Shape, Tensor};

use super::activation::{add_in_place, map_in_place};
use super::{half_on_cpu, widen, Activation, F32Kernel3, F32Op3};

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

/// `x · Wᵀ + b` for 2-D `x`: one fused gemm on contiguous CPU f32; on the CPU in f16 or bf16,
/// the same in f32 rounded once at the end (`half_precision_dense`); candle's ops otherwise.
pub fn dense_2d(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> candle_core::Result<Tensor> {
    if let Some(dense) = half_precision_dense(x, weight, bias)? {
        return Ok(dense);
    }
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

/// `x · Wᵀ + b` in f16 or bf16 on the CPU, in f32 with one rounding ([`half_on_cpu`]).
/// Widening `W` per call costs `n · k` conversions against the product's `m · n · k`
/// multiply-adds, and keeps the model's memory at half precision. `None` off the CPU or in f32.
fn half_precision_dense(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> candle_core::Result<Option<Tensor>> {
    let Some(dtype) = half_on_cpu(x) else { return Ok(None) };
    let bias = match bias {
        Some(b) => widen(b)?,
        None => Tensor::zeros(weight.dim(0)?, candle_core::DType::F32, weight.device())?,
    };
    let dense = widen(x)?.apply_op3_no_bwd(&widen(weight)?, &bias, &F32Op3(DenseOp { tier: Tier::current() }))?;
    Ok(Some(dense.to_dtype(dtype)?))
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
