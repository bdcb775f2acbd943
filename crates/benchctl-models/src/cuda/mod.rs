//! benchctl's own CUDA kernels (`cuda/fused.cu`, compiled to PTX by the build script with the
//! `cuda` feature) and their launches, as candle custom operations.
//!
//! - **Fused self-attention** from the `(rows, seq, 3·width)` q/k/v projection: one block per
//!   (query tile, head, row) computes `softmax(q·kᵀ/√d + bias + mask)·v` and writes the heads
//!   merged, so candle's head split and merge copies, its scale, its materialised logits and its
//!   separate softmax are gone. f16 and bf16 run on the tensor cores (flash attention 2's
//!   scheme, tiles copied asynchronously two deep; head widths 32, 64, 72, 80, 96 and 128, 72
//!   computed as 80; 64 queries a block, or 128 where that pads no more; compute capability
//!   8.0 and newer), f32 and other widths on the CUDA cores.
//! - **The dense layers' epilogue**: bias plus activation, or bias plus residual, in place on
//!   the product in one pass (candle's broadcast add computes each element's bias index with a
//!   division per dimension); f16/bf16 products take the bias, or bias and tanh-GELU, in
//!   cuBLASLt's own epilogue, and this pass only what remains.
//!
//! `BENCHCTL_CUDA_KERNELS` chooses, for side-by-side measurements and parity tests: `fused`
//! (the default), `fused-64` or `fused-128` (the tensor-core attention with that query tile at
//! every length), `simt` (attention on the CUDA cores in every dtype) or `candle` (candle's own
//! operations, as before these kernels). `BENCHCTL_CUDA_GEMM=cublas` runs the f16/bf16 products
//! through candle's cuBLAS call instead of cuBLASLt (see [`GemmPath`]).
//!
//! One file per part: [`attention`] (the fused self-attention), [`epilogue`] (the dense
//! layers' bias, activation and residual pass), [`cublaslt`] (the cuBLASLt products).

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

mod attention;
mod cublaslt;
mod epilogue;

pub(crate) use attention::self_attention;
pub use attention::self_attention_with;
pub use cublaslt::GemmPath;
pub use epilogue::dense_with_epilogue;
pub(crate) use epilogue::{dense, epilogue_fits};

use candle_core::cuda_backend::WrapErr;

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused.ptx"));
const MODULE: &str = "benchctl-fused";
/// Which implementation the CUDA paths take (`BENCHCTL_CUDA_KERNELS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaKernels {
    /// Tensor-core attention where the dtype and head width allow, CUDA-core attention
    /// elsewhere, and the fused epilogue; the tensor-core kernel's query tile chosen by the
    /// sequence (see `attention::wide_by_default`).
    Fused,
    /// [`CudaKernels::Fused`] with 64 queries a tensor-core block (16 a warp) at every length.
    FusedNarrow,
    /// [`CudaKernels::Fused`] with 128 queries a tensor-core block (32 a warp) at every length.
    FusedWide,
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
            Ok("fused-64") => Self::FusedNarrow,
            Ok("fused-128") => Self::FusedWide,
            Ok("simt") => Self::Simt,
            Ok("candle") => Self::Candle,
            Ok("fused") | Err(_) => Self::Fused,
            Ok(other) => {
                benchctl_base::stderr_line!(
                    "warning: BENCHCTL_CUDA_KERNELS={other} is not fused, fused-64, fused-128, simt or candle; using fused"
                );
                Self::Fused
            }
        })
    }

    /// Whether attention may take the tensor-core kernel (f16/bf16, a head width it has).
    fn tensor_core_attention(self) -> bool {
        matches!(self, Self::Fused | Self::FusedNarrow | Self::FusedWide)
    }
}

/// The major compute capability of `device`, asked of the driver once per device (every
/// attention call would otherwise ask it twice).
pub(crate) fn compute_capability_major(device: &candle_core::CudaDevice) -> candle_core::Result<i32> {
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

/// `n` as a kernel's 32-bit argument, refused (naming `what`) past `i32::MAX`.
pub(crate) fn as_i32(what: &str, n: usize) -> candle_core::Result<i32> {
    i32::try_from(n).map_err(|_| candle_core::Error::Msg(format!("fused attention: {what} {n} exceeds a 32-bit index")))
}
