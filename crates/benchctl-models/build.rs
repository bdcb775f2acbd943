//! With the `cuda` feature: compiles `cuda/fused.cu` (fused attention, the dense layers'
//! epilogue) to PTX with nvcc, for the virtual architecture `CUDA_COMPUTE_CAP` names (80 when
//! unset: Ampere and newer, the tensor-core attention needs it). The driver compiles PTX for
//! the GPU it runs on, so one build serves every newer GPU. Without the feature it does nothing.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=cuda/fused.cu");
    println!("cargo::rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo::rerun-if-env-changed=NVCC");
    println!("cargo::rustc-check-cfg=cfg(benchctl_tensor_core_attention)");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return ExitCode::SUCCESS;
    }
    match compile_ptx() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: failed to {message}");
            ExitCode::FAILURE
        }
    }
}

fn compile_ptx() -> Result<(), String> {
    let cap: u32 = match std::env::var("CUDA_COMPUTE_CAP") {
        Ok(cap) => {
            cap.trim().parse().map_err(|_| format!("read CUDA_COMPUTE_CAP={cap}: not a number like 80 or 90"))?
        }
        Err(_) => 80,
    };
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".to_string());
    let out_dir = std::env::var_os("OUT_DIR").ok_or("find OUT_DIR (cargo sets it for build scripts)")?;
    let out = PathBuf::from(out_dir).join("fused.ptx");
    let status = Command::new(&nvcc)
        .args(["--ptx", &format!("-arch=compute_{cap}"), "-O3", "-std=c++17", "cuda/fused.cu", "-o"])
        .arg(&out)
        .status()
        .map_err(|e| format!("run `{nvcc}` to compile cuda/fused.cu (is the CUDA toolkit on PATH?): {e}"))?;
    if !status.success() {
        return Err(format!("compile cuda/fused.cu with `{nvcc}` ({status})"));
    }
    // The tensor-core attention kernels are compiled only for sm_80 and newer (bf16 `mma`,
    // `ldmatrix`, `cp.async`).
    if cap >= 80 {
        println!("cargo::rustc-cfg=benchctl_tensor_core_attention");
    }
    Ok(())
}
