//! Parsing `--device` and `--dtype`.

use candle_core::{DType, Device};

use crate::{Error, ErrorKind, Result};

/// `cpu`, `cuda` or `cuda:N`.
pub fn parse_device(spec: &str) -> Result<Device> {
    let spec = spec.trim().to_ascii_lowercase();
    if spec == "cpu" {
        return Ok(Device::Cpu);
    }
    let ordinal = match spec.strip_prefix("cuda") {
        Some("") => 0,
        Some(rest) => rest.strip_prefix(':').and_then(|n| n.parse().ok()).ok_or_else(|| {
            Error::new(ErrorKind::Device, format!("parse device `{spec}`: expected cpu, cuda or cuda:N"))
        })?,
        None => {
            return Err(Error::new(ErrorKind::Device, format!("parse device `{spec}`: expected cpu, cuda or cuda:N")))
        }
    };
    if !candle_core::utils::cuda_is_available() {
        return Err(Error::new(
            ErrorKind::Device,
            format!("use device `{spec}`: this benchctl was built without CUDA (rebuild with `--features cuda`)"),
        ));
    }
    Device::new_cuda(ordinal).map_err(|e| Error::caused_by(ErrorKind::Device, format!("open device `{spec}`: {e}"), e))
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
