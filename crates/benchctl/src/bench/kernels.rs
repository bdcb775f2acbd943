//! Kernels measured alone: RoCOCO-scale retrieval scoring; with the `dev-bench` feature (a
//! developer's build, not a release's), one dense layer's product, the CPU's fp32
//! multiply-add peak (hand-written FMA chains) and, with `cuda` too, the fused attention on a
//! GPU.

use std::time::Instant;

use candle_core::Tensor;
#[cfg(feature = "dev-bench")]
use rayon::prelude::*;

use super::{summarise, BenchPlan, PartResult};
use crate::{Error, ErrorKind, Result};

/// RoCOCO-scale retrieval scoring on random unit embeddings (dimension 512): 5,000 images
/// against 50,010 captions (image-to-text) and 25,010 captions against 10,000 images
/// (text-to-image), each query reduced to its rank, as `eval --suite rococo` does.
pub(super) fn retrieval(args: &BenchPlan) -> Result<(String, Vec<PartResult>)> {
    let _ = args;
    let dev = candle_core::Device::Cpu;
    let compute = |e: candle_core::Error| Error::new(ErrorKind::Compute, format!("benchmark: {e}"));
    let unit = |n: usize| -> Result<Tensor> {
        let x = Tensor::randn(0f32, 1.0, (n, 512), &dev).map_err(compute)?;
        benchctl_models::models::transformer::l2_normalise(&x).map_err(compute)
    };
    let (images, captions) = (unit(5_000)?, unit(50_010)?);
    let (queries, gallery) = (unit(25_010)?, unit(10_000)?);
    let i2t_altered: Vec<bool> = (0..50_010).map(|c| c % 2 == 1).collect();
    let t2i_altered: Vec<bool> = (0..10_000).map(|c| c >= 5_000).collect();
    let mut times = Vec::new();
    for _ in 0..args.iters {
        let started = Instant::now();
        let i2t = crate::evaluate::galleries::rank_gallery(
            &images,
            &captions,
            &|q| (0..5).map(|k| (q * 10 + k) % 50_010).collect(),
            &i2t_altered,
            benchctl_scoring::metrics::Ties::Strict,
        )?;
        let t2i = crate::evaluate::galleries::rank_gallery(
            &queries,
            &gallery,
            &|q| vec![q % 5_000],
            &t2i_altered,
            benchctl_scoring::metrics::Ties::Strict,
        )?;
        times.push(started.elapsed().as_secs_f64());
        if i2t.len() != 5_000 || t2i.len() != 25_010 {
            return Err(Error::new(ErrorKind::Compute, "benchmark: a query lost its outcome"));
        }
    }
    let mut r = summarise("retrieval", 5_000 + 25_010, &times);
    r.extra = vec![("seconds_per_pass", times.iter().sum::<f64>() / times.len() as f64)];
    Ok(("RoCOCO-scale scoring (5,000 × 50,010 and 25,010 × 10,000)".to_string(), vec![r]))
}

/// The image encoders' MLP products on a batch of 32 images, `per_second` in GFLOP/s:
/// ViT-B/32's `(1600, 768) · (3072, 768)ᵀ + b` as the encoders run it (weights packed once,
/// when the model loads: `transformer::Dense`) and through `kernels::dense_2d`, which packs them
/// on every call; then ViT-B/16's two (6,304 rows: an output of 77 MB, which no cache holds),
/// packed at load. `scripts/bench/bench_dense_torch.py` times PyTorch's `F.linear` on the same
/// shapes.
#[cfg(feature = "dev-bench")]
pub(super) fn dense(args: &BenchPlan) -> Result<(String, Vec<PartResult>)> {
    let dev = candle_core::Device::Cpu;
    let compute = |e: candle_core::Error| Error::new(ErrorKind::Compute, format!("benchmark: {e}"));
    let time =
        |name: &'static str, flops: f64, product: &dyn Fn() -> candle_core::Result<Tensor>| -> Result<PartResult> {
            product().map_err(compute)?;
            let mut times = Vec::new();
            for _ in 0..args.iters.max(1) {
                let started = Instant::now();
                std::hint::black_box(product().map_err(compute)?);
                times.push(started.elapsed().as_secs_f64());
            }
            let best = times.iter().copied().fold(f64::INFINITY, f64::min);
            let gflops = flops / best / 1e9;
            let mut r = summarise(name, 1, &times);
            r.per_second = gflops;
            r.extra = vec![("gflops", gflops)];
            Ok(r)
        };
    let mut rows = Vec::new();
    let shapes = [
        ("dense-b32-mlp-up", 1600, 768, 3072),
        ("dense-b16-mlp-up", 6304, 768, 3072),
        ("dense-b16-mlp-down", 6304, 3072, 768),
    ];
    for (name, m, k, n) in shapes {
        let x = Tensor::randn(0f32, 1.0, (m, k), &dev).map_err(compute)?;
        let w = Tensor::randn(0f32, 1.0, (n, k), &dev).map_err(compute)?;
        let b = Tensor::randn(0f32, 1.0, n, &dev).map_err(compute)?;
        let layer = benchctl_models::models::transformer::Dense::from_weights(w.clone(), Some(b.clone()))?;
        let flops = 2.0 * (m * k * n) as f64;
        rows.push(time(name, flops, &|| layer.forward(&x))?);
        if m == 1600 {
            let per_call = || benchctl_models::kernels::dense_2d(&x, &w, Some(&b));
            rows.push(time("dense-b32-packed-per-call", flops, &per_call)?);
        }
    }
    Ok((format!("dense layers (m, k) · (n, k)ᵀ + b, {} tier", benchctl_cpu::Tier::current().isa()), rows))
}

/// The fp32 multiply-add rate of the current tier: independent chains of FMAs (AVX-512: 16
/// registers of 16 lanes; AVX2: 12 of 8; generic: 64 lanes as the compiler vectorises them,
/// fused only where the target has FMA) on every thread, `per_second` in GFLOP/s (2 per FMA).
#[cfg(feature = "dev-bench")]
pub(super) fn peak(args: &BenchPlan) -> Result<(String, Vec<PartResult>)> {
    const ITERATIONS: usize = 20_000_000;
    let tier = benchctl_cpu::Tier::current();
    let threads = rayon::current_num_threads();
    let mut times = Vec::new();
    let mut flops_per_iteration = 0;
    for _ in 0..args.iters.max(1) {
        let started = Instant::now();
        let results: Vec<(f32, usize)> = (0..threads).into_par_iter().map(|_| fma_chains(tier, ITERATIONS)).collect();
        times.push(started.elapsed().as_secs_f64());
        flops_per_iteration = results.iter().map(|r| r.1).sum();
        std::hint::black_box(results);
    }
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    let gflops = (ITERATIONS * flops_per_iteration) as f64 / best / 1e9;
    let mut r = summarise("peak", 1, &times);
    r.per_second = gflops;
    r.extra = vec![("gflops", gflops)];
    Ok((format!("fp32 multiply-add peak, {} tier, {threads} threads", tier.isa()), vec![r]))
}

/// `iterations` rounds of independent multiply-add chains; returns a value that depends on
/// all of them (so nothing is optimised away) and the FLOPs per round.
#[cfg(feature = "dev-bench")]
fn fma_chains(tier: benchctl_cpu::Tier, iterations: usize) -> (f32, usize) {
    match tier.isa() {
        #[cfg(all(feature = "dev-bench", target_arch = "x86_64"))]
        // SAFETY: the tier exists only where the CPU has its features.
        benchctl_cpu::Isa::Avx512 => unsafe { fma_chains_avx512(iterations) },
        #[cfg(all(feature = "dev-bench", target_arch = "x86_64"))]
        // SAFETY: as above.
        benchctl_cpu::Isa::Avx2 => unsafe { fma_chains_avx2(iterations) },
        _ => {
            let mut acc = [1f32; 64];
            let (m, a) = (std::hint::black_box(0.999_999f32), std::hint::black_box(1e-7f32));
            for _ in 0..iterations {
                for x in acc.iter_mut() {
                    *x = benchctl_cpu::madd::<{ benchctl_cpu::GENERIC_FUSED }>(*x, m, a);
                }
            }
            (acc.iter().sum(), 64 * 2)
        }
    }
}

#[cfg(all(feature = "dev-bench", target_arch = "x86_64"))]
#[target_feature(enable = "avx512f")]
unsafe fn fma_chains_avx512(iterations: usize) -> (f32, usize) {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_set1_ps(1.0); 16];
    let (m, a) = (_mm512_set1_ps(std::hint::black_box(0.999_999)), _mm512_set1_ps(std::hint::black_box(1e-7)));
    for _ in 0..iterations {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, m, a);
        }
    }
    let sum = acc.iter().fold(_mm512_setzero_ps(), |s, x| _mm512_add_ps(s, *x));
    (_mm512_reduce_add_ps(sum), 16 * 16 * 2)
}

#[cfg(all(feature = "dev-bench", target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_chains_avx2(iterations: usize) -> (f32, usize) {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_set1_ps(1.0); 12];
    let (m, a) = (_mm256_set1_ps(std::hint::black_box(0.999_999)), _mm256_set1_ps(std::hint::black_box(1e-7)));
    for _ in 0..iterations {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, m, a);
        }
    }
    let sum = acc.iter().fold(_mm256_setzero_ps(), |s, x| _mm256_add_ps(s, *x));
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), sum);
    (lanes.iter().sum(), 12 * 8 * 2)
}

/// The fused self-attention alone, per (sequence, heads, head width): the image towers'
/// sequences (ViT-B/32 50, B/16 197, L/14 257, L/14-336 577, SigLIP so400m-384 729 tokens) with
/// heads of 64, and with heads of 128 (PE-Core G and the generative models' vision towers and
/// prompts, 256 to 1,024 tokens). `args.batch` rows; on a GPU (`--device cuda`) in `args.dtype`
/// under `BENCHCTL_CUDA_KERNELS`, on the CPU in f32 on the current tier; `per_second` is calls
/// per second, `extra` the microseconds per call and the rate in TFLOP/s
/// (4·rows·heads·seq²·width, the two products). `scripts/bench/bench_attention_gpu.py` and
/// `bench_attention_cpu.py` time PyTorch's `scaled_dot_product_attention` beside it.
#[cfg(feature = "dev-bench")]
pub(super) fn attention(args: &BenchPlan) -> Result<(String, Vec<PartResult>)> {
    // ViT-B/32, B/16, L/14 at 224 and 336 px, 128-wide heads, CLIP's texts, then the towers whose
    // heads are no multiple of 32: SigLIP so400m at 384 px (72) and ViT-H/14 at 224 and 378 px (80).
    const SHAPES: [(&str, usize, usize, usize); 13] = [
        ("attention-50x12x64", 50, 12, 64),
        ("attention-197x12x64", 197, 12, 64),
        ("attention-257x16x64", 257, 16, 64),
        ("attention-577x16x64", 577, 16, 64),
        ("attention-729x16x64", 729, 16, 64),
        ("attention-257x8x128", 257, 8, 128),
        ("attention-577x8x128", 577, 8, 128),
        ("attention-729x8x128", 729, 8, 128),
        ("attention-1024x16x128", 1024, 16, 128),
        ("attention-77x8x64", 77, 8, 64),
        ("attention-729x16x72", 729, 16, 72),
        ("attention-257x16x80", 257, 16, 80),
        ("attention-730x16x80", 730, 16, 80),
    ];
    let device = args.device.open()?;
    let compute = |e: candle_core::Error| Error::new(ErrorKind::Compute, format!("benchmark: {e}"));
    let (kernels, dtype) = attention_kernels(&device, args.dtype)?;
    let rows = args.batch as usize;
    let mut results = Vec::new();
    for (name, seq, heads, head) in SHAPES {
        let qkv = Tensor::randn(0f32, 1.0, (rows, seq, 3 * heads * head), &device)
            .and_then(|t| t.to_dtype(dtype))
            .map_err(compute)?;
        let call = || -> Result<Tensor> {
            let attended = match kernels {
                #[cfg(feature = "cuda")]
                Some(kernels) => benchctl_models::cuda::self_attention_with(kernels, &qkv, heads, None, None),
                _ => benchctl_models::kernels::self_attention(&qkv, heads, None),
            };
            attended.map_err(compute)?.ok_or_else(|| {
                Error::new(ErrorKind::Usage, format!("benchmark: the fused attention does not take {name}"))
            })
        };
        // GPU calls are queued on the stream: each timing covers `calls` of them and one
        // synchronisation.
        let calls = if device.is_cuda() { 20 } else { 1 };
        call()?;
        device.synchronize().map_err(compute)?;
        let mut times = Vec::new();
        for _ in 0..args.iters.max(1) {
            let started = Instant::now();
            for _ in 0..calls {
                std::hint::black_box(call()?);
            }
            device.synchronize().map_err(compute)?;
            times.push(started.elapsed().as_secs_f64() / calls as f64);
        }
        let best = times.iter().copied().fold(f64::INFINITY, f64::min);
        let flops = 4.0 * (rows * heads * seq * seq * head) as f64;
        let mut r = summarise(name, 1, &times);
        r.extra = vec![("us_per_call", best * 1e6), ("tflops", flops / best / 1e12)];
        results.push(r);
    }
    let on = match kernels {
        Some(kernels) => format!("{kernels:?} kernels, {dtype:?}"),
        None => format!("CPU, {} tier, F32", benchctl_cpu::Tier::current().isa()),
    };
    Ok((format!("fused self-attention ({on}), {rows} rows"), results))
}

/// The GPU's kernels and `dtype` on CUDA; none and f32 on the CPU (its fused attention is f32).
#[cfg(all(feature = "dev-bench", feature = "cuda"))]
fn attention_kernels(
    device: &candle_core::Device,
    dtype: candle_core::DType,
) -> Result<(Option<benchctl_models::cuda::CudaKernels>, candle_core::DType)> {
    Ok(if device.is_cuda() {
        (Some(benchctl_models::cuda::CudaKernels::current()), dtype)
    } else {
        (None, candle_core::DType::F32)
    })
}

/// On the CPU, in f32 (its fused attention is f32).
#[cfg(all(feature = "dev-bench", not(feature = "cuda")))]
fn attention_kernels(
    device: &candle_core::Device,
    _dtype: candle_core::DType,
) -> Result<(Option<std::convert::Infallible>, candle_core::DType)> {
    if device.is_cuda() {
        return Err(Error::new(
            ErrorKind::Usage,
            "benchmark --part attention --device cuda: needs a build with `--features cuda`",
        ));
    }
    Ok((None, candle_core::DType::F32))
}
