//! The dense layers' epilogue on a GPU: bias plus activation, or bias plus residual, in place
//! on the product in one pass (candle's broadcast add computes each element's bias index with
//! a division per dimension).

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorageSlice, WrapErr};
use candle_core::{CpuStorage, CudaStorage, DType, Layout, Tensor};

use super::cublaslt::{GemmPath, LtDense};
use super::{as_i32, CudaKernels, MODULE, PTX};
use crate::kernels::{Activation, Then};

/// `act(y + bias)` or `y + bias + residual`, in place on the contiguous `(rows, n)` product
/// `y`; without `bias` (cuBLASLt added it), `act(y)` or `y + residual`.
struct Epilogue {
    activation: Option<Activation>,
    with_bias: bool,
}

impl Epilogue {
    fn code(&self) -> i32 {
        match self.activation {
            None => 0,
            Some(Activation::QuickGelu) => 1,
            Some(Activation::Gelu) => 2,
            Some(Activation::GeluTanh) => 3,
        }
    }

    fn run(
        &self,
        y: &mut CudaStorage,
        y_layout: &Layout,
        bias: Option<(&CudaStorage, &Layout)>,
        residual: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<()> {
        let (rows, n) = y_layout.shape().dims2()?;
        let total = (rows * n) as i64;
        let fits = |l: &Layout, len: usize| l.is_contiguous() && l.shape().elem_count() == len;
        if !fits(y_layout, rows * n)
            || bias.is_some_and(|(_, l)| !fits(l, n))
            || residual.is_some_and(|(_, l)| !fits(l, rows * n))
        {
            candle_core::bail!("dense epilogue: contiguous ({rows}, {n}) product, bias and residual only");
        }
        let device = y.device().clone();
        let n_i = as_i32("a width of", n)?;
        let code = self.code();
        // 16-byte runs of 8 values where the width and every offset allow (see cuda/fused.cu).
        let offsets_align = [Some(y_layout), bias.map(|(_, l)| l), residual.map(|(_, l)| l)]
            .into_iter()
            .flatten()
            .all(|l| l.start_offset().is_multiple_of(8));
        let vector = i32::from(n.is_multiple_of(8) && offsets_align);
        const THREADS: u32 = 256;
        let blocks = (rows * n).div_ceil(8 * THREADS as usize).clamp(1, 8192) as u32;
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        macro_rules! launch {
            ($variant:ident, $ty:ty, $name:literal) => {{
                fn pick(s: &CudaStorageSlice) -> Option<&CudaSlice<$ty>> {
                    match s {
                        CudaStorageSlice::$variant(s) => Some(s),
                        _ => None,
                    }
                }
                let (bias_view, residual_view) =
                    (term_view(bias, pick, "bias")?, term_view(residual, pick, "residual")?);
                let y_offset = y_layout.start_offset();
                let CudaStorageSlice::$variant(y_slice) = &mut y.slice else {
                    candle_core::bail!("dense epilogue: the product is not {}", stringify!($variant))
                };
                let func = device.get_or_load_custom_func($name, MODULE, PTX)?;
                let mut y_view = y_slice.slice_mut(y_offset..);
                let null = 0u64;
                let mut builder = func.builder();
                builder.arg(&mut y_view);
                match &bias_view {
                    Some(b) => builder.arg(b),
                    None => builder.arg(&null),
                };
                match &residual_view {
                    Some(r) => builder.arg(r),
                    None => builder.arg(&null),
                };
                builder.arg(&total);
                builder.arg(&n_i);
                builder.arg(&code);
                builder.arg(&vector);
                // SAFETY: arguments as in cuda/fused.cu's `epilogue`; the grid strides over all
                // `total` values of the product, whose buffers were checked above.
                unsafe { builder.launch(cfg) }.w()?;
            }};
        }
        match y.dtype() {
            DType::F32 => launch!(F32, f32, "epilogue_f32"),
            DType::F16 => launch!(F16, half::f16, "epilogue_f16"),
            DType::BF16 => launch!(BF16, half::bf16, "epilogue_bf16"),
            other => candle_core::bail!("dense epilogue: {other:?} (f32, f16, bf16 only)"),
        }
        Ok(())
    }
}

/// `term`'s values from its offset, if it is of the product's dtype (`pick` finds them).
fn term_view<'a, T>(
    term: Option<(&'a CudaStorage, &'a Layout)>,
    pick: fn(&CudaStorageSlice) -> Option<&CudaSlice<T>>,
    what: &str,
) -> candle_core::Result<Option<candle_core::cuda_backend::cudarc::driver::CudaView<'a, T>>> {
    let Some((storage, layout)) = term else { return Ok(None) };
    match pick(&storage.slice) {
        Some(slice) => Ok(Some(slice.slice(layout.start_offset()..))),
        None => candle_core::bail!("dense epilogue: the {what} is not of the product's dtype"),
    }
}

impl candle_core::InplaceOp1 for Epilogue {
    fn name(&self) -> &'static str {
        "dense-epilogue-activation"
    }

    cuda_only_cpu_fwd!("the dense epilogue kernel", (), &mut CpuStorage);

    fn cuda_fwd(&self, y: &mut CudaStorage, y_layout: &Layout) -> candle_core::Result<()> {
        self.run(y, y_layout, None, None)
    }
}

impl candle_core::InplaceOp2 for Epilogue {
    fn name(&self) -> &'static str {
        "dense-epilogue"
    }

    cuda_only_cpu_fwd!("the dense epilogue kernel", (), &mut CpuStorage, &CpuStorage);

    fn cuda_fwd(
        &self,
        y: &mut CudaStorage,
        y_layout: &Layout,
        term: &CudaStorage,
        term_layout: &Layout,
    ) -> candle_core::Result<()> {
        match self.with_bias {
            true => self.run(y, y_layout, Some((term, term_layout)), None),
            false => self.run(y, y_layout, None, Some((term, term_layout))),
        }
    }
}

impl candle_core::InplaceOp3 for Epilogue {
    fn name(&self) -> &'static str {
        "dense-epilogue-residual"
    }

    cuda_only_cpu_fwd!("the dense epilogue kernel", (), &mut CpuStorage, &CpuStorage, &CpuStorage);

    fn cuda_fwd(
        &self,
        y: &mut CudaStorage,
        y_layout: &Layout,
        bias: &CudaStorage,
        bias_layout: &Layout,
        residual: &CudaStorage,
        residual_layout: &Layout,
    ) -> candle_core::Result<()> {
        self.run(y, y_layout, Some((bias, bias_layout)), Some((residual, residual_layout)))
    }
}

/// `x · Wᵀ + b`, then `activation` or `+ residual`, through the fused epilogue: the entry the
/// CUDA parity tests use (the towers go through [`crate::models::transformer::Dense`]).
pub fn dense_with_epilogue(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    activation: Option<Activation>,
    residual: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let then = match (activation, residual) {
        (None, None) => Then::Nothing,
        (Some(activation), None) => Then::Activate(activation),
        (None, Some(residual)) => Then::Add(residual),
        (Some(_), Some(_)) => candle_core::bail!("dense epilogue: an activation or a residual, not both"),
    };
    if !epilogue_fits(x, bias) {
        candle_core::bail!("dense epilogue: x and bias must be f32, f16 or bf16 of one dtype on a GPU");
    }
    dense(x, weight, bias, then)
}

/// Whether [`dense`] takes `x` and `bias`: on a GPU, f32/f16/bf16 of one dtype, unless
/// `BENCHCTL_CUDA_KERNELS=candle`.
pub(crate) fn epilogue_fits(x: &Tensor, bias: &Tensor) -> bool {
    CudaKernels::current() != CudaKernels::Candle
        && x.device().is_cuda()
        && matches!(x.dtype(), DType::F32 | DType::F16 | DType::BF16)
        && bias.dtype() == x.dtype()
}

/// `x · Wᵀ + b` for a 2-D `x` on a GPU (see [`epilogue_fits`]), then `then`: the bias with
/// the activation, or with the residual, in one pass over cuBLAS's product.
pub(crate) fn dense(x: &Tensor, weight: &Tensor, bias: &Tensor, then: Then) -> candle_core::Result<Tensor> {
    let bias = bias.contiguous()?;
    let residual = match then {
        Then::Add(residual) if residual.dtype() == x.dtype() => Some(residual.contiguous()?),
        Then::Add(residual) => {
            return x.matmul(&weight.t()?)?.broadcast_add(&bias)? + residual.reshape(((), bias.dim(0)?))?
        }
        _ => None,
    };
    let activation = match then {
        Then::Activate(activation) => Some(activation),
        _ => None,
    };
    if GemmPath::current() == GemmPath::Lt && matches!(x.dtype(), DType::F16 | DType::BF16) {
        let gelu_tanh = activation == Some(Activation::GeluTanh);
        let y = x.contiguous()?.apply_op3_no_bwd(&weight.contiguous()?, &bias, &LtDense { gelu_tanh })?;
        let rest = Epilogue { activation: activation.filter(|_| !gelu_tanh), with_bias: false };
        match &residual {
            Some(residual) => y.inplace_op2(&residual.reshape(y.dims())?, &rest)?,
            None if rest.activation.is_some() => y.inplace_op1(&rest)?,
            None => {}
        }
        return Ok(y);
    }
    let y = x.matmul(&weight.t()?)?.contiguous()?;
    let epilogue = Epilogue { activation, with_bias: true };
    match &residual {
        Some(residual) => y.inplace_op3(&bias, &residual.reshape(y.dims())?, &epilogue)?,
        None => y.inplace_op2(&bias, &epilogue)?,
    }
    Ok(y)
}
