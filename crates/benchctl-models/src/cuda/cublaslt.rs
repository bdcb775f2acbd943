//! f16/bf16 dense products through cuBLASLt (the default; `BENCHCTL_CUDA_GEMM=cublas` turns it
//! off), with its recommended workspace and the bias (or bias and tanh-GELU) in its own epilogue.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::cublaslt::{Activation as LtActivation, CudaBlasLT, Matmul, MatmulConfig};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, DeviceRepr};
use candle_core::cuda_backend::CudaStorageSlice;
use candle_core::{CpuStorage, CudaDevice, CudaStorage, Layout, Shape};

/// How the dense layers' products run on a GPU (`BENCHCTL_CUDA_GEMM`): `lt` (the default:
/// f16/bf16 through cuBLASLt with its recommended workspace and the bias, or bias and tanh-GELU,
/// in its own epilogue; f32 as `cublas`) or `cublas` (candle's matmul, then benchctl's
/// epilogue). docs/performance.md ("GPU") has the side-by-side table that chose the default.
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
            Ok("cublas") => Self::Cublas,
            Ok("lt") | Err(_) => Self::Lt,
            Ok(other) => {
                benchctl_base::stderr_line!("warning: BENCHCTL_CUDA_GEMM={other} is not lt or cublas; using lt");
                Self::Lt
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
pub(super) struct LtDense {
    pub(super) gelu_tanh: bool,
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
