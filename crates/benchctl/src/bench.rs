//! `benchctl bench`: encoder throughput of a model's architecture on random weights, so
//! it runs anywhere without downloading anything.

use std::time::Instant;

use benchctl_models::models::clip::{Clip, ClipConfig};
use benchctl_models::registry::{self, Architecture};
use candle_core::{DType, Tensor};

use crate::cli::{BenchArgs, BenchPart};
use crate::{Error, ErrorKind, Result};

/// Throughput and latency of one encoder.
#[derive(Debug, Clone, PartialEq)]
pub struct PartResult {
    pub part: &'static str,
    pub batch: usize,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub max_ms: f64,
}

/// Runs the benchmark and returns one result per part.
pub fn run(args: &BenchArgs) -> Result<(String, Vec<PartResult>)> {
    let (name, config) = match &args.config {
        Some(path) => (path.display().to_string(), ClipConfig::from_file(path)?),
        None => {
            let entry = registry::find(&args.model)?;
            match entry.architecture {
                Architecture::Clip if entry.id == "clip-vit-b32" => (entry.id.to_string(), ClipConfig::vit_b32()),
                Architecture::Clip | Architecture::OpenClip => {
                    return Err(Error::new(
                        ErrorKind::Usage,
                        format!("benchmark `{}`: pass its config.json with --config", entry.id),
                    ))
                }
                Architecture::Siglip | Architecture::Blip => {
                    return Err(Error::new(
                        ErrorKind::Usage,
                        format!("benchmark `{}`: the benchmark covers CLIP-architecture models only", entry.id),
                    ))
                }
            }
        }
    };
    let device = benchctl_models::device::parse_device(&args.device)?;
    let dtype = benchctl_models::device::parse_dtype(&args.dtype)?;
    let model = Clip::random(config.clone(), dtype, &device)?;
    let batch = args.batch as usize;
    let compute = |e: candle_core::Error| Error::new(ErrorKind::Compute, format!("benchmark: {e}"));
    let mut results = Vec::new();
    if matches!(args.part, BenchPart::Image | BenchPart::Both) {
        let size = config.vision_config.image_size;
        let pixels = Tensor::randn(0f32, 1f32, (batch, 3, size, size), &device)
            .and_then(|t| t.to_dtype(dtype))
            .map_err(compute)?;
        let times = time(args.iters as usize, || {
            let out = model.image_features(&pixels)?;
            out.to_dtype(DType::F32).and_then(|o| o.sum_all()).and_then(|s| s.to_scalar::<f32>()).map_err(compute)?;
            Ok(())
        })?;
        results.push(summarise("image", batch, &times));
    }
    if matches!(args.part, BenchPart::Text | BenchPart::Both) {
        let tokens = args.text_tokens as usize;
        let vocab = config.text_config.vocab_size as u32;
        // Deterministic pseudo-random ids below the end token, which closes each text.
        let ids: Vec<Vec<u32>> = (0..batch)
            .map(|b| {
                let mut row: Vec<u32> =
                    (0..tokens - 1).map(|t| ((b * 7919 + t * 104_729) as u32) % (vocab - 2)).collect();
                row.push(vocab - 1);
                row
            })
            .collect();
        let times = time(args.iters as usize, || {
            let out = model.text_features(&ids)?;
            out.to_dtype(DType::F32).and_then(|o| o.sum_all()).and_then(|s| s.to_scalar::<f32>()).map_err(compute)?;
            Ok(())
        })?;
        results.push(summarise("text", batch, &times));
    }
    Ok((name, results))
}

/// One warm-up call, then `iters` timed calls; seconds each.
fn time(iters: usize, mut f: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    f()?;
    (0..iters)
        .map(|_| {
            let t = Instant::now();
            f()?;
            Ok(t.elapsed().as_secs_f64())
        })
        .collect()
}

fn summarise(part: &'static str, batch: usize, times: &[f64]) -> PartResult {
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
    }
}

/// Peak resident set size of this process in MiB (Linux), if known.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
