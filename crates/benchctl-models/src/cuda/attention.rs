//! The fused self-attention: one block per (query tile, head, row) computes
//! `softmax(q·kᵀ/√d + bias + mask)·v` from the `(rows, seq, 3·width)` projection and writes the
//! heads merged; tensor cores for f16/bf16 where the head width allows, CUDA cores otherwise.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::sys::CUfunction_attribute;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorageSlice, WrapErr};
use candle_core::{CpuStorage, CudaDevice, CudaStorage, DType, Layout, Shape, Tensor};

use super::{as_i32, compute_capability_major, CudaKernels, MODULE, PTX};

/// Head widths the attention kernels are compiled for.
const SIMT_HEAD_WIDTHS: [usize; 6] = [32, 64, 72, 80, 96, 128];
/// Widths that are not a multiple of 16 run on the width rounded up (see `cuda/fused.cu`); each
/// has the 64- and the 128-query kernel.
const TENSOR_CORE_HEAD_WIDTHS: [usize; 6] = [32, 64, 72, 80, 96, 128];
/// Queries per block (one thread each on the CUDA cores; 16 per warp of four on the tensor
/// cores, 32 in the wide kernel) and the grid's row limit (its z dimension).
const QUERIES_PER_BLOCK: usize = 64;
const WIDE_QUERIES_PER_BLOCK: usize = 128;
const TENSOR_CORE_THREADS: u32 = 128;
/// What a block may declare statically; a tensor-core block that needs more asks for it at launch.
const STATIC_SHARED_BYTES: usize = 48 * 1024;
const MAX_GRID_ROWS: usize = 65_535;
/// Whether [`CudaKernels::Fused`] attends `seq` tokens with 128 queries a block: wherever that
/// pads no more query rows than 64-query blocks do (an even number of those), since each key
/// and value tile then serves twice the queries for the same work. Measured on an H200
/// (docs/performance.md, "GPU"): faster at 77, 197, 577 and 729 tokens, slower at 50 and 257,
/// where its last block would be mostly padding.
fn wide_by_default(seq: usize) -> bool {
    seq.div_ceil(QUERIES_PER_BLOCK).is_multiple_of(2)
}

/// The shared memory of a tensor-core block for heads of `head` values of `value_bytes` each,
/// as `FlashTile` lays it out in cuda/fused.cu (the kernel traps on a launch that gives it less):
/// two stages of a key tile and a value tile, rows padded to the width rounded up to 16 plus 8
/// values; a wide block's queries after them where two fragments would not fit in registers.
fn flash_shared_bytes(head: usize, wide: bool, value_bytes: usize) -> usize {
    let padded = head.div_ceil(16) * 16;
    let row = padded + 8;
    let keys = if padded > 80 { 32 } else { 64 };
    let (frags, queries) = if wide { (2, WIDE_QUERIES_PER_BLOCK) } else { (1, QUERIES_PER_BLOCK) };
    let queries_in_registers = frags * padded / 4 <= 32;
    let query_rows = if queries_in_registers { 0 } else { queries };
    (4 * keys + query_rows) * row * value_bytes
}

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
    let tensor_cores = kernels.tensor_core_attention()
        && cfg!(benchctl_tensor_core_attention)
        && dtype_name != "f32"
        && TENSOR_CORE_HEAD_WIDTHS.contains(&head)
        // 16-byte loads: the rows, heads and the tensor's start fall on multiples of 8 values.
        && width.is_multiple_of(8)
        && layout.start_offset().is_multiple_of(8)
        && compute_capability_major(device)? >= 8;
    let kernel = if tensor_cores {
        Kernel::Flash {
            wide: match kernels {
                CudaKernels::FusedWide => true,
                CudaKernels::FusedNarrow => false,
                _ => wide_by_default(seq),
            },
        }
    } else {
        Kernel::Simt
    };
    let geometry = Geometry {
        rows,
        seq,
        width,
        heads,
        threads: kernel.threads(),
        queries: kernel.queries(),
        dynamic_shared_bytes: kernel.dynamic_shared_bytes(head, qkv.dtype().size_in_bytes()),
    };
    let name = kernel.name(dtype_name, head);
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

/// The kernel one call takes, and its launch shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    /// The CUDA cores (cuda/fused.cu, `attend_simt`): one thread a query.
    Simt,
    /// The tensor cores (cuda/fused.cu, `attend_flash`): 64 queries a block, 128 when `wide`.
    Flash { wide: bool },
}

impl Kernel {
    fn name(self, dtype: &str, head: usize) -> String {
        let form = match self {
            Kernel::Simt => "simt",
            Kernel::Flash { wide: false } => "flash",
            Kernel::Flash { wide: true } => "flash_wide",
        };
        format!("attend_{form}_{dtype}_{head}")
    }

    fn threads(self) -> u32 {
        match self {
            Kernel::Simt => QUERIES_PER_BLOCK as u32,
            Kernel::Flash { .. } => TENSOR_CORE_THREADS,
        }
    }

    fn queries(self) -> usize {
        match self {
            Kernel::Flash { wide: true } => WIDE_QUERIES_PER_BLOCK,
            Kernel::Simt | Kernel::Flash { wide: false } => QUERIES_PER_BLOCK,
        }
    }

    /// The shared memory the block asks for at launch: none where it declares it statically.
    fn dynamic_shared_bytes(self, head: usize, value_bytes: usize) -> usize {
        match self {
            Kernel::Simt => 0,
            Kernel::Flash { wide } => {
                let bytes = flash_shared_bytes(head, wide, value_bytes);
                if bytes > STATIC_SHARED_BYTES {
                    bytes
                } else {
                    0
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Geometry {
    rows: usize,
    seq: usize,
    width: usize,
    heads: usize,
    threads: u32,
    queries: usize,
    dynamic_shared_bytes: usize,
}

#[allow(clippy::too_many_arguments)] // the kernel's own arguments
fn launch_attention<T: DeviceRepr>(
    name: &str,
    device: &CudaDevice,
    qkv: &CudaSlice<T>,
    start: usize,
    Geometry { rows, seq, width, heads, threads, queries, dynamic_shared_bytes }: Geometry,
    bias: &Option<candle_core::cuda_backend::cudarc::driver::CudaView<'_, f32>>,
    mask: &Option<candle_core::cuda_backend::cudarc::driver::CudaView<'_, f32>>,
    groups: usize,
) -> candle_core::Result<CudaSlice<T>> {
    let func = device.get_or_load_custom_func(name, MODULE, PTX)?;
    let shared_mem_bytes = u32::try_from(dynamic_shared_bytes).map_err(|_| {
        candle_core::Error::Msg(format!("fused attention: {dynamic_shared_bytes} bytes of shared memory"))
    })?;
    if shared_mem_bytes > 0 {
        // Past 48 KB a kernel takes dynamic shared memory only up to what it is allowed.
        func.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared_mem_bytes as i32,
        )
        .w()?;
    }
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
            grid_dim: (seq.div_ceil(queries) as u32, heads as u32, count as u32),
            block_dim: (threads, 1, 1),
            shared_mem_bytes,
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

/// [`self_attention_with`] under `BENCHCTL_CUDA_KERNELS`.
pub(crate) fn self_attention(
    qkv: &Tensor,
    heads: usize,
    bias: Option<&Tensor>,
    mask: Option<&Tensor>,
) -> candle_core::Result<Option<Tensor>> {
    self_attention_with(CudaKernels::current(), qkv, heads, bias, mask)
}
