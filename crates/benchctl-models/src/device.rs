//! Parsing `--device` and `--dtype`.

use candle_core::{DType, Device};

use crate::{Error, ErrorKind, Result};

/// A device as a run names it (`cpu`, `cuda`, `cuda:N`), not yet opened: what a plan holds,
/// so a typo is refused before any work and the device is opened where it is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceSpec {
    Cpu,
    Cuda(usize),
}

impl DeviceSpec {
    /// `cpu`, `cuda` or `cuda:N`.
    pub fn parse(spec: &str) -> Result<DeviceSpec> {
        let spec = spec.trim().to_ascii_lowercase();
        let bad = || Error::new(ErrorKind::Device, format!("parse device `{spec}`: expected cpu, cuda or cuda:N"));
        match spec.as_str() {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            other => match other.strip_prefix("cuda:").map(str::parse) {
                Some(Ok(ordinal)) => Ok(DeviceSpec::Cuda(ordinal)),
                _ => Err(bad()),
            },
        }
    }

    /// Opens the device (a CUDA one needs a build with `--features cuda`).
    pub fn open(self) -> Result<Device> {
        let DeviceSpec::Cuda(ordinal) = self else { return Ok(Device::Cpu) };
        let spec = self.to_string();
        if !candle_core::utils::cuda_is_available() {
            return Err(Error::new(
                ErrorKind::Device,
                format!("use device `{spec}`: this benchctl was built without CUDA (rebuild with `--features cuda`)"),
            ));
        }
        Device::new_cuda(ordinal)
            .map_err(|e| Error::caused_by(ErrorKind::Device, format!("open device `{spec}`: {e}"), e))
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(0) => f.write_str("cuda"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// `cpu`, `cuda` or `cuda:N`, opened.
pub fn parse_device(spec: &str) -> Result<Device> {
    DeviceSpec::parse(spec)?.open()
}

/// `f32`, `f16` or `bf16`.
pub fn parse_dtype(spec: &str) -> Result<DType> {
    match spec.trim().to_ascii_lowercase().as_str() {
        "f32" | "float32" => Ok(DType::F32),
        "f16" | "float16" => Ok(DType::F16),
        "bf16" | "bfloat16" => Ok(DType::BF16),
        other => Err(Error::new(ErrorKind::Device, format!("parse dtype `{other}`: expected f32, f16 or bf16"))),
    }
}

/// The dtype's name as `--dtype` takes it.
pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        _ => "f32",
    }
}

/// Bytes of `device`'s memory in use, device-wide (total − free, as `nvidia-smi` counts it):
/// CUDA devices only, `None` elsewhere or when the driver cannot say. Memory a process freed but
/// its allocator keeps counts as in use, as PyTorch's `max_memory_reserved` counts it.
pub fn memory_in_use(device: &Device) -> Option<u64> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(cuda) => {
            let (free, total) = cuda.cuda_stream().context().mem_get_info().ok()?;
            Some(total.saturating_sub(free) as u64)
        }
        _ => None,
    }
}
