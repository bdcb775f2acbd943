//! `benchctl bench`: encoder throughput of a model's architecture on random weights, so
//! it runs anywhere without downloading anything.

use std::time::Instant;

use candle_core::DType;

mod annotations;
mod e2e;
mod embedded;
mod encoders;
mod gate;
mod intervals;
mod kernels;
mod preprocess;
mod vqascore;
use crate::{Error, ErrorKind, Result};

/// What `benchctl bench` measures.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    /// The zoo id whose architecture is benchmarked (weights are random).
    pub model: String,
    /// A config.json to benchmark instead of the zoo entry's architecture.
    pub config: Option<std::path::PathBuf>,
    pub part: Part,
    /// Inputs per forward pass.
    pub batch: u32,
    /// Timed batches per part (after one warm-up batch).
    pub iters: u32,
    /// Tokens per benchmark text, start and end tokens included.
    pub text_tokens: u32,
    pub device: benchctl_models::device::DeviceSpec,
    pub dtype: DType,
    /// Worker threads of the CPU kernels; `None`: all cores.
    pub threads: Option<u32>,
    /// `Part::Preprocess`: the images to decode (searched recursively).
    pub images: Option<std::path::PathBuf>,
    /// `Part::Preprocess` without `images`: where to keep the generated set.
    pub keep_images: Option<std::path::PathBuf>,
}

/// What is measured (`benchctl bench --help` describes each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Image,
    Text,
    Both,
    E2e,
    Retrieval,
    Dense,
    Annotations,
    Embedded,
    Intervals,
    Gate,
    Preprocess,
    Peak,
    Attention,
    Vqa,
}

/// Throughput and latency of one part.
#[derive(Debug, Clone, PartialEq)]
pub struct PartResult {
    pub part: &'static str,
    pub batch: usize,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub max_ms: f64,
    /// Further measurements of the part, e.g. `("e2e_over_encoder", 1.07)`.
    pub extra: Vec<(&'static str, f64)>,
}

/// Sets the worker threads of every CPU kernel: rayon's global pool, which candle, gemm and
/// benchctl's kernels all use. It must be built before the first parallel operation; if it
/// already exists, the benchmark says so rather than measuring another thread count.
fn set_threads(threads: usize) -> Result<()> {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build_global().map_err(|e| {
        Error::new(ErrorKind::Usage, format!("benchmark on {threads} threads: the thread pool already exists ({e})"))
    })
}

/// Runs the benchmark and returns one result per part.
pub fn run(args: &BenchPlan) -> Result<(String, Vec<PartResult>)> {
    if let Some(threads) = args.threads {
        set_threads(threads as usize)?;
    }
    if args.config.is_none() && args.model.starts_with("fiber") && args.part != Part::Preprocess {
        return encoders::fiber(args);
    }
    match args.part {
        Part::Image | Part::Text | Part::Both => encoders::towers(args),
        Part::E2e => e2e::run(args),
        Part::Retrieval => kernels::retrieval(args),
        #[cfg(feature = "dev-bench")]
        Part::Peak => kernels::peak(args),
        #[cfg(feature = "dev-bench")]
        Part::Dense => kernels::dense(args),
        #[cfg(not(feature = "dev-bench"))]
        Part::Peak | Part::Dense => Err(Error::new(
            ErrorKind::Usage,
            "benchmark --part peak or dense: a developer's benchmark, in builds with `--features dev-bench` (`just bench-vs-torch` makes one)",
        )),
        #[cfg(feature = "dev-bench")]
        Part::Attention => kernels::attention(args),
        #[cfg(not(feature = "dev-bench"))]
        Part::Attention => Err(Error::new(
            ErrorKind::Usage,
            "benchmark --part attention: a developer's benchmark, in builds with `--features dev-bench` (add `cuda` for the GPU's kernels)",
        )),
        Part::Annotations => annotations::run(),
        Part::Embedded => embedded::run(),
        Part::Intervals => intervals::run(),
        Part::Gate => gate::run(),
        Part::Preprocess => preprocess::run(args),
        Part::Vqa => vqascore::run(args),
    }
}

/// One warm-up call, then `iters` timed calls; seconds each.
pub(super) fn time(iters: usize, mut f: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    f()?;
    (0..iters)
        .map(|_| {
            let t = Instant::now();
            f()?;
            Ok(t.elapsed().as_secs_f64())
        })
        .collect()
}

pub(super) fn summarise(part: &'static str, batch: usize, times: &[f64]) -> PartResult {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize] * 1e3;
    let total: f64 = times.iter().sum();
    PartResult {
        part,
        batch,
        per_second: (batch * times.len()) as f64 / total,
        p50_ms: pct(0.5),
        p90_ms: pct(0.9),
        max_ms: pct(1.0),
        extra: Vec::new(),
    }
}

/// The resident set now, in MiB (`VmRSS`).
pub(super) fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
}

/// An I/O failure of a benchmark's setup, saying what it was doing.
pub(super) fn io(what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::new(ErrorKind::Compute, format!("benchmark: {what}: {e}"))
}

/// Peak resident set size of this process in MiB (Linux), if known.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The results as JSON: the setting and, per part, its throughput, latencies and extras.
pub fn to_json(name: &str, args: &BenchPlan, parts: &[PartResult]) -> serde_json::Value {
    let finite = |v: f64| {
        if v.is_finite() {
            serde_json::json!(v)
        } else {
            serde_json::Value::Null
        }
    };
    serde_json::json!({
        "model": name,
        "batch": args.batch,
        "threads": rayon::current_num_threads(),
        "cpu_tier": benchctl_cpu::Tier::current().isa().name(),
        "gemm_isa": benchctl_models::kernels::gemm_isa().name(),
        "dtype": benchctl_models::device::dtype_name(args.dtype),
        "peak_rss_mib": peak_rss_mib(),
        "parts": parts.iter().map(|p| {
            let mut part = serde_json::json!({
                "part": p.part, "batch": p.batch, "per_second": finite(p.per_second),
                "p50_ms": finite(p.p50_ms), "p90_ms": finite(p.p90_ms), "max_ms": finite(p.max_ms),
            });
            for (k, v) in &p.extra {
                part[*k] = finite(*v);
            }
            part
        }).collect::<Vec<_>>(),
    })
}
