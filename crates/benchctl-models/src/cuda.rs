//! benchctl's own CUDA kernels (`cuda/fused.cu`, compiled to PTX by the build script with the
//! `cuda` feature) and their launches, as candle custom operations.
//!
//! - **Fused self-attention** from the `(rows, seq, 3·width)` q/k/v projection: one block per
//!   (query tile, head, row) computes `softmax(q·kᵀ/√d + bias + mask)·v` and writes the heads
//!   merged, so candle's head split and merge copies, its scale, its materialised logits and its
//!   separate softmax are gone. f16 and bf16 run on the tensor cores (head widths 32, 64, 128;
//!   compute capability 8.0 and newer), f32 and other widths on the CUDA cores.
//! - **The dense layers' epilogue**: bias plus activation, or bias plus residual, in place on
//!   cuBLAS's product in one pass (candle's broadcast add computes each element's bias index
//!   with a division per dimension).
//!
//! `BENCHCTL_CUDA_KERNELS` chooses, for side-by-side measurements and parity tests: `fused`
//! (the default), `simt` (attention on the CUDA cores in every dtype) or `candle` (candle's own
//! operations, as before these kernels). `BENCHCTL_CUDA_GEMM=lt` runs the f16/bf16 products
//! through cuBLASLt instead of candle's cuBLAS call (see [`GemmPath`]).

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::cublaslt::{Activation as LtActivation, CudaBlasLT, Matmul, MatmulConfig};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorageSlice, WrapErr};
use candle_core::{CpuStorage, CudaDevice, CudaStorage, DType, Layout, Shape, Tensor};

use crate::kernels::{Activation, Then};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused.ptx"));
const MODULE: &str = "benchctl-fused";

/// Which implementation the CUDA paths take (`BENCHCTL_CUDA_KERNELS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaKernels {
    /// Tensor-core attention where the dtype and head width allow, CUDA-core attention
    /// elsewhere, and the fused epilogue.
    Fused,
    /// The fused kernels with attention always on the CUDA cores.
    Simt,
    /// candle's own operations.
    Candle,
}

impl CudaKernels {
    /// The choice `BENCHCTL_CUDA_KERNELS` makes (read once); [`CudaKernels::Fused`] when unset.
    pub fn current() -> Self {
        static CHOICE: std::sync::OnceLock<CudaKernels> = std::sync::OnceLock::new();
        *CHOICE.get_or_init(|| match std::env::var("BENCHCTL_CUDA_KERNELS").as_deref() {
            Ok("simt") => Self::Simt,
            Ok("candle") => Self::Candle,
            Ok("fused") | Err(_) => Self::Fused,
            Ok(other) => {
                eprintln!("warning: BENCHCTL_CUDA_KERNELS={other} is not fused, simt or candle; using fused");
                Self::Fused
            }
        })
    }
}

/// Head widths the attention kernels are compiled for.
const SIMT_HEAD_WIDTHS: [usize; 6] = [32, 64, 72, 80, 96, 128];
const TENSOR_CORE_HEAD_WIDTHS: [usize; 3] = [32, 64, 128];
/// Queries per block (both kernels: one thread each on the CUDA cores, 16 per warp of four on
/// the tensor cores) and the grid's row limit (its z dimension).
const QUERIES_PER_BLOCK: usize = 64;
const TENSOR_CORE_THREADS: u32 = 128;
const MAX_GRID_ROWS: usize = 65_535;

/// Whether the fused attention takes a `(rows, seq, 3·width)` projection of `qkv`'s dtype
/// with `heads` heads under `kernels`.
pub(crate) fn attention_fits(kernels: CudaKernels, qkv: &Tensor, heads: usize) -> bool {
    let Ok((_, _, three_width)) = qkv.dims3() else { return false };
    kernels != CudaKernels::Candle
        && qkv.device().is_cuda()
        && matches!(qkv.dtype(), DType::F32 | DType::F16 | DType::BF16)
        && three_width.is_multiple_of(3)
        && heads > 0
        && (three_width / 3).is_multiple_of(heads)
        && SIMT_HEAD_WIDTHS.contains(&(three_width / 3 / heads))
}

/// The additive terms of [`attend`]: f32 contiguous `(heads, seq, seq)` bias and `(groups,
/// seq, seq)` mask on the projection's device.
pub(crate) struct Terms<'a> {
    pub bias: Option<(&'a CudaStorage, &'a Layout)>,
    pub mask: Option<(&'a CudaStorage, &'a Layout)>,
    pub groups: usize,
}

fn f32_terms<'a>(
    what: &str,
    term: Option<(&'a CudaStorage, &'a Layout)>,
    len: usize,
) -> candle_core::Result<Option<candle_core::cuda_backend::cudarc::driver::CudaView<'a, f32>>> {
    let Some((storage, layout)) = term else { return Ok(None) };
    let CudaStorageSlice::F32(slice) = &storage.slice else {
        candle_core::bail!("fused attention: the {what} must be f32 on the GPU")
    };
    if !layout.is_contiguous() || layout.shape().elem_count() != len {
        candle_core::bail!("fused attention: the {what} must be contiguous with {len} values");
    }
    Ok(Some(slice.slice(layout.start_offset()..)))
}

/// Self-attention of the contiguous `(rows, seq, 3·width)` projection `qkv` over `heads`
/// heads: `(rows, seq, width)` in the projection's dtype.
pub(crate) fn attend(
    kernels: CudaKernels,
    heads: usize,
    qkv: &CudaStorage,
    layout: &Layout,
    terms: Terms,
) -> candle_core::Result<(CudaStorage, Shape)> {
    let (rows, seq, three_width) = layout.shape().dims3()?;
    let width = three_width / 3;
    let head = width.checked_div(heads).unwrap_or(0);
    if !three_width.is_multiple_of(3)
        || head * heads != width
        || !SIMT_HEAD_WIDTHS.contains(&head)
        || !layout.is_contiguous()
    {
        candle_core::bail!(
            "fused attention: a contiguous projection of {three_width} into {heads} heads of 32, 64, 72, 80, 96 or 128"
        )
    }
    let square = seq * seq;
    let groups = terms.groups.max(1);
    if !rows.is_multiple_of(groups) {
        candle_core::bail!("fused attention: {rows} rows do not split into {groups} mask groups");
    }
    let bias = f32_terms("bias", terms.bias, heads * square)?;
    let mask = f32_terms("mask", terms.mask, groups * square)?;
    let device = qkv.device();
    let dtype_name = match qkv.dtype() {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        other => candle_core::bail!("fused attention: {other:?} projections (f32, f16, bf16 only)"),
    };
    let tensor_cores = kernels == CudaKernels::Fused
        && cfg!(benchctl_tensor_core_attention)
        && dtype_name != "f32"
        && TENSOR_CORE_HEAD_WIDTHS.contains(&head)
        // 16-byte loads: the rows, heads and the tensor's start fall on multiples of 8 values.
        && width.is_multiple_of(8)
        && layout.start_offset().is_multiple_of(8)
        && compute_capability_major(device)? >= 8;
    let name = format!("attend_{}_{dtype_name}_{head}", if tensor_cores { "flash" } else { "simt" });
    let threads = if tensor_cores { TENSOR_CORE_THREADS } else { QUERIES_PER_BLOCK as u32 };
    let geometry = Geometry { rows, seq, width, heads, threads };
    let start = layout.start_offset();
    let slice = match &qkv.slice {
        CudaStorageSlice::F32(s) => {
            CudaStorageSlice::F32(launch_attention(&name, device, s, start, geometry, &bias, &mask, groups)?)
        }
        CudaStorageSlice::F16(s) => {
            CudaStorageSlice::F16(launch_attention(&name, device, s, start, geometry, &bias, &mask, groups)?)
        }
        CudaStorageSlice::BF16(s) => {
            CudaStorageSlice::BF16(launch_attention(&name, device, s, start, geometry, &bias, &mask, groups)?)
        }
        _ => candle_core::bail!("fused attention: {:?} projections (f32, f16, bf16 only)", qkv.dtype()),
    };
    Ok((CudaStorage { slice, device: device.clone() }, Shape::from((rows, seq, width))))
}

#[derive(Debug, Clone, Copy)]
struct Geometry {
    rows: usize,
    seq: usize,
    width: usize,
    heads: usize,
    threads: u32,
}

fn as_i32(what: &str, n: usize) -> candle_core::Result<i32> {
    i32::try_from(n).map_err(|_| candle_core::Error::Msg(format!("fused attention: {what} {n} exceeds a 32-bit index")))
}

#[allow(clippy::too_many_arguments)] // the kernel's own arguments
fn launch_attention<T: DeviceRepr>(
    name: &str,
    device: &CudaDevice,
    qkv: &CudaSlice<T>,
    start: usize,
    Geometry { rows, seq, width, heads, threads }: Geometry,
    bias: &Option<candle_core::cuda_backend::cudarc::driver::CudaView<'_, f32>>,
    mask: &Option<candle_core::cuda_backend::cudarc::driver::CudaView<'_, f32>>,
    groups: usize,
) -> candle_core::Result<CudaSlice<T>> {
    let func = device.get_or_load_custom_func(name, MODULE, PTX)?;
    // SAFETY: every element is written by the kernel (each (row, query, head) once).
    let out = unsafe { device.alloc::<T>(rows * seq * width)? };
    let qkv = qkv.slice(start..);
    let (seq_i, width_i, groups_i) =
        (as_i32("a sequence of", seq)?, as_i32("a width of", width)?, as_i32("groups", groups)?);
    let scale = ((width / heads) as f32).powf(-0.5);
    let null = 0u64;
    let mut first = 0;
    while first < rows {
        let count = (rows - first).min(MAX_GRID_ROWS);
        let first_i = as_i32("a row index of", first)?;
        let cfg = LaunchConfig {
            grid_dim: (seq.div_ceil(QUERIES_PER_BLOCK) as u32, heads as u32, count as u32),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = func.builder();
        builder.arg(&qkv);
        builder.arg(&out);
        builder.arg(&seq_i);
        builder.arg(&width_i);
        match bias {
            Some(b) => builder.arg(b),
            None => builder.arg(&null),
        };
        match mask {
            Some(m) => builder.arg(m),
            None => builder.arg(&null),
        };
        builder.arg(&groups_i);
        builder.arg(&scale);
        builder.arg(&first_i);
        // SAFETY: the arguments match the kernel's signature in cuda/fused.cu; the grid covers
        // rows [first, first + count), every query and head, inside the buffers checked above.
        unsafe { builder.launch(cfg) }.w()?;
        first += count;
    }
    Ok(out)
}

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

/// The `cpu_fwd` of an operation that exists only on CUDA (candle's custom-op traits require
/// one): it refuses CPU tensors, naming `$what`. `$out` is what the trait's `cpu_fwd` returns,
/// `$storage` the type of each input storage (each followed by its layout).
macro_rules! cuda_only_cpu_fwd {
    ($what:literal, $out:ty, $($storage:ty),+) => {
        fn cpu_fwd(&self, $(_: $storage, _: &Layout),+) -> candle_core::Result<$out> {
            candle_core::bail!(concat!($what, " runs on CUDA tensors only"))
        }
    };
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

/// How the dense layers' products run on a GPU (`BENCHCTL_CUDA_GEMM`): `cublas` (candle's
/// matmul, then benchctl's epilogue; the default) or `lt` (f16/bf16 through cuBLASLt with its
/// recommended workspace and the bias, or bias and tanh-GELU, in its own epilogue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmPath {
    Cublas,
    Lt,
}

impl GemmPath {
    /// The choice `BENCHCTL_CUDA_GEMM` makes (read once).
    pub fn current() -> Self {
        static CHOICE: std::sync::OnceLock<GemmPath> = std::sync::OnceLock::new();
        *CHOICE.get_or_init(|| match std::env::var("BENCHCTL_CUDA_GEMM").as_deref() {
            Ok("lt") => Self::Lt,
            Ok("cublas") | Err(_) => Self::Cublas,
            Ok(other) => {
                eprintln!("warning: BENCHCTL_CUDA_GEMM={other} is not cublas or lt; using cublas");
                Self::Cublas
            }
        })
    }
}

/// One cuBLASLt handle (and workspace) per device, made on first use.
fn lt_handle(device: &CudaDevice) -> candle_core::Result<std::sync::Arc<CudaBlasLT>> {
    type Handles =
        std::sync::Mutex<std::collections::HashMap<candle_core::cuda_backend::DeviceId, std::sync::Arc<CudaBlasLT>>>;
    static HANDLES: std::sync::OnceLock<Handles> = std::sync::OnceLock::new();
    let mut handles = HANDLES.get_or_init(Default::default).lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(handle) = handles.get(&device.id()) {
        return Ok(handle.clone());
    }
    let handle = std::sync::Arc::new(
        CudaBlasLT::new(device.cuda_stream()).map_err(|e| candle_core::Error::Msg(format!("cuBLASLt: {e:?}")))?,
    );
    handles.insert(device.id(), handle.clone());
    Ok(handle)
}

/// `x · Wᵀ + b` (then tanh-GELU) through cuBLASLt, as a candle operation on `(x, W, b)`.
struct LtDense {
    gelu_tanh: bool,
}

fn lt_product<T: DeviceRepr>(
    device: &CudaDevice,
    [x, w, b]: [candle_core::cuda_backend::cudarc::driver::CudaView<'_, T>; 3],
    (rows, n, k): (usize, usize, usize),
    gelu_tanh: bool,
) -> candle_core::Result<CudaSlice<T>>
where
    CudaBlasLT: Matmul<T>,
{
    let lt = lt_handle(device)?;
    // SAFETY: the product writes every element (beta = 0).
    let mut y = unsafe { device.alloc::<T>(rows * n)? };
    // Row-major y (rows, n) is column-major yᵀ (n, rows) = W (row-major (n, k), read
    // transposed) · xᵀ (column-major (k, rows)); the bias runs along yᵀ's rows.
    let cfg = MatmulConfig {
        transa: true,
        transb: false,
        transc: false,
        m: n as u64,
        n: rows as u64,
        k: k as u64,
        alpha: 1.0,
        lda: k as i64,
        ldb: k as i64,
        beta: 0.0,
        ldc: n as i64,
        stride_a: None,
        stride_b: None,
        stride_c: None,
        stride_bias: None,
        batch_size: None,
    };
    let act = gelu_tanh.then_some(LtActivation::Gelu);
    // SAFETY: the views cover (n, k), (rows, k) and (n) values, the output (rows, n).
    unsafe { lt.matmul(cfg, &w, &x, &mut y, Some(&b), act.as_ref()) }
        .map_err(|e| candle_core::Error::Msg(format!("cuBLASLt matmul: {e:?}")))?;
    Ok(y)
}

impl candle_core::CustomOp3 for LtDense {
    fn name(&self) -> &'static str {
        "cublaslt-dense"
    }

    cuda_only_cpu_fwd!("cuBLASLt", (CpuStorage, Shape), &CpuStorage, &CpuStorage, &CpuStorage);

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        x_layout: &Layout,
        w: &CudaStorage,
        w_layout: &Layout,
        b: &CudaStorage,
        b_layout: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (rows, k) = x_layout.shape().dims2()?;
        let (n, k2) = w_layout.shape().dims2()?;
        let contiguous = [x_layout, w_layout, b_layout].iter().all(|l| l.is_contiguous());
        if k != k2 || b_layout.shape().elem_count() != n || !contiguous {
            candle_core::bail!("cuBLASLt dense: contiguous ({rows}, {k}) · ({n}, {k2})ᵀ + ({n}) only");
        }
        let device = x.device();
        let shape = (rows, n, k);
        let slice = match (&x.slice, &w.slice, &b.slice) {
            (CudaStorageSlice::F16(xs), CudaStorageSlice::F16(ws), CudaStorageSlice::F16(bs)) => {
                let views = [
                    xs.slice(x_layout.start_offset()..),
                    ws.slice(w_layout.start_offset()..),
                    bs.slice(b_layout.start_offset()..),
                ];
                CudaStorageSlice::F16(lt_product(device, views, shape, self.gelu_tanh)?)
            }
            (CudaStorageSlice::BF16(xs), CudaStorageSlice::BF16(ws), CudaStorageSlice::BF16(bs)) => {
                let views = [
                    xs.slice(x_layout.start_offset()..),
                    ws.slice(w_layout.start_offset()..),
                    bs.slice(b_layout.start_offset()..),
                ];
                CudaStorageSlice::BF16(lt_product(device, views, shape, self.gelu_tanh)?)
            }
            _ => candle_core::bail!("cuBLASLt dense: f16 or bf16 inputs of one dtype only"),
        };
        Ok((CudaStorage { slice, device: device.clone() }, Shape::from((rows, n))))
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

/// The attention of [`attend`] as a candle operation: the projection, then the bias and/or the
/// mask as the operation's further inputs.
struct AttentionOp {
    kernels: CudaKernels,
    heads: usize,
    has_bias: bool,
    groups: usize,
}

impl AttentionOp {
    fn terms<'a>(&self, extra: &[(&'a CudaStorage, &'a Layout)]) -> Terms<'a> {
        let (bias, mask) = match (self.has_bias, extra) {
            (true, [bias, rest @ ..]) => (Some(*bias), rest.first().copied()),
            (false, [mask, ..]) => (None, Some(*mask)),
            _ => (None, None),
        };
        Terms { bias, mask, groups: self.groups }
    }
}

impl candle_core::CustomOp1 for AttentionOp {
    fn name(&self) -> &'static str {
        "cuda-fused-self-attention"
    }

    cuda_only_cpu_fwd!("the CUDA attention kernel", (CpuStorage, Shape), &CpuStorage);

    fn cuda_fwd(&self, qkv: &CudaStorage, layout: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        attend(self.kernels, self.heads, qkv, layout, self.terms(&[]))
    }
}

impl candle_core::CustomOp2 for AttentionOp {
    fn name(&self) -> &'static str {
        "cuda-fused-self-attention-with-terms"
    }

    cuda_only_cpu_fwd!("the CUDA attention kernel", (CpuStorage, Shape), &CpuStorage, &CpuStorage);

    fn cuda_fwd(
        &self,
        qkv: &CudaStorage,
        layout: &Layout,
        term: &CudaStorage,
        term_layout: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        attend(self.kernels, self.heads, qkv, layout, self.terms(&[(term, term_layout)]))
    }
}

impl candle_core::CustomOp3 for AttentionOp {
    fn name(&self) -> &'static str {
        "cuda-fused-self-attention-with-bias-and-mask"
    }

    cuda_only_cpu_fwd!("the CUDA attention kernel", (CpuStorage, Shape), &CpuStorage, &CpuStorage, &CpuStorage);

    fn cuda_fwd(
        &self,
        qkv: &CudaStorage,
        layout: &Layout,
        bias: &CudaStorage,
        bias_layout: &Layout,
        mask: &CudaStorage,
        mask_layout: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        attend(self.kernels, self.heads, qkv, layout, self.terms(&[(bias, bias_layout), (mask, mask_layout)]))
    }
}

/// Self-attention of a `(rows, seq, 3·width)` projection on a GPU with `kernels`, adding an
/// optional `(heads, seq, seq)` bias and an optional mask of `(seq, seq)` (every row) or
/// `(groups, seq, seq)` / `(groups, 1, seq, seq)` (row `r` takes group `r % groups`); `None`
/// where the kernels do not apply (see [`attention_fits`]) or the mask is shaped otherwise.
pub fn self_attention_with(
    kernels: CudaKernels,
    qkv: &Tensor,
    heads: usize,
    bias: Option<&Tensor>,
    mask: Option<&Tensor>,
) -> candle_core::Result<Option<Tensor>> {
    if !attention_fits(kernels, qkv, heads) {
        return Ok(None);
    }
    let (rows, seq, _) = qkv.dims3()?;
    let as_f32 = |t: &Tensor| t.to_dtype(DType::F32)?.contiguous();
    if bias.is_some_and(|b| b.dims() != [heads, seq, seq]) {
        return Ok(None);
    }
    let groups = match mask.map(|m| m.dims()) {
        None => 1,
        Some([s, t]) if [*s, *t] == [seq, seq] => 1,
        Some([g, s, t]) | Some([g, 1, s, t]) if [*s, *t] == [seq, seq] && *g > 0 && rows % *g == 0 => *g,
        Some(_) => return Ok(None),
    };
    let op = AttentionOp { kernels, heads, has_bias: bias.is_some(), groups };
    let qkv = qkv.contiguous()?;
    Ok(Some(match (bias, mask) {
        (None, None) => qkv.apply_op1_no_bwd(&op)?,
        (Some(b), None) => qkv.apply_op2_no_bwd(&as_f32(b)?, &op)?,
        (None, Some(m)) => qkv.apply_op2_no_bwd(&as_f32(m)?, &op)?,
        (Some(b), Some(m)) => qkv.apply_op3_no_bwd(&as_f32(b)?, &as_f32(m)?, &op)?,
    }))
}

/// The major compute capability of `device`, asked of the driver once per device (every
/// attention call would otherwise ask it twice).
fn compute_capability_major(device: &candle_core::CudaDevice) -> candle_core::Result<i32> {
    static MAJORS: std::sync::Mutex<Vec<(usize, i32)>> = std::sync::Mutex::new(Vec::new());
    let context = device.cuda_stream().context().clone();
    let ordinal = context.ordinal();
    let mut majors = MAJORS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(&(_, major)) = majors.iter().find(|(o, _)| *o == ordinal) {
        return Ok(major);
    }
    let major = context.compute_capability().w()?.0;
    majors.push((ordinal, major));
    Ok(major)
}

/// [`self_attention_with`] under `BENCHCTL_CUDA_KERNELS`.
pub(crate) fn self_attention(
    qkv: &Tensor,
    heads: usize,
    bias: Option<&Tensor>,
    mask: Option<&Tensor>,
) -> candle_core::Result<Option<Tensor>> {
    self_attention_with(CudaKernels::current(), qkv, heads, bias, mask)
}
